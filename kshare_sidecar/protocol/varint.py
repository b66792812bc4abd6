"""Kafka's unsigned varints: the lengths of flexible versions' compact arrays, strings and bytes,
and the tagged fields after every structure (KIP-482).

One reader for every hand-written parser (Fetch answers, Produce routing, the reserved-API
answers) so each of them is bounded the same way: Kafka writes at most five bytes for an int32,
and a longer run is a malformed frame, not a number to keep shifting. A truncated buffer raises
``IndexError`` like any other read past the end, which the parsers already turn into their own
error.
"""

from __future__ import annotations

MAX_BYTES = 5


class VarintError(ValueError):
    """An unsigned varint longer than Kafka ever writes."""


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """``(value, position after it)`` of the unsigned varint at ``pos``."""
    b = buf[pos]
    if b < 0x80:  # nearly every length and tag count: one byte
        return b, pos + 1
    value, shift = b & 0x7F, 7
    for i in range(1, MAX_BYTES):
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + i + 1
        shift += 7
    raise VarintError(f"an unsigned varint at offset {pos} is longer than {MAX_BYTES} bytes")


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """The position after a tagged-fields section: the fields are skipped by their sizes, as
    Kafka's clients skip tags they do not know."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)  # tag
        size, pos = read_uvarint(buf, pos)
        pos += size
    return pos


def uvarint(n: int) -> bytes:
    """The unsigned varint of ``n`` (``n`` ≥ 0)."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_compact_string(buf: bytes, pos: int) -> tuple[str | None, int]:
    """``(text or None, position after it)`` of the compact nullable string at ``pos``; ValueError
    when it runs past the end of ``buf`` or is not UTF-8 (UnicodeDecodeError)."""
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise ValueError(f"a compact string at offset {pos} runs past the end")
    return buf[pos:end].decode(), end


def compact_string(text: str | None) -> bytes:
    """A flexible version's compact nullable string: uvarint(length + 1) and the UTF-8 bytes, 0 for null."""
    if text is None:
        return b"\x00"
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw
