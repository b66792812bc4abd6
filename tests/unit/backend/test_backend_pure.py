"""The Backend's pure parts: the kio bridge, metadata parsing, topic-ID minting, result shaping."""

from __future__ import annotations

import datetime
import io
import types
import uuid

import pytest
from kio.schema.metadata.v5.response import MetadataResponse as MetadataResponseV5
from kio.schema.metadata.v12 import response as md12
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from kshare_sidecar.backend import Backend, InMemoryTopicIdStore, TopicIdStore
from kshare_sidecar.backend.errors import BackendError, BackendUnavailableError, UnknownTopicError, error_for
from kshare_sidecar.backend.kio_bridge import KioRequest
from kshare_sidecar.backend.metadata import MetadataAnswer, TopicMeta, metadata_request, parse_metadata
from kshare_sidecar.backend.reads import PartitionRead, fetch_request, to_result
from tests.unit.backend.test_batches import aiokafka_batch


def _md_topic(name, topic_id, partitions, code=0):
    parts = tuple(md12.MetadataResponsePartition(error_code=ErrorCode.none, partition_index=i, leader_id=1, leader_epoch=3)
                  for i in range(partitions))
    return md12.MetadataResponseTopic(error_code=ErrorCode(code), name=name, topic_id=topic_id, is_internal=False,
                                      partitions=parts)


def test_bridge_picks_highest_common_version_and_encodes_with_kio():
    request = metadata_request(["a", "b"])
    struct_ = request.prepare({3: (0, 9)})
    assert request.version == 9
    header = struct_.build_request_header(correlation_id=42, client_id="x").encode()
    body = struct_.encode()
    frame = header + body
    h, n = entity_reader(struct_.entity.__header_schema__)(frame, 0)
    decoded, m = entity_reader(type(struct_.entity))(frame, n)
    assert h.correlation_id == 42 and n + m == len(frame)
    assert [t.name for t in decoded.topics] == ["a", "b"] and decoded.allow_auto_topic_creation is False


def test_bridge_decodes_response_from_aiokafka_buffer():
    request = metadata_request(None)
    struct_ = request.prepare({3: (0, 12)})
    response = md12.MetadataResponse(throttle_time=datetime.timedelta(0), brokers=(), cluster_id="c", controller_id=1,
                                     topics=(_md_topic("t", uuid.uuid4(), 2),))
    buf = io.BytesIO()
    H = type(response).__header_schema__
    entity_writer(H)(buf, H(correlation_id=7))
    entity_writer(type(response))(buf, response)
    stream = io.BytesIO(buf.getvalue())
    assert struct_.parse_response_header(stream).correlation_id == 7
    assert struct_.RESPONSE_TYPE.decode(stream) == response


def test_bridge_reports_unsupported_versions_with_our_error():
    with pytest.raises(BackendError) as info:
        KioRequest(1, range(4, 13), lambda mod, v: None).prepare({1: (0, 3)})
    assert info.value.code == 35


def test_fetch_request_groups_topics_and_drops_unknown_fields_for_old_versions():
    request = fetch_request([PartitionRead("a", 0, 5, 100), PartitionRead("a", 1, 6, 100), PartitionRead("b", 0, 0, 50)],
                            max_wait_ms=250, isolation_level=1, max_bytes=None)
    new = request.prepare({1: (0, 16)}).entity
    assert request.version == 12 and new.max_bytes == 250 and new.isolation_level == 1
    assert [(t.topic, [p.fetch_offset for p in t.partitions]) for t in new.topics] == [("a", [5, 6]), ("b", [0])]
    old = request.prepare({1: (0, 4)}).entity
    assert request.version == 4 and not hasattr(old.topics[0].partitions[0], "log_start_offset")


