"""Record batch decoding and request building of the asyncio client (no sockets)."""

from __future__ import annotations

import io
import struct
import uuid

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

from kshare_sidecar.client import protocol
from kshare_sidecar.client.acks import AckBatch
from kshare_sidecar.client.records import LOG_APPEND_TIME, RecordDecodeError, batches, decode_batches


def _batch(base: int, records, *, compression: int = 0, transactional: bool = False) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=int(transactional),
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (key, value, headers) in enumerate(records):
        b.append(i, timestamp=1_700_000_000_123 + i, key=key, value=value, headers=headers)
    raw = bytearray(b.build())
    raw[0:8] = struct.pack(">q", base)  # base offset as the broker assigns it
    return bytes(raw)


def test_plain_batch_round_trip_with_exact_timestamps_headers_and_nulls():
    data = _batch(100, [(b"k0", b"v0", [("h", b"1")]), (None, b"v1", []), (b"k2", None, [("x", None)])])
    recs = list(decode_batches(data))
    assert [r.offset for r in recs] == [100, 101, 102]
    assert [(r.key, r.value) for r in recs] == [(b"k0", b"v0"), (None, b"v1"), (b"k2", None)]
    assert recs[0].headers == (("h", b"1"),) and recs[2].headers == (("x", None),)
    assert [r.timestamp for r in recs] == [1_700_000_000_123, 1_700_000_000_124, 1_700_000_000_125]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches(codec):
    from aiokafka import codec as c

    if not {1: c.has_gzip, 2: c.has_snappy, 3: c.has_lz4, 4: c.has_zstd}[codec]():
        pytest.skip("codec library not installed")
    data = _batch(7, [(None, f"value-{i}".encode() * 20, []) for i in range(50)], compression=codec)
    recs = list(decode_batches(data))
    assert [r.offset for r in recs] == list(range(7, 57))
    assert recs[49].value == b"value-49" * 20


def test_several_batches_and_a_truncated_tail():
    a, b = _batch(0, [(None, b"a", [])] * 3), _batch(3, [(None, b"b", [])] * 2)
    assert [r.offset for r in decode_batches(a + b)] == [0, 1, 2, 3, 4]
    assert [r.offset for r in decode_batches(a + b[:-5])] == [0, 1, 2]
    assert list(decode_batches(b"")) == []


def test_control_batches_yield_no_records():
    data = bytearray(_batch(5, [(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [])], transactional=True))
    attrs = struct.unpack_from(">h", data, 21)[0] | 0x20
    struct.pack_into(">h", data, 21, attrs)
    from crc32c import crc32c

    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    assert list(decode_batches(bytes(data))) == []


def test_log_append_time_uses_the_batch_max_timestamp():
    data = bytearray(_batch(0, [(None, b"a", []), (None, b"b", [])]))
    struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x08)
    struct.pack_into(">q", data, 35, 42)
    recs = list(decode_batches(bytes(data), check_crcs=False))
    assert {r.timestamp for r in recs} == {42} and recs[0].timestamp_type == LOG_APPEND_TIME


def test_corruption_is_detected():
    data = bytearray(_batch(0, [(None, b"abc", [])]))
    data[-2] ^= 0xFF
    with pytest.raises(RecordDecodeError, match="CRC"):
        list(decode_batches(bytes(data)))
    data = bytearray(_batch(0, [(None, b"abc", [])]))
    data[16] = 1
    with pytest.raises(RecordDecodeError, match="magic"):
        list(decode_batches(bytes(data)))


_RECORDS = st.lists(st.tuples(st.none() | st.binary(max_size=8), st.none() | st.binary(max_size=64),
                               st.just([])), min_size=1, max_size=5)


@settings(max_examples=150, deadline=None)
@given(st.lists(_RECORDS, min_size=1, max_size=3), st.sampled_from([0, 1]), st.data())
def test_crc_check_agrees_with_aiokafka_and_catches_any_flipped_byte(groups, codec, data):
    """The hardware CRC-32C check accepts exactly what aiokafka's own ``validate_crc`` accepts:
    every batch as built, and no batch with one byte flipped anywhere the CRC covers (byte 21 on)."""
    blob, base = b"", 0
    for records in groups:
        blob += _batch(base, records, compression=codec)
        base += len(records)
    assert sum(1 for _ in batches(blob)) == len(groups)
    assert all(b.validate_crc() for b in _aiokafka_batches(blob))
    starts, pos = [], 0
    while pos < len(blob):
        starts.append(pos)
        pos += 12 + struct.unpack_from(">i", blob, pos + 8)[0]
    which = data.draw(st.sampled_from(starts))
    end = which + 12 + struct.unpack_from(">i", blob, which + 8)[0]
    at = data.draw(st.integers(which + 17, end - 1))  # the CRC itself or anything it covers
    bad = bytearray(blob)
    bad[at] ^= data.draw(st.integers(1, 255))
    with pytest.raises(RecordDecodeError):
        list(decode_batches(bytes(bad)))
    if at >= which + 21:  # aiokafka's check (where it can read the batch at all) says the same
        try:
            verdicts = [b.validate_crc() for b in _aiokafka_batches(bytes(bad))]
        except Exception:  # noqa: BLE001 - a flipped length or count: aiokafka cannot walk it
            return
        assert not all(verdicts)


def _aiokafka_batches(blob: bytes):
    records, out = MemoryRecords(blob), []
    while (batch := records.next_batch()) is not None:
        out.append(batch)
    return out


