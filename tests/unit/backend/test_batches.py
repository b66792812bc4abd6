"""batches.py: header-only parsing of v2 record batches built by aiokafka's and kio's writers."""

from __future__ import annotations

import datetime
import io
import struct

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_batch

from kshare_sidecar.backend.batches import (
    HEADER_SIZE,
    RecordFormatError,
    complete_size,
    overlapping,
    parse_batches,
    slice_batches,
)

GZIP = 1
TS = 1_700_000_000_000


def aiokafka_batch(base_offset: int, count: int, *, compression: int = 0, transactional: bool = False,
                   producer_id: int = -1, value_size: int = 20) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=int(transactional),
        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1, batch_size=1 << 30,
    )
    for i in range(count):
        builder.append(i, timestamp=TS + i, key=b"k%d" % i, value=(b"v%d-" % i).ljust(value_size, b"x"), headers=[])
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base_offset)  # baseOffset is outside the CRC
    return bytes(raw)


def control_batch(offset: int, producer_id: int, *, commit: bool) -> bytes:
    """A transaction marker as the broker writes it: one control record, attributes 0x30."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    record = Record(attributes=0, timestamp=datetime.datetime.fromtimestamp(TS / 1000, datetime.UTC),
                    offset=offset, key=key, value=struct.pack(">hi", 0, 0), headers=())
    buf = io.BytesIO()
    write_batch(buf, NewRecordBatch(producer_id=producer_id, producer_epoch=0, base_sequence=-1,
                                    records=(record,), attributes=0x30))
    return buf.getvalue()


def test_single_uncompressed_batch():
    raw = aiokafka_batch(100, 5)
    (b,) = parse_batches(raw)
    assert (b.base_offset, b.last_offset, b.producer_id) == (100, 104, -1)
    assert not b.is_transactional and not b.is_control
    assert (b.start, b.end) == (0, len(raw))


def test_compressed_batches_are_not_decoded():
    raw = aiokafka_batch(0, 50, compression=GZIP) + aiokafka_batch(50, 30, compression=GZIP)
    batches = parse_batches(raw)
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 49), (50, 79)]
    assert batches[1].end == len(raw)
    # the bytes of each batch are intact: aiokafka decodes them back to the same values
    records = MemoryRecords(slice_batches(raw, batches[1:]))
    batch = records.next_batch()
    assert [r.value[:4] for r in batch] [:2] == [b"v0-x", b"v1-x"]
    assert records.next_batch() is None


def test_transactional_and_control_flags():
    raw = aiokafka_batch(10, 3, transactional=True, producer_id=77) + control_batch(13, 77, commit=True)
    data, marker = parse_batches(raw)
    assert data.is_transactional and not data.is_control and data.producer_id == 77
    assert marker.is_transactional and marker.is_control and marker.producer_id == 77
    assert (marker.base_offset, marker.last_offset) == (13, 13)
    parsed, _ = read_batch(raw, marker.start)  # kio agrees on the boundaries (and the CRC)
    assert parsed.base_offset == 13


@pytest.mark.parametrize("cut", [1, 11, 12, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 5, -1])
def test_truncated_trailing_batch_is_dropped(cut):
    first, second = aiokafka_batch(0, 4), aiokafka_batch(4, 4)
    raw = first + second[: cut if cut > 0 else len(second) + cut]
    batches = parse_batches(raw)
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 3)]
    assert complete_size(batches) == len(first)


def test_empty_and_tiny_buffers():
    assert parse_batches(b"") == ()
    assert parse_batches(b"\x00" * 10) == ()
    assert complete_size(()) == 0


def test_start_offset_and_memoryview():
    raw = b"junk" + aiokafka_batch(7, 2)
    (b,) = parse_batches(memoryview(raw), start=4)
    assert (b.start, b.end, b.base_offset) == (4, len(raw), 7)


def test_old_magic_is_rejected():
    raw = bytearray(aiokafka_batch(0, 2))
    raw[16] = 1
    with pytest.raises(RecordFormatError, match="magic 1"):
        parse_batches(bytes(raw))


def test_impossible_length_is_rejected():
    raw = bytearray(aiokafka_batch(0, 2))
    struct.pack_into(">i", raw, 8, 10)
    with pytest.raises(RecordFormatError, match="length"):
        parse_batches(bytes(raw))


def test_slice_batches_passes_bytes_through():
    parts = [aiokafka_batch(i * 3, 3) for i in range(4)]
    raw = b"".join(parts)
    batches = parse_batches(raw)
    assert slice_batches(raw, batches) is raw  # whole buffer: no copy
    assert slice_batches(raw, batches[1:3]) == parts[1] + parts[2]
    assert slice_batches(raw, [batches[0], batches[3]]) == parts[0] + parts[3]
    assert slice_batches(raw, []) == b""


def test_overlapping():
    batches = parse_batches(b"".join(aiokafka_batch(i * 10, 10) for i in range(5)))
    assert [b.base_offset for b in overlapping(batches, 15, 25)] == [10, 20]
    assert [b.base_offset for b in overlapping(batches, 0, 0)] == [0]
    assert overlapping(batches, 50, 60) == []