def test_parse_metadata_zero_uuid_means_no_id_and_unknown_topics_are_listed():
    resp = md12.MetadataResponse(throttle_time=0, brokers=(), topics=(
        _md_topic("real", uuid.UUID(int=5), 3), _md_topic("rp", uuid.UUID(int=0), 1),
        _md_topic("gone", uuid.UUID(int=0), 0, code=3)))
    answer = parse_metadata(resp, 12)
    assert answer.topics["real"].backend_id == uuid.UUID(int=5) and answer.topics["real"].leaders == (1, 1, 1)
    assert answer.topics["rp"].backend_id is None
    assert answer.unknown == {"gone"}


def test_parse_metadata_v5_has_no_ids():
    from kio.schema.metadata.v5 import response as md5
    part = md5.MetadataResponsePartition(error_code=0, partition_index=0, leader_id=2, replica_nodes=(), isr_nodes=(),
                                         offline_replicas=())
    resp = MetadataResponseV5(throttle_time=0, brokers=(), cluster_id=None, controller_id=1, topics=(
        md5.MetadataResponseTopic(error_code=0, name="t", is_internal=False, partitions=(part,)),))
    assert parse_metadata(resp, 5).topics["t"].backend_id is None


def _meta(name, partitions, backend_id=None):
    return TopicMeta(name, backend_id, False, (1,) * partitions, (0,) * partitions)


async def test_minted_ids_are_stable_and_change_after_delete_and_recreate():
    store = InMemoryTopicIdStore()
    assert isinstance(store, TopicIdStore)
    backend = Backend("unused:1", topic_id_store=store, internal_topics=["__kshare_state"])
    await backend._apply(MetadataAnswer({"t": _meta("t", 2), "__kshare_state": _meta("__kshare_state", 1)},
                                        frozenset(), 12), full=True)
    first = backend.topic_by_name("t").topic_id
    assert backend.topic_by_id(first).name == "t"
    assert backend.topic_by_name("__kshare_state").internal
    assert set(await backend.describe_topics()) == {"t"}  # fresh cache: no I/O, internal hidden
    await backend._apply(MetadataAnswer({"t": _meta("t", 2)}, frozenset(), 12), full=True)
    assert backend.topic_by_name("t").topic_id == first  # stable across refreshes
    await backend._apply(MetadataAnswer({}, frozenset(), 12), full=True)  # deleted
    assert backend.topic_by_id(first) is None and store.snapshot() == {}
    await backend._apply(MetadataAnswer({"t": _meta("t", 2)}, frozenset(), 12), full=True)  # recreated
    assert backend.topic_by_name("t").topic_id != first


async def test_shrunken_partition_count_means_recreated_topic():
    backend = Backend("unused:1")
    await backend._apply(MetadataAnswer({"t": _meta("t", 4)}, frozenset(), 12), full=False)
    old = backend.topic_by_name("t").topic_id
    await backend._apply(MetadataAnswer({"t": _meta("t", 1)}, frozenset(), 12), full=False)
    assert backend.topic_by_name("t").topic_id != old and backend.topic_by_id(old) is None


async def test_backend_ids_are_used_as_given():
    backend = Backend("unused:1")
    tid = uuid.uuid4()
    await backend._apply(MetadataAnswer({"t": _meta("t", 1, tid)}, frozenset(), 12), full=False)
    assert backend.topic_by_name("t").topic_id == tid


async def test_a_topic_deleted_through_the_sidecar_is_forgotten_and_stays_out():
    """DeleteTopics passed through (passthrough/forwarder.py): gone from the cache at once; a broker
    whose metadata lags and still lists it (same id) does not put it back; recreated under a new
    id, it is back."""
    backend = Backend("unused:1")
    old, new = uuid.uuid4(), uuid.uuid4()
    await backend._apply(MetadataAnswer({"t": _meta("t", 1, old), "u": _meta("u", 1, uuid.uuid4())},
                                        frozenset(), 12), full=True)
    await backend.forget_deleted(["t"])
    assert backend.topic_by_id(old) is None and backend.topic_by_name("t") is None
    assert backend.topic_by_name("u") is not None
    await backend._apply(MetadataAnswer({"t": _meta("t", 1, old)}, frozenset(), 12), full=False)  # lagging
    assert backend.topic_by_id(old) is None
    await backend._apply(MetadataAnswer({"t": _meta("t", 1, new)}, frozenset(), 12), full=False)  # recreated
    assert backend.topic_by_name("t").topic_id == new


