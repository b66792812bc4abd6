"""Each distinct failure hostile frames caused (docs/wire.md, "Hostile input"), reproduced from its frames.

The frames that crashed the process are decoded in a subprocess, so a regression aborts the child
(SIGABRT from kio's allocator), not the test run.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import subprocess
import sys
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v1.response import ShareAcknowledgeResponse
from kio.schema.share_fetch.v1 import request as f1
from kio.schema.share_fetch.v1.response import ShareFetchResponse

from kshare_sidecar.testing.wirefuzz import uvarint
from kshare_sidecar.wire import MalformedFrame, codec
from kshare_sidecar.wire.prescan import PrescanError, plan_for, prescan

from .stack import NODE, TOPICS, FakeConn, Stack

pytestmark = pytest.mark.timeout(60)


def cstr(s: str) -> bytes:
    return uvarint(len(s.encode()) + 1) + s.encode()


def header(key: int, version: int, cid: int = 7, client: bytes = b"fuzz") -> bytes:
    return struct.pack(">hhih", key, version, cid, len(client)) + client + b"\x00"


def share_fetch_v1(topics_count_field: bytes, rest: bytes = b"") -> bytes:
    body = cstr("g") + cstr("m") + struct.pack(">iiiiii", 0, 500, 1, 1000, 100, 100)
    return header(78, 1) + body + topics_count_field + rest


#: The crash that killed the process: a ShareFetch v1 (48 bytes on the wire) whose Topics count is 2^32-2.
HUGE_TOPICS = share_fetch_v1(uvarint(2**32 - 1))
#: The same through a legacy (int32) count: Metadata v1 with 2^31-1 topics.
HUGE_LEGACY = struct.pack(">hhih", 3, 1, 7, -1) + struct.pack(">i", 2**31 - 1)
#: A huge count one level down: one topic whose Partitions count is 2^35-1 (a 5-byte varint).
HUGE_NESTED = share_fetch_v1(uvarint(2), bytes(16) + uvarint(2**35 - 1))
CRASHERS = {"huge-topics": HUGE_TOPICS, "huge-legacy": HUGE_LEGACY, "huge-nested": HUGE_NESTED}


def test_crash_frames_are_rejected_before_kio_allocates() -> None:
    script = (
        "import sys\n"
        "from kshare_sidecar.wire import codec, MalformedFrame\n"
        "for hexed in sys.argv[1:]:\n"
        "    try:\n"
        "        codec.decode_request(bytes.fromhex(hexed))\n"
        "    except MalformedFrame as exc:\n"
        "        print('rejected', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, *(f.hex() for f in CRASHERS.values())],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("rejected") == len(CRASHERS), done.stdout
    assert len(HUGE_TOPICS) + 4 < 60  # tiny frame: the frame-size limit cannot help


@pytest.mark.parametrize("name", sorted(CRASHERS))
def test_prescan_names_the_impossible_count(name: str) -> None:
    frame = CRASHERS[name]
    cls = codec.request_class(*struct.unpack(">hh", frame[:4]))
    end, _ = prescan(cls.__header_schema__, frame)
    with pytest.raises(PrescanError, match="cannot fit"):
        prescan(cls, frame, end)


def test_buffer_underflow_is_a_malformed_frame_not_a_kio_error() -> None:
    good = codec.encode_request(f1.ShareFetchRequest(
        group_id="g", member_id="m", share_session_epoch=0, max_wait=__import__("datetime").timedelta(0),
        min_bytes=1, max_records=10, batch_size=10, topics=(), forgotten_topics_data=()), 1)[4:]
    for cut in range(8, len(good)):
        with pytest.raises(MalformedFrame):
            codec.decode_request(good[:cut])


def test_every_request_schema_kio_knows_has_a_prescan_plan() -> None:
    from kio.index import KioIndexError, load_request_schema

    compiled = 0
    for key in range(0, 100):
        for version in range(0, 20):
            try:
                cls = load_request_schema(key, version)
            except KioIndexError:
                continue
            plan_for(cls)
            compiled += 1
    assert compiled > 250


# -- through the dispatcher, over the real services ---------------------------------------------
Conn = FakeConn


@pytest.fixture
async def dispatcher():
    stack = Stack()
    yield await stack.start()
    await stack.stop()


async def test_null_arrays_in_share_acknowledge_answer_invalid_request(dispatcher, caplog) -> None:
    # api key 79 v1: GroupId, MemberId, epoch 1, Topics = null (compact length 0)
    frame = header(79, 1) + cstr("g") + cstr("m") + struct.pack(">i", 1) + b"\x00" + b"\x00"
    with caplog.at_level(logging.INFO):
        out = await dispatcher.handle(frame, Conn())
    _, body = codec.decode_response(out[4:], ShareAcknowledgeResponse)
    assert body.error_code == ErrorCode.invalid_request
    assert "topics" in body.error_message
    assert not [r for r in caplog.records if r.exc_info]


async def test_null_array_without_a_top_level_error_code_closes(dispatcher) -> None:
    # DescribeConfigs v4 (key 32): Resources = null; the response has no top-level error code
    frame = header(32, 4) + b"\x00" + b"\x00\x00" + b"\x00"  # null, two bools, no tags
    with pytest.raises(MalformedFrame, match="null in non-nullable"):
        await dispatcher.handle(frame, Conn())


async def test_null_group_id_in_share_fetch_is_invalid_request(dispatcher) -> None:
    body = b"\x00" + cstr("m") + struct.pack(">iiiiii", 0, 0, 1, 1000, 100, 100) + uvarint(1) + uvarint(1) + b"\x00"
    out = await dispatcher.handle(header(78, 1) + body, Conn())
    _, resp = codec.decode_response(out[4:], ShareFetchResponse)
    assert resp.error_code == ErrorCode.invalid_request


async def test_null_topic_id_in_a_session_does_not_break_later_fetches(dispatcher, caplog) -> None:
    orders = TOPICS[0].topic_id

    def fetch(epoch: int, ids) -> bytes:
        topics = tuple(f1.FetchTopic(topic_id=i, partitions=(f1.FetchPartition(partition_index=0,
                                                                              acknowledgement_batches=()),))
                       for i in ids)
        req = f1.ShareFetchRequest(group_id="g", member_id="m" * 10, share_session_epoch=epoch,
                                   max_wait=__import__("datetime").timedelta(0), min_bytes=1, max_records=100,
                                   batch_size=100, topics=topics, forgotten_topics_data=())
        return codec.encode_request(req, epoch + 1)[4:]

    with caplog.at_level(logging.INFO):
        first = await dispatcher.handle(fetch(0, [None, orders]), Conn())
        second = await dispatcher.handle(fetch(1, []), Conn())
    for out in (first, second):
        _, resp = codec.decode_response(out[4:], ShareFetchResponse)
        assert resp.error_code == ErrorCode.none
        errors = {(t.topic_id, p.error_code) for t in resp.responses for p in t.partitions}
        assert (None, ErrorCode.unknown_topic_id) in errors
    assert not [r for r in caplog.records if r.exc_info]


def test_zero_uuid_is_what_kio_calls_none() -> None:
    assert uuid.UUID(int=0).bytes == bytes(16)


async def test_backend_outage_in_a_handler_is_a_retriable_code_without_traceback(caplog) -> None:
    """Seen in the broker-restart test: Metadata during an outage raised BackendUnavailableError,
    answered UNKNOWN_SERVER_ERROR with a traceback per request."""
    from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
    from kio.schema.share_group_heartbeat.v1.response import ShareGroupHeartbeatResponse

    from kshare_sidecar.api import Dispatcher, InMemoryTopicCatalog, build_registry
    from kshare_sidecar.backend.errors import BackendUnavailableError

    async def down(ctx, header, req):
        raise BackendUnavailableError(13, "broker 1: NodeNotReadyError()")

    registry = build_registry(InMemoryTopicCatalog([]))
    registry.register(76, 1, 1, down)
    dispatcher = Dispatcher(registry, NODE)
    req = ShareGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=0, rack_id=None,
                                     subscribed_topic_names=("t",))
    with caplog.at_level(logging.INFO):
        for i in range(20):
            out = await dispatcher.handle(codec.encode_request(req, i)[4:], Conn())
            _, resp = codec.decode_response(out[4:], ShareGroupHeartbeatResponse)
            assert resp.error_code == ErrorCode.network_exception
    assert not [r for r in caplog.records if r.exc_info]
    assert len([r for r in caplog.records if "NodeNotReady" in r.getMessage()]) <= 1
