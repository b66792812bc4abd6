from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest as FindCoordinatorRequestV0
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest as FindCoordinatorRequestV2
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as FindCoordinatorRequestV4
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest as FindCoordinatorRequestV6
from kio.static.constants import EntityType

from kshare_sidecar.api import convert, target_class

from .conftest import NODE


def find(version: int, keys: list[str], key_type: int = 0) -> object:
    cls = target_class(10, version, EntityType.request)
    source = {"key": keys[0], "key_type": key_type, "coordinator_keys": keys}
    return convert(source, cls)


@pytest.mark.parametrize("version", range(0, 7))
async def test_every_version_round_trips(call, version: int) -> None:
    _, body = await call(find(version, ["g1"]))
    if version < 4:
        assert (body.error_code, body.node_id, body.host, body.port) == (0, 7, NODE.host, NODE.port)
    else:
        (c,) = body.coordinators
        assert (c.key, c.error_code, c.node_id, c.host, c.port) == ("g1", 0, 7, NODE.host, NODE.port)


async def test_v0_single_key(call) -> None:
    _, body = await call(FindCoordinatorRequestV0(key="grp"))
    assert body.node_id == NODE.node_id


async def test_v2_single_key_group(call) -> None:
    header, body = await call(FindCoordinatorRequestV2(key="share-group", key_type=0), correlation_id=9)
    assert header.correlation_id == 9
    assert (body.error_code, body.error_message, body.node_id) == (ErrorCode.none, None, NODE.node_id)


async def test_v4_batched(call) -> None:
    _, body = await call(FindCoordinatorRequestV4(key_type=0, coordinator_keys=("a", "b", "c")))
    assert [(c.key, c.node_id, c.error_code) for c in body.coordinators] == [
        ("a", 7, ErrorCode.none),
        ("b", 7, ErrorCode.none),
        ("c", 7, ErrorCode.none),
    ]


async def test_v6_batched_group_and_share_key(call) -> None:
    _, body = await call(FindCoordinatorRequestV6(key_type=0, coordinator_keys=("g",)))
    assert body.coordinators[0].node_id == NODE.node_id
    _, body = await call(FindCoordinatorRequestV6(key_type=2, coordinator_keys=("g:topic:0",)))
    (c,) = body.coordinators
    assert (c.error_code, c.node_id, c.host, c.port) == (ErrorCode.coordinator_not_available, -1, "", -1)


async def test_transaction_key_is_not_available(call) -> None:
    _, body = await call(FindCoordinatorRequestV2(key="txn", key_type=1))
    assert (body.error_code, body.node_id) == (ErrorCode.coordinator_not_available, -1)
    assert body.error_message


@pytest.mark.parametrize("key_type", [2, 3])
async def test_share_key_before_v6_and_unknown_types_are_invalid(call, key_type: int) -> None:
    _, body = await call(FindCoordinatorRequestV2(key="x", key_type=key_type))
    assert body.error_code == ErrorCode.invalid_request


async def test_empty_batch(call) -> None:
    _, body = await call(FindCoordinatorRequestV4(key_type=0, coordinator_keys=()))
    assert body.coordinators == ()