async def test_a_topic_deleted_by_id_is_forgotten_and_a_minted_id_released():
    store = InMemoryTopicIdStore()
    backend = Backend("unused:1", topic_id_store=store)
    await backend._apply(MetadataAnswer({"m": _meta("m", 1)}, frozenset(), 12), full=False)  # minted
    tid = uuid.uuid4()
    await backend._apply(MetadataAnswer({"t": _meta("t", 1, tid)}, frozenset(), 12), full=False)
    await backend.forget_deleted([], [tid])
    assert backend.topic_by_id(tid) is None
    await backend.forget_deleted(["m"])
    assert backend.topic_by_name("m") is None and store.snapshot() == {}


def _partition(records, code=0, aborted=None):
    return types.SimpleNamespace(error_code=code, high_watermark=10, last_stable_offset=8, log_start_offset=2,
                                 aborted_transactions=aborted, records=records)


def test_to_result_trims_truncated_tail_and_copies_aborted_list():
    full, tail = aiokafka_batch(2, 3), aiokafka_batch(5, 3)
    aborted = [types.SimpleNamespace(producer_id=9, first_offset=4)]
    result = to_result(_partition(full + tail[:30], aborted=aborted))
    assert result.records == full and [b.base_offset for b in result.batches] == [2]
    assert (result.high_watermark, result.last_stable_offset, result.log_start_offset) == (10, 8, 2)
    assert result.aborted_transactions == ((9, 4),)
    untouched = full + tail
    assert to_result(_partition(untouched)).records is untouched
    assert to_result(_partition(None)).records == b""
    assert to_result(_partition(full, code=6)).error_code == 6


def test_error_classes():
    assert isinstance(error_for(3, "x"), UnknownTopicError)
    assert isinstance(error_for(6, "x"), BackendUnavailableError) and error_for(6, "x").retriable
    assert type(error_for(87, "x")) is BackendError


async def test_not_started_backend_raises_our_error():
    with pytest.raises(BackendError):
        await Backend("unused:1").fetch("t", 0, 0, max_bytes=1)


# A Fetch v12 answer exactly as tansu 0.6.0 sent it (one record, "hello"): after the topics comes
# the top-level tagged-field section `01 00 01 01` — tag 0 (Fetch v16's NodeEndpoints, an empty
# array) in a v12 answer. Kafka's clients skip unknown tags (KIP-482); kio 0.6 refuses them.
TANSU_FETCH_V12 = bytes.fromhex(
    "00000007000000000000000000000002047261770200000000000000000000000000010000000000000001000000000000"
    "000001ffffffff4b00000000000000000000003effffffff020d0871d2000000000000000001a21c8c0a71000001a21c8c"
    "0a77ffffffffffffffffffff000000000000000118000000026b0a68656c6c6f00000001000101")


def test_an_answer_with_an_unknown_tagged_field_is_unreadable_and_that_version_is_not_asked_again(caplog):
    from kshare_sidecar.backend import kio_bridge

    request = fetch_request([PartitionRead("raw", 0, 0, 1 << 20)], max_wait_ms=0, isolation_level=0, max_bytes=None)
    connection = {1: (0, 16)}  # one connection's broker version ranges (aiokafka's ``_versions``)
    struct_ = request.prepare(connection)
    assert request.version == 12
    buf = io.BytesIO(TANSU_FETCH_V12)
    struct_.parse_response_header(buf)
    answer = struct_.RESPONSE_TYPE.decode(buf)
    assert isinstance(answer, kio_bridge.UnreadableResponse)
    assert (answer.api_key, answer.version) == (1, 12) and "tagged field" in answer.reason
    assert "asks at a lower version" in caplog.text
    request.prepare(connection)
    assert request.version == 11 and connection[1] == (0, 11)  # non-flexible: no tagged fields to trip on
    request.prepare({1: (0, 16)})
    assert request.version == 12  # another connection (another backend) is not affected

