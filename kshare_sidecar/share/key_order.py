"""Key-ordered acquisition in the fetch path (share.key.ordering; share/engine/keyorder.py has the rule).

The sidecar passes record batches through as bytes; ordering by key needs each acquired record's
key, so this module decodes — only for share-partitions of groups with ``share.key.ordering`` (the
fetch path of every other group never calls it) and only the batches that overlap what was just
acquired and whose keys are not known yet. Compressed batches are decompressed with the codecs
installed (client/records.py: gzip always; snappy, lz4, zstd when their packages are there); a
batch that cannot be decoded is delivered unordered and logged, never dropped. After a restart,
the keys of held records (a backoff, a pending dead-letter write) are read from the backend once
before the first ordering, so no later record of their key can overtake them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..client.records import RecordDecodeError, decode_batches
from ..backend.types import BatchInfo, FetchResult
from ..ratelog import RateLimitedLog
from .engine.types import AcquiredRecords

log = logging.getLogger("kshare.keyorder")
_undecodable = RateLimitedLog(log)


def _learn(sp, records: bytes | memoryview, first: int, last: int) -> None:
    for rec in decode_batches(records, check_crcs=False):
        if first <= rec.offset <= last:
            sp.key_index.learn(rec.offset, rec.key)


async def _learn_held(backend, slot) -> None:
    sp = slot.partition
    for first, last in sp.unindexed_holds():
        offset = first
        while offset <= last:
            result = await backend.fetch(slot.topic, slot.key.partition, offset, max_bytes=1024 * 1024,
                                         max_wait_ms=0, isolation_level=0)
            if result.error_code or not result.batches:
                break
            _learn(sp, result.records, first, last)
            offset = result.batches[-1].last_offset + 1
        for o in range(first, last + 1):  # gone from the log or no record: no key, nothing to wait for
            sp.key_index.learn(o, None)


async def order(backend, slot, member_id: str, acquired: list[AcquiredRecords], result: FetchResult,
                batches: Sequence[BatchInfo]) -> list[AcquiredRecords]:
    """What ``member_id`` may have of ``acquired`` under key ordering; the rest is held back."""
    sp = slot.partition
    if sp.unindexed_holds():
        await _learn_held(backend, slot)
    idx = sp.key_index
    view = memoryview(result.records)
    ranges = sorted((a.first_offset, a.last_offset) for a in acquired)
    i, n = 0, len(ranges)
    for b in batches:  # a merge of two sorted lists: the batches overlapping an acquired range
        while i < n and ranges[i][1] < b.base_offset:
            i += 1
        if i == n:
            break
        if ranges[i][0] > b.last_offset:
            continue
        if idx.knows(b.base_offset) and idx.knows(b.last_offset):
            continue
        try:
            _learn(sp, view[b.start:b.end], b.base_offset, b.last_offset)
        except RecordDecodeError as exc:
            _undecodable.log("decode", logging.WARNING, "group=%s partition=%s-%d: batch at %d cannot be decoded "
                             "for key ordering, delivered unordered: %s", slot.key.group_id, slot.topic,
                             slot.key.partition, b.base_offset, exc)
    return sp.order_by_key(member_id, acquired, idx.keys.get)
