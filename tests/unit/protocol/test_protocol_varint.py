"""The one unsigned-varint reader and writer of the hand-written parsers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.protocol.varint import VarintError, read_uvarint, skip_tagged_fields, uvarint


def test_known_encodings():
    assert [uvarint(n) for n in (0, 1, 127, 128, 300, 2**31)] == [
        b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xac\x02", b"\x80\x80\x80\x80\x08"]


@given(st.integers(0, 2**32 - 1), st.binary(max_size=4), st.binary(max_size=4))
def test_read_what_was_written_anywhere_in_a_buffer(n, before, after):
    buf = before + uvarint(n) + after
    assert read_uvarint(buf, len(before)) == (n, len(before) + len(uvarint(n)))
    assert read_uvarint(memoryview(buf), len(before)) == (n, len(before) + len(uvarint(n)))


def test_longer_than_kafka_writes_is_an_error_not_a_number():
    with pytest.raises(VarintError):
        read_uvarint(b"\xff" * 5 + b"\x01", 0)
    with pytest.raises(VarintError):
        read_uvarint(b"\x80" * 1000, 0)  # would shift for ever unbounded


def test_truncated_is_an_index_error_the_parsers_turn_into_their_own():
    with pytest.raises(IndexError):
        read_uvarint(b"\x80\x80", 0)


def test_tagged_fields_are_skipped_by_size():
    section = uvarint(2) + uvarint(0) + uvarint(3) + b"abc" + uvarint(7) + uvarint(0)
    assert skip_tagged_fields(section + b"rest", 0) == len(section)
    assert skip_tagged_fields(b"\x00", 0) == 1
