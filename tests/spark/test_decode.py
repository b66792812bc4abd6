"""The executors' record-batch decoder (``decode.py``, ``arrow.py``) against an independent model:
aiokafka's record-batch builder writes the batches (every codec, transactional or not, nulls,
headers, log-append time) and aiokafka's reader says what they hold; no broker. The real brokers'
batches are read in ``test_read.py``."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from hypothesis import given, settings
from hypothesis import strategies as st

from kshare_sidecar.spark import _chain
from kshare_sidecar.spark.arrow import arrow_schema, record_batch
from kshare_sidecar.spark.decode import RecordFormatError, decode
from kshare_sidecar.backend.fetchwire import read_fetch

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

record = st.tuples(
    st.none() | st.binary(max_size=20),  # key
    st.none() | st.binary(max_size=300),  # value: lengths past 63 need two-byte varints
    st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=3),  # headers
    st.integers(0, 2**40),  # timestamp delta from the batch's first
)
batch = st.tuples(st.lists(record, min_size=1, max_size=40), st.sampled_from([0, 1, 2, 3, 4]), st.booleans(),
                  st.integers(0, 5))  # records, codec, log-append time, offset gap before the batch


def build(records, codec=0, base_offset=0, base_ts=1_700_000_000_000, transactional=False, producer_id=-1,
          append_time=False) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=int(transactional),
                                  producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                  base_sequence=0 if producer_id >= 0 else -1, batch_size=2**30)
    for i, (key, value, headers, ts) in enumerate(records):
        b.append(i, timestamp=base_ts + ts, key=key, value=value, headers=list(headers))
    raw = bytearray(b.build())
    raw[0:8] = base_offset.to_bytes(8, "big")
    if append_time:  # the broker stamps such batches: attribute bit 3 and maxTimestamp
        raw[22] |= 0x08
        raw[35:43] = (base_ts + 123).to_bytes(8, "big")
        _recrc(raw)
    return bytes(raw)


def _recrc(raw: bytearray) -> None:
    from crc32c import crc32c

    raw[17:21] = crc32c(bytes(raw[21:])).to_bytes(4, "big")


def model_rows(buf: bytes, first: int, last: int, include_headers: bool) -> list[dict]:
    """aiokafka's reader, as rows of the source's schema (deliveryCount 1)."""
    rows, mr = [], MemoryRecords(buf)
    while mr.has_next():
        b = mr.next_batch()
        for r in b:
            if first <= r.offset <= last:
                row = {"key": r.key, "value": r.value, "topic": "t", "partition": 4, "offset": r.offset,
                       "timestamp": EPOCH + timedelta(milliseconds=r.timestamp), "timestampType": r.timestamp_type}
                if include_headers:
                    row["headers"] = [{"key": k, "value": v} for k, v in r.headers] or None
                row["deliveryCount"] = 1
                rows.append(row)
    return rows


def decoded_rows(buf, first: int, last: int, include_headers: bool) -> list[dict]:
    got = decode(buf, first=first, last=last, headers=include_headers)
    schema = arrow_schema(include_headers)
    batch = record_batch(got.records, np.ones(len(got.records), np.int32), "t", 4, schema)
    assert batch.schema.equals(schema)
    return batch.to_pylist()


@settings(max_examples=120, deadline=None)
@given(st.lists(batch, min_size=1, max_size=4), st.booleans(), st.integers(0, 30), st.integers(0, 200),
       st.booleans())
def test_decoded_columns_equal_aiokafkas_reader(batches, include_headers, lo, span, truncate):
    """Batches of every codec one after another (with offset gaps between them, as compaction
    leaves), a window [first, last] over them, and optionally a truncated last batch (a Fetch cut
    at its size): the Arrow rows are what aiokafka reads, and ``next_offset`` is after the last
    complete batch."""
    parts, ends, offset = [], [], 0
    for records, codec, append_time, gap in batches:
        offset += gap
        parts.append(build(records, codec, base_offset=offset, append_time=append_time))
        offset += len(records)
        ends.append(offset)  # one past the batch's last offset
    buf = b"".join(parts)
    if truncate and len(parts) > 1:
        buf = buf[:-7]
        complete, complete_end = b"".join(parts[:-1]), ends[-2]
    else:
        complete, complete_end = buf, ends[-1]
    first, last = lo, lo + span
    assert decoded_rows(buf, first, last, include_headers) == model_rows(complete, first, last, include_headers)
    assert decode(buf, first=first, last=last).next_offset == max(first, complete_end)


def test_transactional_batches_of_aborted_transactions_are_dropped_with_read_committed():
    """Producer 7 aborts (its batch at 0-2 and the ABORT marker at 3), producer 8 commits (4-5,
    COMMIT at 6): read_committed keeps 4-5 only; read_uncommitted keeps all data records. The
    markers are control batches and never rows."""
    abort = build([(b"a", b"x", [], 0)] * 3, transactional=True, producer_id=7, base_offset=0)
    commit = build([(b"c", b"y", [], 0)] * 2, transactional=True, producer_id=8, base_offset=4)
    buf = abort + _marker(7, 3, abort=True) + commit + _marker(8, 6, abort=False)
    got = decode(buf, first=0, last=10, read_committed=True, aborted=[(7, 0)])
    assert got.records.offset.tolist() == [4, 5] and got.aborted == 3 and got.next_offset == 7
    assert decode(buf, first=0, last=10, read_committed=False).records.offset.tolist() == [0, 1, 2, 4, 5]
    # the same producer's next transaction after its abort marker is read again
    again = build([(b"d", b"z", [], 0)], transactional=True, producer_id=7, base_offset=7)
    got = decode(buf + again, first=0, last=10, read_committed=True, aborted=[(7, 0)])
    assert got.records.offset.tolist() == [4, 5, 7]


def _marker(producer_id: int, offset: int, *, abort: bool) -> bytes:
    """A control batch with one transaction marker record (key: version 0, type 0 ABORT / 1 COMMIT)."""
    raw = bytearray(build([((0).to_bytes(2, "big") + (0 if abort else 1).to_bytes(2, "big"),
                            b"\x00\x00\x00\x00\x00\x00", [], 0)], transactional=True, producer_id=producer_id,
                          base_offset=offset))
    raw[22] |= 0x20  # control
    _recrc(raw)
    return bytes(raw)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(record, min_size=0, max_size=30), min_size=1, max_size=5))
def test_the_compiled_walk_and_the_python_walk_agree(batches):
    parts = [build(records) for records in batches if records]
    if not parts:
        return
    buf = b"".join(parts)
    spans, counts, pos = [], [], 0
    for part, records in zip(parts, [r for r in batches if r]):
        spans.append((pos + 61, pos + len(part)))
        counts.append(len(records))
        pos += len(part)
    python = _chain.python_record_starts(buf, spans, counts)
    assert python.tolist() == _chain.record_starts(buf, spans, counts).tolist()
    assert len(python) == sum(counts)


@pytest.mark.skipif(not _chain.compiled(), reason="built without a C compiler: the Python walk is in use")
def test_the_compiled_walk_refuses_what_does_not_fill_a_batch():
    buf = build([(b"k", b"v" * 70, [], 0)] * 3)
    with pytest.raises(_chain.ChainError):
        _chain.record_starts(buf, [(61, len(buf) - 1)], [3])
    with pytest.raises(_chain.ChainError):
        _chain.record_starts(buf, [(61, len(buf))], [4])


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 255), st.booleans())
def test_corrupt_batches_fail_cleanly(where, flip, check_crcs):
    """A byte changed anywhere: decoding either gives records or raises RecordFormatError (never
    another error, never a hang); with check.crcs a change past the CRC field always raises."""
    rnd = random.Random(where)
    records = [(bytes(rnd.randrange(256) for _ in range(rnd.randrange(5))), b"v" * rnd.randrange(100), [], i)
               for i in range(20)]
    buf = bytearray(build(records) + build(records, base_offset=20))
    at = where % len(buf)
    buf[at] ^= flip
    try:
        decode(bytes(buf), first=0, last=100, headers=True, check_crcs=check_crcs)
    except RecordFormatError:
        return
    assert not (check_crcs and (21 <= at < len(buf) // 2 or len(buf) // 2 + 21 <= at)), "a changed byte passed the CRC"


def test_a_fetch_response_is_read_in_place():
    """Fetch v12 and v11 responses built by kio (the library encoding the requests) read back with
    the records as a view of the frame, not a copy."""
    import datetime as dt

    from kio.schema.errors import ErrorCode
    from kio.schema.fetch.v11 import response as v11
    from kio.schema.fetch.v12 import response as v12

    from kshare_sidecar.protocol.requests import writer

    records = build([(b"k", b"v", [], 0)] * 5)
    for mod, version in ((v12, 12), (v11, 11)):
        extra = {"diverging_epoch": mod.EpochEndOffset(epoch=-1, end_offset=-1),
                 "current_leader": mod.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
                 "snapshot_id": mod.SnapshotId(end_offset=-1, epoch=-1)} if version == 12 else {}
        part = mod.PartitionData(partition_index=3, error_code=ErrorCode.none, high_watermark=99, last_stable_offset=98,
                                 log_start_offset=5, aborted_transactions=(mod.AbortedTransaction(producer_id=7,
                                                                                                  first_offset=11),),
                                 preferred_read_replica=-1, records=records, **extra)
        resp = mod.FetchResponse(throttle_time=dt.timedelta(0), error_code=ErrorCode.none, session_id=0,
                                 responses=(mod.FetchableTopicResponse(topic="orders", partitions=(part,)),))
        import io

        out = io.BytesIO()
        header = mod.FetchResponse.__header_schema__(correlation_id=1)
        writer(type(header))(out, header)
        writer(mod.FetchResponse)(out, resp)
        frame = memoryview(out.getvalue())
        _, _, (p,) = read_fetch(frame, version)
        assert (p.topic, p.partition, p.high_watermark, p.last_stable_offset, p.log_start_offset, p.aborted) == (
            "orders", 3, 99, 98, 5, ((7, 11),))
        assert bytes(p.records) == records and p.records.obj is frame.obj  # a view of the frame, not a copy


def test_without_the_compiled_walk_the_python_walk_decodes_the_same(monkeypatch):
    """An install without a C compiler: the same rows from the Python walk."""
    rnd = random.Random(7)
    records = [(None if i % 5 == 0 else str(i).encode(), b"v" * rnd.randrange(200), [("h", b"x")] * (i % 3), i)
               for i in range(300)]
    buf = build(records, codec=0) + build(records, codec=4, base_offset=300)
    with_compiled = decoded_rows(buf, 0, 10_000, True)
    monkeypatch.setattr(_chain, "_compiled", None)
    assert not _chain.compiled()
    assert decoded_rows(buf, 0, 10_000, True) == with_compiled == model_rows(buf, 0, 10_000, True)


def _zigzag(v: int) -> bytes:
    z, out = (v << 1) ^ (v >> 63), bytearray()
    while True:
        b, z = z & 0x7F, z >> 7
        if not z:
            return bytes(out + bytes([b]))
        out.append(b | 0x80)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-300, 300) | st.integers(0, 2**21), min_size=1,
                max_size=60))
def test_varints_read_every_width_at_once(values):
    """Kafka's zigzag varints/varlongs of 1 to 10 bytes, side by side, read column-wise."""
    from kshare_sidecar.spark.decode import varints

    parts = [_zigzag(v) for v in values]
    pos = np.cumsum([0] + [len(p) for p in parts[:-1]]).astype(np.int64)
    got, sizes = varints(np.frombuffer(b"".join(parts), np.uint8), pos)
    assert got.tolist() == values and sizes.tolist() == [len(p) for p in parts]


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_an_unknown_codec_is_refused_by_name(codec):
    """Compression codecs 1-4 (gzip, snappy, lz4, zstd) are read; the attribute's other values
    name no codec Kafka has: the batch is refused with its offset and codec, not skipped."""
    raw = bytearray(build([(b"k", b"v", [], 0)] * 3, base_offset=40))
    raw[22] = (raw[22] & ~7) | codec
    with pytest.raises(RecordFormatError, match=f"unknown compression codec {codec}"):
        decode(bytes(raw), first=40, last=42)


@pytest.mark.parametrize("magic", [0, 1])
def test_old_message_formats_are_refused_with_the_way_out(magic):
    """Message formats v0 / v1 (logs written before Kafka 0.11 and never rewritten): the raw
    reader reads only v2 batches and says that readClient=librdkafka reads the older ones."""
    raw = bytearray(build([(b"k", b"v", [], 0)] * 3, base_offset=9))
    raw[16] = magic
    with pytest.raises(RecordFormatError, match=f"offset 9 has magic {magic}.*readClient=librdkafka"):
        decode(bytes(raw), first=0, last=100)
