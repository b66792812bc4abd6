"""Acquired ranges: the only thing a kshare offset carries (JSON-friendly, no payloads).

An offset of the source is ``{"seq": n, "sid": session, "ranges": {"topic:partition":
[[first, last, deliveryCount], ...]}}``: the records acquired for micro-batch ``n`` by the
driver's share session ``sid``. ``n`` is Spark's batchId: the initial offset has -1 and every
batch this source offers is the next batchId (it differs only when the query runs batches
without new data from this source: unions with other sources, stateful no-data batches). Runs of consecutive offsets with one delivery count collapse
into one range, so a 10k-record batch usually needs a handful of numbers.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    per_tp: dict[str, list[tuple[int, int]]] = {}
    for topic, partition, offset, count in records:
        per_tp.setdefault(tp_key(topic, partition), []).append((offset, count))
    out: dict[str, list[Range]] = {}
    for key in sorted(per_tp):
        ranges: list[Range] = []
        for offset, count in sorted(set(per_tp[key])):
            if ranges and ranges[-1][1] + 1 == offset and ranges[-1][2] == count:
                ranges[-1][1] = offset
            elif ranges and ranges[-1][1] >= offset:  # same offset twice: keep the first count
                continue
            else:
                ranges.append([offset, offset, count])
        out[key] = ranges
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
