"""The compiled record walk (``client/_records.c``) against aiokafka's reader: the same records
from the same bytes, and nothing but RecordDecodeError from bytes that are not records."""

from __future__ import annotations

import struct

import pytest
from aiokafka import codec as aiokafka_codec
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kshare_sidecar.client import records as records_module
from kshare_sidecar.client.records import RecordDecodeError, ShareRecord, share_records

pytestmark = pytest.mark.skipif(not records_module.compiled(),
                                reason="the package was built without a C compiler: no compiled record walk")

_INSTALLED = [0] + [c for c, has in ((1, aiokafka_codec.has_gzip), (2, aiokafka_codec.has_snappy),
                                     (3, aiokafka_codec.has_lz4), (4, aiokafka_codec.has_zstd)) if has()]


def _batch(base: int, records, *, compression: int = 0, log_append_time: int | None = None,
           control: bool = False, per_stamp: int = 1) -> bytes:
    """``per_stamp``: consecutive records sharing a timestamp, as a producer stamps in milliseconds."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=int(control),
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 22)
    for i, (key, value, headers) in enumerate(records):
        b.append(i, timestamp=1_700_000_000_000 + 7 * (i // per_stamp), key=key, value=value, headers=headers)
    raw = bytearray(b.build())
    raw[0:8] = struct.pack(">q", base)
    attributes = struct.unpack_from(">h", raw, 21)[0]
    if log_append_time is not None:
        attributes |= 0x08
        struct.pack_into(">q", raw, 35, log_append_time)
    if control:
        attributes |= 0x20
    struct.pack_into(">h", raw, 21, attributes)
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


def _both(data, ranges, **kw):
    compiled = share_records("t", 3, data, ranges, **kw)
    python = share_records("t", 3, data, ranges, use_compiled=False, **kw)
    return compiled, python


_HEADERS = st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6)), max_size=3)
_RECORD = st.tuples(st.none() | st.binary(max_size=12), st.none() | st.binary(max_size=300), _HEADERS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.tuples(st.lists(_RECORD, min_size=1, max_size=20), st.sampled_from(_INSTALLED),
                                  st.booleans(), st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=4),
       data=st.data())
def test_the_compiled_walk_builds_what_aiokafkas_reader_builds(batches, data):
    """Any batches (codecs, LogAppendTime, control batches, holes between them, records sharing
    timestamps) and any acquired ranges: the same ShareRecords, in the same order, with the same
    offsets."""
    blob, base = b"", 0
    for records, codec, log_append, hole, per_stamp in batches:
        control = log_append and hole == 3
        blob += _batch(base, records if not control else [(b"\0\0\0\0", b"\0" * 6, [])], compression=codec,
                       log_append_time=1_699_999_999_999 if log_append else None, control=control,
                       per_stamp=per_stamp)
        base += len(records) + hole
    cuts = sorted(data.draw(st.lists(st.integers(-2, base + 2), max_size=6)))
    ranges = [(a, b, 1 + i % 4) for i, (a, b) in enumerate(zip(cuts[::2], cuts[1::2]))]
    cut = data.draw(st.integers(0, len(blob)))  # a truncated tail, as MaxBytes leaves it
    (records, offsets), (expected, expected_offsets) = _both(blob[:cut] if cut % 3 == 0 else blob, ranges)
    assert records == expected
    assert offsets == expected_offsets == [r.offset for r in expected]
    assert all(type(r) is ShareRecord and type(r.headers) is tuple for r in records)


def test_deserializers_are_applied_and_their_value_errors_release_the_answer():
    data = _batch(10, [(b"k", b"1", [("h", b"x")]), (None, b"2", [])])
    records, offsets = share_records("t", 0, data, [(10, 11, 2)], key_deserializer=lambda b: b and b.decode(),
                                     value_deserializer=int)
    assert [(r.key, r.value, r.delivery_count) for r in records] == [("k", 1, 2), (None, 2, 2)]
    assert offsets == [10, 11] and records[0].headers == (("h", b"x"),)
    for use_compiled in (True, False):
        with pytest.raises(RecordDecodeError):
            share_records("t", 0, _batch(0, [(None, b"x", [])]), [(0, 0, 1)], value_deserializer=int,
                          use_compiled=use_compiled)

    def boom(_: bytes) -> None:
        raise RuntimeError("the application's own")

    with pytest.raises(RuntimeError):  # not a decoding problem: it reaches the application
        share_records("t", 0, data, [(10, 11, 1)], value_deserializer=boom)


def test_records_past_the_last_range_are_not_read():
    good = _batch(0, [(None, b"a", [])] * 3)
    records, offsets = share_records("t", 0, good, [(1, 1, 1)])
    assert offsets == [1] and records[0].value == b"a"
    assert share_records("t", 0, good, []) == ([], [])


def test_an_uninstalled_codec_is_named():
    data = bytearray(_batch(0, [(None, b"a", [])]))
    struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x07)  # codec 7: none such
    with pytest.raises(RecordDecodeError, match="compressed with 7"):
        share_records("t", 0, bytes(data), [(0, 0, 1)], check_crcs=False)


@settings(max_examples=1500, deadline=None)
@given(records=st.lists(_RECORD, min_size=1, max_size=6), data=st.data())
def test_damaged_records_raise_record_decode_error_and_nothing_else(records, data):
    """Bytes changed anywhere in the record section (the CRC check off, so the walk sees them):
    RecordDecodeError or some records, never a crash, a hang or another exception."""
    blob = bytearray(_batch(0, records))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(61, len(blob) - 1))
        blob[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):  # the record count wrong too
        struct.pack_into(">i", blob, 57, data.draw(st.integers(-2, 2 * len(records) + 2)))
    try:
        got, offsets = share_records("t", 0, bytes(blob), [(-(2**62), 2**62, 1)], check_crcs=False)
    except RecordDecodeError:
        return
    assert len(got) == len(offsets)


def test_the_walk_refuses_a_section_that_does_not_fit_its_buffer():
    from kshare_sidecar.client._records import build

    for pos, end in ((-1, 0), (0, 10**9), (5, 4)):
        with pytest.raises(ValueError, match="does not fit"):
            build(b"\0" * 8, pos, end, 1, 0, 0, 0, 0, "t", 0, [(0, 10, 1)], 0, None, None, ShareRecord, [], [])
