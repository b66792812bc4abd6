"""Where each record of a record batch starts: the one sequential walk of decoding (``decode.py``).

A v2 record opens with its length (a zigzag varint), so record *i + 1* starts where record *i*'s
length says; nothing else about a record is needed to find the next one. Everything else is read
column-wise with numpy once the starts are known. The walk runs in the compiled helper
``_walk`` when the package was built with it (a C compiler at install time); otherwise in the
Python loop below, which gives the same answer (``tests/unit/spark/test_decode.py`` compares
them) at a few hundred nanoseconds a record instead of a few.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

_compiled: Callable[[Any, Any, Any, Any], None] | None
try:
    from ._walk import record_starts as _compiled
except ImportError:  # built without a C compiler: the Python loop
    _compiled = None


class ChainError(ValueError):
    """The records do not fill their batch exactly (corrupt or truncated)."""


def compiled() -> bool:
    """Whether the compiled walk is in use."""
    return _compiled is not None


def record_starts(data: Any, spans: Sequence[tuple[int, int]], counts: Sequence[int]) -> np.ndarray:
    """The position of every record's length varint, batch after batch: ``spans`` are the
    batches' record sections in ``data`` ([start, end) byte positions), ``counts`` their record
    counts. Raises :class:`ChainError` unless each section holds exactly its count of records."""
    if _compiled is not None:
        out = np.empty(int(sum(counts)), np.int64)
        try:
            _compiled(data, out, np.asarray(spans, np.int64).reshape(-1), np.asarray(counts, np.int64))
        except ValueError as exc:
            raise ChainError(str(exc)) from None
        return out
    return python_record_starts(data, spans, counts)


def python_record_starts(data: Any, spans: Sequence[tuple[int, int]], counts: Sequence[int]) -> np.ndarray:
    """:func:`record_starts` in Python (the fallback, and the reference the tests compare with)."""
    if not isinstance(data, bytes):
        data = bytes(data)  # indexing bytes is the fastest way to an int in Python
    starts: list[int] = []
    for (pos, end), count in zip(spans, counts):
        chunk = [0] * count
        try:
            for i in range(count):
                chunk[i] = pos
                b = data[pos]
                if b < 0x80:
                    pos += 1 + ((b >> 1) ^ -(b & 1))
                    continue
                v, shift, size = b & 0x7F, 7, 1
                while b >= 0x80:
                    b = data[pos + size]
                    v |= (b & 0x7F) << shift
                    shift += 7
                    size += 1
                    if size > 5:
                        raise ChainError("a record length varint is longer than 5 bytes")
                pos += size + ((v >> 1) ^ -(v & 1))
        except IndexError:
            raise ChainError("a record runs past the end of its batch") from None
        if pos != end:
            raise ChainError(f"the records of a batch end at byte {pos}, the batch at {end}")
        starts += chunk
    return np.array(starts, np.int64)
