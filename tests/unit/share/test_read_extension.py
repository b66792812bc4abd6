"""A cached read that ends inside what a ShareFetch may acquire is extended with the next bytes:
Kafka reads a share-partition's whole share of MaxBytes at once, so its acquisitions
fill the in-flight window; the sidecar served only the cached part, and a 20,000-record poll on
2 partitions came back with ~13.5k wherever a cached read ended inside the window."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.backend.errors import BackendError
from kshare_sidecar.backend.types import BatchInfo, FetchResult, TopicInfo
from kshare_sidecar.persist.memory import MemoryPersister
from kshare_sidecar.persist.model import SharePartitionKey
from kshare_sidecar.share.log_reader import ShareLogReader, _Budget, _join
from kshare_sidecar.share.cache import SharePartitionCache, Slot
from kshare_sidecar.share.manager import FetchParams, SharePartitionManager
from kshare_sidecar.share.engine.config import ShareConfig
from kshare_sidecar.share.engine.partition import SharePartition
from kshare_sidecar.share.engine.sessions import ShareSessionCache
from kshare_sidecar.share.engine.types import AckBatch

RECORD = 1000  # bytes per record
PER_BATCH = 10  # records per log batch


def batch_bytes(first: int) -> bytes:
    """The bytes of the log batch starting at ``first``: distinct per batch, RECORD per record."""
    tag = f"[{first}]".encode()
    return tag + b"." * (PER_BATCH * RECORD - len(tag))


class SizedLog:
    """One partition of PER_BATCH-record batches; a fetch returns whole batches up to max_bytes
    (at least one), as Kafka does, and counts the fetches."""

    def __init__(self, records: int, topic: TopicInfo | None = None) -> None:
        self.end = records
        self.topic = topic
        self.fetches: list[tuple[int, int]] = []  # (offset, max_bytes)
        self.fail = False

    async def resolve_topic_id(self, topic_id):
        return self.topic

    async def list_offsets(self, topic, partition, spec):
        return 0 if spec == "earliest" else self.end

    async def fetch(self, topic, partition, offset, *, max_bytes, max_wait_ms=0, isolation_level=0):
        if self.fail:
            raise BackendError(7, "backend down")  # REQUEST_TIMED_OUT
        self.fetches.append((offset, max_bytes))
        return read_log(offset, self.end, max_bytes)


def read_log(offset: int, end: int, max_bytes: int) -> FetchResult:
    buf, infos = b"", []
    first = offset - offset % PER_BATCH
    while first < end and (not infos or len(buf) + PER_BATCH * RECORD <= max_bytes):
        data = batch_bytes(first)
        infos.append(BatchInfo(first, first + PER_BATCH - 1, -1, False, False, len(buf), len(buf) + len(data)))
        buf += data
        first += PER_BATCH
    return FetchResult(buf, tuple(infos), end, end, 0)


def slot(window: int = 100) -> Slot:
    sp = SharePartition(ShareConfig(max_record_locks=window), lambda: 0, start_offset=0)
    s = Slot(SharePartitionKey("g", str(uuid.uuid4()), 0), "t", sp)
    s.bytes_per_record = float(RECORD)
    return s


def intact(result: FetchResult) -> bool:
    """Every batch's byte positions point at that batch's bytes, and batches follow each other."""
    offsets = [b.base_offset for b in result.batches]
    return all(result.records[b.start:b.end] == batch_bytes(b.base_offset) for b in result.batches) and \
        offsets == list(range(offsets[0], offsets[-1] + 1, PER_BATCH))


async def reader_with(cached: FetchResult, log: SizedLog, s: Slot) -> ShareLogReader:
    reader = ShareLogReader(log)  # type: ignore[arg-type]  # the fake has the one method used
    reader.cache.put((s.key.topic_id, 0), 0, cached)
    return reader


async def test_a_short_cached_read_is_extended_to_the_window():
    s, log = slot(window=100), SizedLog(1000)
    reader = await reader_with(read_log(0, 1000, 6 * PER_BATCH * RECORD), log, s)  # offsets 0..59 cached
    got = await reader.read(s, 0, 0, _Budget(500, 50_000_000))
    assert got is not None and got.batches[0].base_offset == 0 and got.batches[-1].last_offset >= 99
    assert [offset for offset, _ in log.fetches] == [60]  # read once, from where the cached read ended
    assert intact(got)
    assert reader.cache.get((s.key.topic_id, 0), 99, 0) is got  # the joined read replaced the cached one


async def test_no_extension_at_the_log_end_or_within_max_records():
    s = slot(window=100)
    log = SizedLog(60)  # the cached read reached the log end when it was read
    reader = await reader_with(read_log(0, 60, 10**9), log, s)
    assert (await reader.read(s, 0, 0, _Budget(500, 50_000_000))).batches[-1].last_offset == 59
    log = SizedLog(1000)  # MaxRecords (30) ends inside the cached read
    reader = await reader_with(read_log(0, 1000, 6 * PER_BATCH * RECORD), log, s)
    assert (await reader.read(s, 0, 0, _Budget(30, 50_000_000))).batches[-1].last_offset == 59
    assert log.fetches == []


async def test_a_failing_extension_serves_what_is_cached():
    s, log = slot(window=100), SizedLog(1000)
    reader = await reader_with(read_log(0, 1000, 6 * PER_BATCH * RECORD), log, s)
    log.fail = True
    got = await reader.read(s, 0, 0, _Budget(500, 50_000_000))
    assert got is not None and got.batches[-1].last_offset == 59


async def test_a_read_ahead_entry_extends_without_a_backend_read():
    s, log = slot(window=100), SizedLog(1000)
    reader = await reader_with(read_log(0, 1000, 6 * PER_BATCH * RECORD), log, s)
    reader.cache.put((s.key.topic_id, 0), 0, read_log(60, 1000, 10 * PER_BATCH * RECORD), ahead=True)
    got = await reader.read(s, 0, 0, _Budget(500, 50_000_000))
    assert log.fetches == [] and got.batches[-1].last_offset == 159 and intact(got)


class SlowLog(SizedLog):
    """A SizedLog whose fetches wait for ``gate``: a read that is still on its way."""

    def __init__(self, records: int) -> None:
        super().__init__(records)
        self.gate = asyncio.Event()

    async def fetch(self, topic, partition, offset, *, max_bytes, max_wait_ms=0, isolation_level=0):
        self.fetches.append((offset, max_bytes))
        await self.gate.wait()
        return read_log(offset, self.end, max_bytes)


async def _reading_ahead_from_60(log: SlowLog, s: Slot) -> ShareLogReader:
    """A reader whose read-ahead from offset 60 (after a read of 0..59) is in flight."""
    reader = ShareLogReader(log, read_ahead=True)  # type: ignore[arg-type]
    first = read_log(0, 1000, 6 * PER_BATCH * RECORD)
    s.bytes_per_batch = float(PER_BATCH * RECORD)
    s.partition.acquire("m", first.batches, 60)  # the window holds 0..59: its end is close
    reader.read_ahead(s, first, 0)
    await asyncio.sleep(0)
    assert [offset for offset, _ in log.fetches] == [60]
    return reader


async def test_an_acquisition_waits_for_the_read_ahead_in_flight_instead_of_reading_again():
    s, log = slot(window=100), SlowLog(1000)
    reader = await _reading_ahead_from_60(log, s)
    read = asyncio.ensure_future(reader.read(s, 60, 0, _Budget(40, 50_000_000)))
    await asyncio.sleep(0.01)
    assert not read.done()  # waiting for the read on its way, not reading again
    log.gate.set()
    got = await read
    assert got is not None and got.batches[0].base_offset == 60 and intact(got)
    assert [offset for offset, _ in log.fetches] == [60]  # the bytes were read once


async def test_a_cancelled_acquisition_leaves_the_read_ahead_to_land():
    s, log = slot(window=100), SlowLog(1000)
    reader = await _reading_ahead_from_60(log, s)
    read = asyncio.ensure_future(reader.read(s, 60, 0, _Budget(40, 50_000_000)))
    await asyncio.sleep(0.01)
    read.cancel()
    log.gate.set()
    await asyncio.sleep(0.01)
    assert reader.cache.get((s.key.topic_id, 0), 60, 0) is not None  # landed in the cache all the same
    assert len(log.fetches) == 1


async def test_a_read_before_the_read_ahead_reads_itself():
    s, log = slot(window=100), SlowLog(1000)
    reader = await _reading_ahead_from_60(log, s)
    log.gate.set()  # the read of 0.. must not wait for (or use) the read-ahead from 60
    got = await reader.read(s, 0, 0, _Budget(40, 50_000_000))
    assert got is not None and got.batches[0].base_offset == 0
    assert [offset for offset, _ in log.fetches][:2] == [60, 0]


async def test_the_joined_read_leaves_out_batches_below_the_window_start():
    s, log = slot(window=100), SizedLog(1000)
    reader = await reader_with(read_log(0, 1000, 6 * PER_BATCH * RECORD), log, s)
    sp = s.partition
    sp.acquire("m", [(b.base_offset, b.last_offset, -1, False, False) for b in read_log(0, 1000, 10**9).batches[:4]],
               40)
    plan = sp.prepare_acknowledge("m", [AckBatch(0, 39, (1,))])
    sp.commit(plan)
    assert sp.spso == 40
    got = await reader.read(s, 40, 0, _Budget(500, 50_000_000))
    assert got.batches[0].base_offset == 40 and got.batches[-1].last_offset >= 139 and intact(got)


@given(st.integers(1, 30), st.integers(0, 29), st.integers(0, 40), st.integers(1, 40))
def test_join_is_the_concatenation_of_the_batches(n1: int, cut: int, gap: int, n2: int):
    """Property: joining two reads gives each batch with its own bytes, in log order, from the
    first batch holding ``keep_from`` on; a gap between the reads (compaction) stays a gap."""
    first = read_log(0, n1 * PER_BATCH, 10**9)
    start2 = (n1 + gap) * PER_BATCH
    second = read_log(start2, start2 + n2 * PER_BATCH, 10**9)
    keep_from = min(cut, n1 - 1) * PER_BATCH + 3
    joined = _join(first, second, keep_from)
    expected = [b.base_offset for b in first.batches if b.last_offset >= keep_from] + \
        [b.base_offset for b in second.batches]
    assert [b.base_offset for b in joined.batches] == expected
    assert all(joined.records[b.start:b.end] == batch_bytes(b.base_offset) for b in joined.batches)
    assert len(joined.records) == sum(b.end - b.start for b in joined.batches)
    assert joined.high_watermark == second.high_watermark


# -- through the service: every ShareFetch fills the window -------------------------------------------------------

TOPIC = TopicInfo("jobs", uuid.UUID(int=9), 1)
CONFIG = {"share.record.lock.duration.ms": 30000, "share.delivery.count.limit": 5,
          "share.partition.max.record.locks": 100, "share.auto.offset.reset": "earliest",
          "share.isolation.level": "read_uncommitted"}


@pytest.fixture
async def svc_log():
    persister = MemoryPersister()
    await persister.start()
    log = SizedLog(3000, TOPIC)
    parts = SharePartitionCache(persister=persister, backend=log, clock=lambda: int(time.monotonic() * 1000),
                                  group_config=lambda g: CONFIG, epoch=5)
    parts.start()
    service = SharePartitionManager(sessions=ShareSessionCache(10), partitions=parts, backend=log,
                           group_config=lambda g: CONFIG)
    yield service, log
    await parts.close()
    await persister.close()


async def test_every_share_fetch_fills_the_window_across_cached_reads(svc_log):
    """Window 100, MaxRecords 500: each ShareFetch acknowledges the previous window and acquires
    the next 100 records, also where a cached read ends inside the window (before: that fetch got
    only the cached part: from the 11th fetch on they alternated 40/60 and 10/90)."""
    svc, log = svc_log
    acks: list = []
    got = []
    for epoch in range(20):
        out = await svc.share_fetch(conn_id=1, group_id="g", member_id="m", epoch=epoch,
                                    params=FetchParams(max_wait_ms=50, max_records=500, batch_size=500),
                                    topics=[(TOPIC.topic_id, 0, acks)], forgotten=[])
        [part] = out.partitions
        assert part.ack_error in (None, 0)
        ranges = [(a.first_offset, a.last_offset) for a in part.acquired]
        got.append(sum(last - first + 1 for first, last in ranges))
        acks = [AckBatch(first, last, (1,)) for first, last in ranges]
        await asyncio.sleep(0)
    assert got == [100] * 20, got
    assert len(log.fetches) < 20  # still mostly served from the cache
