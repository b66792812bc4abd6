from __future__ import annotations

from types import SimpleNamespace

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from kshare_sidecar.api import ApiRegistry, convert, target_class
from kshare_sidecar.api.versions import ApiVersionsHandler
from kshare_sidecar.wire import codec

from .conftest import FakeConnection, request_frame


def ranges(body) -> dict[int, tuple[int, int]]:
    return {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}


@pytest.mark.parametrize("version", range(0, 5))
async def test_every_version_round_trips(call, version: int) -> None:
    request = convert(
        {
            "client_software_name": "confluent-kafka-python",
            "client_software_version": "2.16.1-rdkafka-2.16.0",
        },
        target_class(18, version, EntityType.request),
    )
    header, body = await call(request, correlation_id=3)
    assert header.correlation_id == 3
    assert body.error_code == ErrorCode.none
    served = ranges(body)
    assert served[18] == (0, 4)
    assert served[3][1] >= 12  # librdkafka needs Metadata max >= 12 (and uses 13)
    assert served[3] == (0, 13)
    assert served[10] == (0, 6)
    # librdkafka's MSGVER2 gate: Produce max >= 3 and Fetch max >= 4 must be listed.
    assert served[0][1] >= 3 and served[1][1] >= 4
    assert list(served) == sorted(served)


@pytest.mark.parametrize("version", [5, 9, 300])
async def test_unknown_version_gets_v0_unsupported_version_with_ranges(dispatcher, version: int) -> None:
    request = ApiVersionsRequestV3(client_software_name="x", client_software_version="1")
    frame = bytearray(request_frame(request))
    frame[2:4] = version.to_bytes(2, "big")  # a newer client; kio cannot parse the body
    out = await dispatcher.handle(bytes(frame), FakeConnection())
    header, body = codec.decode_response(out[4:], ApiVersionsResponseV0)
    assert header.correlation_id == 1
    assert body.error_code == ErrorCode.unsupported_version
    assert ranges(body)[18] == (0, 4)
    assert ranges(body) == {k: (lo, hi) for k, lo, hi in dispatcher.registry.ranges()}


async def test_registered_apis_are_advertised(dispatcher, call) -> None:
    async def heartbeat(ctx, header, request):  # pragma: no cover - only advertised here
        raise AssertionError

    dispatcher.registry.register(76, 1, 1, heartbeat)
    _, body = await call(ApiVersionsRequestV3(client_software_name="x", client_software_version="1"))
    assert ranges(body)[76] == (1, 1)


async def test_features_are_carried_in_v3_tags_and_v4_adds_those_starting_at_0(call) -> None:
    """KIP-1022: below v4 a supported feature whose lowest version is 0 is left out, as a broker does."""
    registry = ApiRegistry()
    handler = ApiVersionsHandler(
        registry, supported_features=[("metadata.version", 7, 30), ("share.version", 0, 1)],
        finalized_features=[("share.version", 1, 1)], finalized_features_epoch=5,
    )
    registry.register(18, 0, 4, handler)
    v3 = convert(await handler(SimpleNamespace(api_version=3), None, None), target_class(18, 3, EntityType.response))
    assert [f.name for f in v3.supported_features] == ["metadata.version"]
    assert [f.name for f in v3.finalized_features] == ["share.version"]
    assert v3.finalized_features_epoch == 5
    v4 = convert(await handler(SimpleNamespace(api_version=4), None, None), target_class(18, 4, EntityType.response))
    assert [f.name for f in v4.supported_features] == ["metadata.version", "share.version"]


def test_registration_is_validated_against_kio() -> None:
    registry = ApiRegistry()

    async def handler(ctx, header, request):  # pragma: no cover
        return None

    with pytest.raises(ValueError):
        registry.register(3, 0, 99, handler)  # kio has no Metadata v99
    with pytest.raises(ValueError):
        registry.register(3, 2, 1, handler)
    registry.register(3, 0, 13, handler)
    with pytest.raises(ValueError):
        registry.register(3, 0, 12, handler)
    registry.register(3, 0, 12, handler, replace=True)
    assert registry.ranges() == [(3, 0, 12)]


def test_sidecar_features_keep_the_backends_and_put_share_version_at_the_sidecars_level():
    from kshare_sidecar.api.versions import sidecar_features

    out = sidecar_features([("metadata.version", 1, 21), ("share.version", 0, 1)],
                           [("metadata.version", 21, 21), ("share.version", 0, 0)], epoch=7)
    assert out == {"supported_features": [("metadata.version", 1, 21), ("share.version", 0, 2)],
                   "finalized_features": [("metadata.version", 21, 21), ("share.version", 2, 2)],
                   "finalized_features_epoch": 7}
    # no backend answer (pass-through off): only share.version, at an epoch clients record
    assert sidecar_features() == {"supported_features": [("share.version", 0, 2)],
                                  "finalized_features": [("share.version", 2, 2)], "finalized_features_epoch": 0}
