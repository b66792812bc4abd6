"""backend/fetchwire.py reads every Fetch version kshare asks (v4-v12) as kio does, records in place."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType
from kio.index import load_payload_module

from kshare_sidecar.backend.fetchwire import FetchWireError, parse_fetch
from kshare_sidecar.backend.kio_bridge import make
from kshare_sidecar.backend.reads import FETCH_VERSIONS, to_result
from kshare_sidecar.wire import codec
from tests.unit.backend.test_backend_pure import TANSU_FETCH_V12
from tests.unit.backend.test_batches import aiokafka_batch

BATCHES = [aiokafka_batch(10, 3), aiokafka_batch(13, 2, value_size=200), aiokafka_batch(15, 1)]


def answer(version: int, parts, *, top_error=ErrorCode.none, cid: int = 77) -> bytes:
    """A Fetch answer of ``version`` as kio writes it; ``parts``: (topic, partition, code, records, aborted)."""
    mod = load_payload_module(1, version, EntityType.response)
    topics: dict[str, list] = {}
    for topic, partition, code, records, aborted in parts:
        topics.setdefault(topic, []).append(make(
            mod.PartitionData, partition_index=partition, error_code=code, high_watermark=100, last_stable_offset=90,
            log_start_offset=5, preferred_read_replica=-1, records=records,
            aborted_transactions=None if aborted is None else tuple(
                make(mod.AbortedTransaction, producer_id=p, first_offset=o) for p, o in aborted)))
    body = make(mod.FetchResponse, throttle_time=datetime.timedelta(0), error_code=top_error, session_id=0,
                responses=tuple(make(mod.FetchableTopicResponse, topic=t, partitions=tuple(ps))
                                for t, ps in topics.items()))
    return codec.encode_response(body, cid)


parts = st.lists(st.tuples(st.sampled_from(["a", "topic-b", "ü"]), st.integers(0, 50),
                           st.sampled_from([ErrorCode.none, ErrorCode.not_leader_or_follower]),
                           st.integers(0, len(BATCHES)), st.integers(0, 40),
                           st.none() | st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)), max_size=3)),
                 max_size=5, unique_by=lambda p: (p[0], p[1]))


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from(list(FETCH_VERSIONS)), parts=parts)
def test_reads_every_version_as_kio(version, parts):
    rows = [(t, p, code, b"".join(BATCHES[:n]) + (BATCHES[n][:cut] if n < len(BATCHES) else b""), aborted)
            for t, p, code, n, cut, aborted in parts]
    cuts = {(t, p): cut if n < len(BATCHES) else 0 for t, p, code, n, cut, aborted in parts}
    frame = answer(version, rows)
    cid, error, results = parse_fetch(bytearray(frame), version, 4)
    assert (cid, error) == (77, 0)
    mod = load_payload_module(1, version, EntityType.response)
    _, expected = codec.decode_response(frame[4:], mod.FetchResponse)
    want = {(t.topic, int(p.partition_index)): to_result(p) for t in expected.responses for p in t.partitions}
    assert results.keys() == want.keys()
    for key, got in results.items():
        w = want[key]
        assert isinstance(got.records, memoryview) and got.records.readonly
        assert (bytes(got.records), got.batches, got.high_watermark, got.error_code, got.cut_bytes) == \
            (bytes(w.records), w.batches, w.high_watermark, w.error_code, w.cut_bytes)
        # the bytes of a trailing batch cut at the read's size limit are counted, not kept
        assert got.cut_bytes == (0 if got.error_code else cuts[key])
        if version >= 5:
            assert got.log_start_offset == w.log_start_offset
        if not got.error_code:
            assert (got.last_stable_offset, got.aborted_transactions) == (w.last_stable_offset, w.aborted_transactions)


def test_records_are_views_of_the_frame():
    frame = bytearray(answer(12, [("t", 0, ErrorCode.none, BATCHES[0] + BATCHES[1], None)]))
    _, _, results = parse_fetch(frame, 12, 4)
    view = results[("t", 0)].records
    assert view.obj is frame  # not a copy


def test_top_level_error():
    frame = answer(11, [], top_error=ErrorCode.unknown_server_error)
    assert parse_fetch(frame, 11, 4)[1] == int(ErrorCode.unknown_server_error)


def test_unknown_tagged_fields_are_skipped_as_kafka_clients_do():
    """tansu 0.6.0 puts Fetch v16's NodeEndpoints (tag 0) into v12 answers; kio refuses them, this
    reader skips them (KIP-482), so no lower version is needed."""
    cid, error, results = parse_fetch(TANSU_FETCH_V12, 12, 0)
    (result,) = results.values()
    assert error == 0 and len(result.batches) == 1 and result.high_watermark == 1


@pytest.mark.parametrize("cut", [10, 30, 60])
def test_a_truncated_answer_is_an_error_not_garbage(cut):
    frame = answer(12, [("t", 0, ErrorCode.none, BATCHES[0], None)])
    with pytest.raises(FetchWireError):
        parse_fetch(frame[:cut], 12, 4)


def test_frame_pool_reuses_a_buffer_only_once_nothing_views_it():
    from kshare_sidecar.backend.brokerconn import FramePool

    pool = FramePool(min_bytes=1000, keep_bytes=1 << 20)
    first = pool.get(100_000)
    view = memoryview(first)[10:20].toreadonly()  # a cached read's records
    del first
    second = pool.get(100_000)
    assert second is not view.obj  # still viewed: a new buffer
    del view
    third = pool.get(90_000)
    assert pool.reused == 1 and len(third) >= 90_000  # the first one again
    assert len(pool.get(500)) == 500  # small answers: plain buffers, not pooled
