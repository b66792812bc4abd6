"""ShareFetch / ShareAcknowledge answers encode on the first try (no "double encode").

The dispatcher falls back to rebuilding a response with ``convert(..., force=True)`` when kio's
writer rejects a plain ``int`` where it wants ``ErrorCode``. A code review suspected the share handlers
of hitting it with ``acknowledge_error_code=int(...)``; they do not: kio 0.6.5 types that field
``int16`` (only ``error_code`` fields are ``ErrorCode``). These tests make the fallback fail
loudly and check both APIs, both versions, with and without acks, so a handler that does start
double-encoding is caught.
"""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v1 import request as a1
from kio.schema.share_acknowledge.v2 import request as a2
from kio.schema.share_fetch.v1 import request as f1
from kio.schema.share_fetch.v2 import request as f2

from kshare_sidecar.api import Dispatcher, InMemoryTopicCatalog, build_registry
from kshare_sidecar.api import registry as registry_module
from kshare_sidecar.api import shares as shares_api
from kshare_sidecar.share.manager import PartitionOut, ShareOut
from kshare_sidecar.share.engine.types import AcquiredRecords
from tests.unit.api.conftest import NODE, FakeConnection, request_frame
from kshare_sidecar.wire import codec

TID = uuid.UUID(int=5)


class FakeShares:
    """What SharePartitionManager answers: one partition with acks (ACCEPT failed), one without."""

    def _out(self) -> ShareOut:
        return ShareOut(lock_timeout_ms=30_000, partitions=[
            PartitionOut(TID, 0, ack_error=ErrorCode.invalid_record_state, ack_message="not acquired",
                         records=b"", acquired=[AcquiredRecords(0, 4, 1)]),
            PartitionOut(TID, 1)])

    async def share_fetch(self, **_: object) -> ShareOut:
        return self._out()

    async def share_acknowledge(self, **_: object) -> ShareOut:
        return self._out()

    def connection_closed(self, conn_id: int) -> None:
        pass


@pytest.fixture
def dispatcher(monkeypatch: pytest.MonkeyPatch) -> Dispatcher:
    real = registry_module.convert

    def no_second_encode(source, target_cls, *, force: bool = False):
        assert not force, "the response was encoded twice (kio rejected the handler's first answer)"
        return real(source, target_cls)

    monkeypatch.setattr(registry_module, "convert", no_second_encode)
    registry = build_registry(InMemoryTopicCatalog())
    shares_api.register(registry, FakeShares())
    return Dispatcher(registry, NODE)


def _fetch(mod, version: int):
    extra = {"share_acquire_mode": 0, "is_renew_ack": False} if version >= 2 else {}
    return mod.ShareFetchRequest(
        group_id="g", member_id="m", share_session_epoch=0, max_wait=datetime.timedelta(milliseconds=10),
        min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10, forgotten_topics_data=(),
        topics=(mod.FetchTopic(topic_id=TID, partitions=(
            mod.FetchPartition(partition_index=0, acknowledgement_batches=(mod.AcknowledgementBatch(
                first_offset=0, last_offset=0, acknowledge_types=(1,)),)),
            mod.FetchPartition(partition_index=1, acknowledgement_batches=()))),), **extra)


def _ack(mod, version: int):
    extra = {"is_renew_ack": False} if version >= 2 else {}
    return mod.ShareAcknowledgeRequest(
        group_id="g", member_id="m", share_session_epoch=1, topics=(mod.AcknowledgeTopic(topic_id=TID, partitions=(
            mod.AcknowledgePartition(partition_index=0, acknowledgement_batches=(mod.AcknowledgementBatch(
                first_offset=0, last_offset=0, acknowledge_types=(1,)),)),)),), **extra)


@pytest.mark.parametrize("request_", [_fetch(f1, 1), _fetch(f2, 2), _ack(a1, 1), _ack(a2, 2)],
                         ids=["fetch-v1", "fetch-v2", "ack-v1", "ack-v2"])
async def test_share_answers_encode_once(dispatcher: Dispatcher, request_) -> None:
    out = await dispatcher.handle(request_frame(request_), FakeConnection())
    assert out is not None
    _, body = codec.decode_response(out[4:], codec.response_class(request_.__api_key__, request_.__version__))
    assert body.error_code == ErrorCode.none
    parts = {p.partition_index: p for p in body.responses[0].partitions}
    if hasattr(parts[0], "acknowledge_error_code"):  # ShareFetch
        assert parts[0].acknowledge_error_code == ErrorCode.invalid_record_state
        assert parts[1].acknowledge_error_code == ErrorCode.none
    else:
        assert parts[0].error_code == ErrorCode.none