def test_the_crc_check_can_be_turned_off():
    data = bytearray(_batch(0, [(None, b"abc", [])]))
    data[-2] ^= 0xFF
    assert [r.value for r in decode_batches(bytes(data), check_crcs=False)] == [b"ab\x9c"]


def _roundtrip(req):
    buf = io.BytesIO()
    entity_writer(type(req))(buf, req)
    back, _ = entity_reader(type(req))(buf.getvalue(), 0)
    return back


@pytest.mark.parametrize("version", [1, 2])
def test_share_fetch_carries_listed_acks_and_forgotten(version):
    t1, t2 = uuid.uuid4(), uuid.uuid4()
    req = protocol.share_fetch(version, group_id="g", member_id="m", epoch=3, max_wait_ms=500, min_bytes=1,
                               max_bytes=1 << 20, max_records=100, batch_size=100, listed=[(t1, 1), (t1, 0)],
                               acks={(t1, 0): [AckBatch(5, 9, (1,))]}, forgotten=[(t2, 4)])
    back = _roundtrip(req)
    assert back.__version__ == version and back.share_session_epoch == 3
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in back.topics] == [(t1, [0, 1])]
    batches = back.topics[0].partitions[0].acknowledgement_batches
    assert [(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches] == [(5, 9, (1,))]
    assert [(f.topic_id, tuple(f.partitions)) for f in back.forgotten_topics_data] == [(t2, (4,))]


_TOPICS = [uuid.UUID(int=i * 0x1111) for i in range(1, 4)]
_TPS = st.tuples(st.sampled_from(_TOPICS), st.integers(0, 2**31 - 1))
_ACK_BATCH = st.builds(lambda first, n, types: AckBatch(first, first + n, tuple(types)),
                       st.integers(0, 2**62), st.integers(0, 10**6), st.lists(st.integers(0, 4), min_size=1, max_size=5))


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from([1, 2]), client_id=st.text(max_size=20), group=st.text(max_size=30),
       member=st.text(max_size=30), epoch=st.integers(-1, 2**31 - 1), wait=st.integers(0, 2**31 - 1),
       sizes=st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1),
                       st.integers(0, 2**31 - 1)),
       listed=st.lists(_TPS, max_size=6, unique=True), forgotten=st.lists(_TPS, max_size=4, unique=True),
       ack_lists=st.lists(st.lists(_ACK_BATCH, min_size=1, max_size=3), max_size=6), mode=st.integers(0, 1))
def test_share_fetch_wire_is_what_kio_writes(version, client_id, group, member, epoch, wait, sizes, listed,
                                             forgotten, ack_lists, mode):
    acks = dict(zip(listed, ack_lists))
    kw = dict(group_id=group, member_id=member, epoch=epoch, max_wait_ms=wait, min_bytes=sizes[0],
              max_bytes=sizes[1], max_records=sizes[2], batch_size=sizes[3], listed=listed, acks=acks,
              forgotten=forgotten, acquire_mode=mode)
    wire = protocol.share_fetch_wire(version, client_id, **kw)
    assert protocol.encode(wire, client_id) == protocol.encode(protocol.share_fetch(version, **kw), client_id)


def test_share_acknowledge_renew_needs_v2():
    t = uuid.uuid4()
    acks = {(t, 0): [AckBatch(1, 1, (4,))]}
    back = _roundtrip(protocol.share_acknowledge(2, group_id="g", member_id="m", epoch=1, acks=acks, renew=True))
    assert back.is_renew_ack and back.topics[0].partitions[0].acknowledgement_batches[0].acknowledge_types == (4,)
    with pytest.raises(ValueError):
        protocol.share_acknowledge(1, group_id="g", member_id="m", epoch=1, acks=acks, renew=True)


def test_version_negotiation():
    assert protocol.negotiate({76: (1, 1), 78: (1, 2), 79: (1, 2)}) == {76: 1, 78: 2, 79: 2}
    assert protocol.negotiate({76: (1, 1), 78: (1, 1), 79: (1, 1)}) == {76: 1, 78: 1, 79: 1}
    with pytest.raises(LookupError, match="no share groups"):
        protocol.negotiate({3: (0, 12)})


def test_requests_encode_with_a_header():
    payload = protocol.encode(protocol.heartbeat("g", "m", 0, ("t",)), "cid", 9)
    assert struct.unpack_from(">hhi", payload) == (76, 1, 9)


def test_version_cap_forces_v1():
    assert protocol.negotiate({76: (1, 1), 78: (1, 2), 79: (1, 2)}, cap=1) == {76: 1, 78: 1, 79: 1}


def test_share_records_are_frozen_and_never_tracked_by_the_garbage_collector():
    import gc

    from kshare_sidecar.client import ShareRecord

    record = ShareRecord("t", 0, 5, 1_700_000_000_000, 0, None, b"v", (("h", b"1"),), 2)
    assert not gc.is_tracked(record)  # a batch held across a collection never reaches the old generations
    with pytest.raises(AttributeError):
        record.offset = 6  # type: ignore[misc]
    moved = record._replace(offset=6)
    assert (moved.offset, moved.value, moved.headers, record.offset) == (6, b"v", (("h", b"1"),), 5)
    assert record == ShareRecord("t", 0, 5, 1_700_000_000_000, 0, None, b"v", (("h", b"1"),), 2)
    assert ShareRecord("t", 0, 1, 0, 0, None, None).headers == ()
