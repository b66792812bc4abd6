"""Acquired ranges: the only thing a kshare offset carries (JSON-friendly, no payloads).

An offset of the source is ``{"seq": n, "sid": session, "ranges": {"topic:partition":
[[first, last, deliveryCount], ...]}}``: the records acquired for micro-batch ``n`` by the
driver's share session ``sid``. ``n`` is Spark's batchId: the initial offset has -1 and every
batch this source offers is the next batchId (it differs only when the query runs batches
without new data from this source: unions with other sources, stateful no-data batches). Runs of consecutive offsets with one delivery count collapse
into one range, so a 10k-record batch usually needs a handful of numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

Range = list[int]  # [first, last, delivery_count], inclusive


def initial_offset() -> dict:
    return {"seq": -1, "sid": "", "ranges": {}}


def tp_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"  # Kafka topic names cannot contain ':'


def split_key(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition(":")
    return topic, int(partition)


def compress(records: Iterable[tuple[str, int, int, int]]) -> dict[str, list[Range]]:
    """``(topic, partition, offset, delivery_count)`` -> sorted, merged ranges per topic-partition."""
    columns = list(zip(*records))
    if not columns:
        return {}
    topics, partitions, offsets, counts = columns
    return compress_columns(topics, partitions, offsets, counts)


def compress_columns(topics: Sequence[str], partitions: Sequence[int] | np.ndarray,
                     offsets: Sequence[int] | np.ndarray, counts: Sequence[int] | np.ndarray) -> dict[str, list[Range]]:
    """:func:`compress` over columns, vectorised: the driver turns a 20k-record poll into ranges
    without Python work per record. Sorted by topic, partition, offset (and count, so
    that an offset seen twice keeps its lowest count); a range breaks where the topic-partition
    changes, an offset is missing or the delivery count changes. Keys come out in sorted order."""
    n = len(offsets)
    if not n:
        return {}
    names = sorted(set(topics))
    if len(names) == 1:
        tcode = np.zeros(n, np.int64)
    else:
        index = {name: i for i, name in enumerate(names)}
        tcode = np.fromiter(map(index.__getitem__, topics), np.int64, n)
    part = np.asarray(partitions, np.int64)
    off = np.asarray(offsets, np.int64)
    cnt = np.asarray(counts, np.int64)
    order = np.lexsort((cnt, off, part, tcode))
    tcode, part, off, cnt = tcode[order], part[order], off[order], cnt[order]
    same_tp = (tcode[1:] == tcode[:-1]) & (part[1:] == part[:-1])
    dup = same_tp & (off[1:] == off[:-1])
    if dup.any():  # an offset seen twice: keep the first (lowest count)
        keep = np.concatenate(([True], ~dup))
        tcode, part, off, cnt = tcode[keep], part[keep], off[keep], cnt[keep]
        same_tp = (tcode[1:] == tcode[:-1]) & (part[1:] == part[:-1])
    breaks = np.concatenate(([True], ~same_tp | (off[1:] != off[:-1] + 1) | (cnt[1:] != cnt[:-1])))
    starts = np.flatnonzero(breaks)
    ends = np.append(starts[1:], len(off)) - 1
    out: dict[str, list[Range]] = {}
    for t, p, first, last, c in zip(tcode[starts].tolist(), part[starts].tolist(), off[starts].tolist(),
                                    off[ends].tolist(), cnt[starts].tolist()):
        out.setdefault(tp_key(names[t], p), []).append([first, last, c])
    return {key: out[key] for key in sorted(out)}


def merge(ranges: Iterable[tuple[int, int, int]]) -> list[Range]:
    """Ranges (``first, last, delivery_count``) sorted, adjacent ones with one count collapsed: the
    same runs :func:`compress` makes from records, from ranges a broker already gave (the asyncio
    driver's AcquiredRecords). Work per range, not per record."""
    out: list[Range] = []
    for first, last, cnt in sorted(ranges):
        if out and out[-1][1] + 1 == first and out[-1][2] == cnt:
            out[-1][1] = last
        else:
            out.append([first, last, cnt])
    return out


def count(ranges: dict[str, list[Range]]) -> int:
    return sum(last - first + 1 for rs in ranges.values() for first, last, _ in rs)


def offsets(ranges: dict[str, list[Range]]) -> Iterable[tuple[str, int, int]]:
    """Every ``(topic, partition, offset)`` the ranges cover."""
    for key, rs in ranges.items():
        topic, partition = split_key(key)
        for first, last, _ in rs:
            for offset in range(first, last + 1):
                yield topic, partition, offset


Piece = list[tuple[str, list[Range]]]  # (topic:partition key, ranges) in key order


def split(ranges: dict[str, list[Range]], pieces: int) -> list[Piece]:
    """Cut a batch into ``pieces`` slices of nearly equal record counts (they differ by at most
    one), in key and offset order, cutting ranges where a slice ends; fewer slices when the batch
    has fewer records than ``pieces``, none when it is empty.

    Why: a share group decides how many records of a batch come from each partition,
    and it is far from even -- a 20k-record batch on two partitions came as 14-17k + 3-9k, and the
    last batches of a drain from one partition only -- so one Spark task per topic-partition left
    a core idle for most of every batch. Spark's Kafka source gets even batches by choosing the
    offsets itself. A slice may span two topic-partitions; the reader reads them in turn."""
    total = count(ranges)
    pieces = max(1, min(pieces, total))
    if not total:
        return []
    base, extra = divmod(total, pieces)  # the first `extra` slices take one record more
    out: list[Piece] = []
    current: Piece = []
    room = base + (extra > 0)  # records the current slice still takes
    for key in sorted(ranges):
        for first, last, cnt in sorted(ranges[key]):
            while first <= last:
                take = min(room, last - first + 1)
                if current and current[-1][0] == key:
                    current[-1][1].append([first, first + take - 1, cnt])
                else:
                    current.append((key, [[first, first + take - 1, cnt]]))
                first += take
                room -= take
                if not room:
                    out.append(current)
                    current = []
                    room = base + (len(out) < extra)
    return out
