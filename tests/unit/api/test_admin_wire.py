"""Every advertised version of the admin APIs answers and encodes (dict results -> each version)."""

from __future__ import annotations

import importlib

import pytest
from kio.index import load_response_from_request
from kio.schema.errors import ErrorCode

from kshare_sidecar.api import Dispatcher, InMemoryTopicCatalog, NodeIdentity, build_registry
from kshare_sidecar.api import admin as admin_api
from kshare_sidecar.api import configs as configs_api
from kshare_sidecar.wire import codec
from tests.unit.group.test_admin_service import FakeBackend, env  # noqa: F401 - fixture

NODE = NodeIdentity(node_id=1, host="127.0.0.1", port=9192)


def _request(api: str, version: int, **fields):
    mod = importlib.import_module(f"kio.schema.{api}.v{version}.request")
    cls = next(getattr(mod, n) for n in dir(mod) if n.endswith("Request") and n != "Request"
               and hasattr(getattr(mod, n), "__api_key__"))
    return cls, mod


async def _roundtrip(dispatcher, request):
    out = await dispatcher.handle(codec.encode_request(request, 7, "t")[4:])
    return codec.decode_response(out[4:], load_response_from_request(type(request)))[1]


@pytest.fixture
def dispatcher(env):  # noqa: F811
    registry = build_registry(InMemoryTopicCatalog())
    admin_api.register(registry, env, FakeBackend())
    configs_api.register(registry, env)
    return Dispatcher(registry, NODE)


@pytest.mark.parametrize("version", range(0, 6))
async def test_list_groups_all_versions(dispatcher, version):
    cls, _ = _request("list_groups", version)
    kwargs = {}
    if version >= 4:
        kwargs["states_filter"] = ()
    if version >= 5:
        kwargs["types_filter"] = ()
    body = await _roundtrip(dispatcher, cls(**kwargs))
    assert body.error_code == ErrorCode.none and body.groups == ()


@pytest.mark.parametrize("version", range(1, 5))
async def test_describe_configs_all_versions(dispatcher, version):
    cls, mod = _request("describe_configs", version)
    res = mod.DescribeConfigsResource(resource_type=32, resource_name="g", configuration_keys=None)
    kwargs = {"resources": (res,), "include_synonyms": True}
    if version >= 3:
        kwargs["include_documentation"] = True
    body = await _roundtrip(dispatcher, cls(**kwargs))
    names = [c.name for c in body.results[0].configs]
    assert "share.auto.offset.reset" in names and body.results[0].error_code == ErrorCode.none


@pytest.mark.parametrize("version", range(1, 11))
async def test_list_offsets_all_versions(dispatcher, version):
    cls, mod = _request("list_offsets", version)
    part = {"partition_index": 0, "timestamp": -2}
    if version >= 4:
        part["current_leader_epoch"] = -1
    topic = mod.ListOffsetsTopic(name="t", partitions=(mod.ListOffsetsPartition(**part),))
    kwargs = {"replica_id": -1, "topics": (topic,)}
    if version >= 2:
        kwargs["isolation_level"] = 0
    if version >= 10:
        kwargs["timeout"] = __import__("datetime").timedelta(seconds=1)
    body = await _roundtrip(dispatcher, cls(**kwargs))
    (p,) = body.topics[0].partitions
    assert p.error_code == ErrorCode.none and p.offset == 0


async def test_share_group_describe_and_offsets_unknown_group(dispatcher):
    from kio.schema.describe_share_group_offsets.v0 import request as dso
    from kio.schema.share_group_describe.v1 import request as sgd

    body = await _roundtrip(dispatcher, sgd.ShareGroupDescribeRequest(group_ids=("nope",),
                                                                       include_authorized_operations=False))
    assert body.groups[0].error_code == ErrorCode.group_id_not_found
    # Kafka 4.3.1 (measured): an unknown or deleted group has no offsets, and that is no error
    body = await _roundtrip(dispatcher, dso.DescribeShareGroupOffsetsRequest(groups=(
        dso.DescribeShareGroupOffsetsRequestGroup(group_id="nope", topics=None),)))
    assert body.groups[0].error_code == ErrorCode.none and body.groups[0].topics == ()
