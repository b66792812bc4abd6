"""The ``kshare`` PySpark streaming data source: a share group as a Spark micro-batch stream.

Design (see docs/spark.md):
- The **driver** holds one share consumer (explicit acknowledgement). ``latestOffset(start,
  limit)`` first acknowledges (ACCEPT) everything this session acquired up to ``start`` —
  Spark calls it only after the batch ending at ``start`` finished and its commit-log entry
  was written — then acquires the next batch with one poll.
- An offset carries only the acquired ranges of its batch (``ranges.py``); never payloads.
- ``partitions(start, end)`` cuts the ranges into even input partitions (``ranges.split``: the
  share group decides how a batch spreads over topic-partitions, and it spreads unevenly);
  ``read`` on the **executors** fetches exactly those offsets from the backend and decodes the
  record batches straight into Arrow columns (``read.py``).
- ``commit(end)`` acknowledges too (idempotent backup); ``stop()`` releases what is still
  acquired and closes the share session. Spark ends the source process with SIGTERM, which
  would skip ``stop()``; ``lifecycle.py`` runs it from a SIGTERM handler.
- ``Trigger.AvailableNow`` (``SupportsTriggerAvailableNow``): the target is the log end offsets
  when the trigger starts; batches are acquired and acknowledged as usual until nothing is
  acquirable or a batch holds only records written after the trigger started.
- An offset's ``seq`` is Spark's batchId of the batch it ends (the initial offset has -1), so
  driver log lines name Spark's batch; executors take the batchId from the task.
- A batch planned by an earlier session (a restarted query replaying its last uncommitted
  batch) is **not** re-read: that session is gone, its records were released or their locks
  lapse, and the share group redelivers them with a higher delivery count. Replaying them too
  would only add duplicates, and would replay a poison record forever.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

if TYPE_CHECKING:  # the `spark` extra pins PySpark 4.2+, so mypy sees the real classes
    from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
else:
    try:  # PySpark 4.2+: admission control (latestOffset(start, limit), getDefaultReadLimit)
        from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
    except ImportError:  # PySpark < 4.2 calls latestOffset() without arguments; see latestOffset
        ReadLimit = ReadMaxRows = None

        class SupportsTriggerAvailableNow:  # never consulted before 4.2
            pass

from . import lifecycle
from . import ranges as R
from .acquire import Acquirer, LibrdkafkaAcquirer
from .acquire_ranges import RangeAcquirer
from .clientconf import validate_clients
from .options import SourceOptions, parse_options
from .read import read_ranges
from .readclient import reader_client
from .shareclient import driver_client

log = logging.getLogger("kshare.spark")

#: Fewest records worth a Spark task of their own when a batch is split (``_pieces``): a task
#: costs a few ms of scheduling and Python worker round trips whatever it reads.
MIN_SLICE = 1000

#: The rows' columns (Spark SQL DDL): Spark's Kafka source's plus ``deliveryCount``; the
#: ``headers`` column only with ``includeHeaders=true``, as in Spark's Kafka source: it costs every
#: batch even when all null (a Python source's batch of 20k rows, 5-13 ms more in Spark's addBatch
#: measured). ``read.arrow_schema`` is the Arrow form of both.
_COLUMNS = (("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "long"),
            ("timestamp", "timestamp"), ("timestampType", "int"))
_HEADERS = ("headers", "array<struct<key: string, value: binary>>")
_COUNT = ("deliveryCount", "int")
SCHEMA = ", ".join(f"{name} {kind}" for name, kind in (*_COLUMNS, _COUNT))
SCHEMA_WITH_HEADERS = ", ".join(f"{name} {kind}" for name, kind in (*_COLUMNS, _HEADERS, _COUNT))


def schema_for(opts: SourceOptions) -> str:
    return SCHEMA_WITH_HEADERS if opts.include_headers else SCHEMA


class ShareGroupDataSource(DataSource):
    """``spark.readStream.format("kshare")``: consume a Kafka share group (native or via kshare)."""

    def __init__(self, options) -> None:
        super().__init__(options)
        # Validate up front so that load() fails with a clear message before any I/O: the
        # source's own options, then the kafka.* settings by librdkafka itself.
        self.parsed: SourceOptions = parse_options(options)
        validate_clients(self.parsed)
        driver_client(self.parsed)  # shareClient=kshare with a setting only librdkafka has: fail here
        reader_client(self.parsed)  # the same for readClient=kshare

    @classmethod
    def name(cls) -> str:
        return "kshare"

    def schema(self) -> str:
        return schema_for(self.parsed)

    def streamReader(self, schema) -> DataSourceStreamReader:
        which, why = reader_client(self.parsed)
        log.info("kshare source: the executors read with %s (%s)", which, why)
        return ShareGroupStreamReader(self.parsed)


class ShareGroupPartition(InputPartition):
    """One Spark task's share of a micro-batch: ranges of one or more topic-partitions, read in turn
    (``ranges.split`` evens the batch out across tasks)."""

    def __init__(self, parts: list[tuple[str, int, list[list[int]]]]) -> None:
        super().__init__(None)
        self.parts = parts

    def __repr__(self) -> str:
        listed = ", ".join(f"{topic}[{partition}] {len(rs)} ranges" for topic, partition, rs in self.parts)
        return f"ShareGroupPartition({listed})"


class ShareGroupStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.sid = uuid.uuid4().hex[:12]
        self._acquirer: Acquirer | None = None
        self._offered: dict | None = None  # the last offset handed to Spark
        #: Trigger.AvailableNow: log end offsets when the trigger started; None otherwise.
        self._target: dict[str, int] | None = None
        self._target_reached = False

    # -- driver ------------------------------------------------------------------------
    @property
    def acquirer(self) -> Acquirer:
        if self._acquirer is None:
            which, why = driver_client(self.opts)
            log.info("kshare source: the driver's share consumer is %s (%s)", which, why)
            cls = RangeAcquirer if which == "kshare" else LibrdkafkaAcquirer
            self._acquirer = cls(self.opts, self.sid)
            lifecycle.watch(self)  # only the driver's source process gets here
        return self._acquirer

    def initialOffset(self) -> dict:
        return R.initial_offset()

    def prepareForTriggerAvailableNow(self) -> None:
        """Remember what "available now" means: the log end offsets at this moment."""
        self._target = self.acquirer.end_offsets()
        self._target_reached = False
        log.info("kshare source: Trigger.AvailableNow for group %s up to %s", self.opts.group, self._target)

    def getDefaultReadLimit(self) -> ReadLimit:
        # Only called by PySpark 4.2+, where ReadMaxRows exists.
        return ReadMaxRows(self.opts.max_records)

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        # PySpark < 4.2 (tried: 4.0.0) passes neither: `start` is then the last offset offered to Spark, which with
        # synchronous progress tracking is also planned, run and committed by the time Spark asks
        # again. The batch size comes from max.poll.records (= maxRecordsPerTrigger) either way.
        start = start if start is not None else (self._offered or R.initial_offset())
        seq = int(start.get("seq", -1))
        acq = self.acquirer
        # Everything up to `start` is processed: Spark plans the next batch only after the
        # previous one finished and was recorded in the commit log. They are sent (and the
        # window freed) before the poll: acks riding on the ShareFetch that acquires are applied
        # while it acquires, so it finds the window still full and the batch comes out smaller.
        acq.acknowledge_through(seq)
        if acq.outstanding:
            # Spark has not consumed our last offer yet: offer it again, acquire nothing new.
            latest = max(acq.outstanding)
            if self._offered is not None and self._offered["seq"] == latest:
                return self._offered
            log.warning("kshare source: releasing batches %s that Spark never planned", sorted(acq.outstanding))
            acq._settle(sorted(acq.outstanding), accept=False)
        available_now = self._target is not None
        if available_now and self._target_reached:
            log.info("kshare source: Trigger.AvailableNow done after batch %d (records written after the trigger "
                     "started come next time)", seq)
            return start
        got = acq.acquire(seq + 1, self.opts.poll_timeout_ms / 1000, wait_assigned=available_now)
        if not got:
            if available_now:
                log.info("kshare source: Trigger.AvailableNow done after batch %d: nothing acquirable", seq)
            return start
        if available_now and not self._below_target(got):
            # Only records written after the trigger started: process this batch, then end.
            self._target_reached = True
        log.debug("kshare source: batch %d acquired %d records", seq + 1, R.count(got))
        self._offered = {"seq": seq + 1, "sid": self.sid, "ranges": got}
        return self._offered

    def _below_target(self, got: dict[str, list[list[int]]]) -> bool:
        """Whether any acquired record was in the log when Trigger.AvailableNow started."""
        target = self._target or {}
        return any(rs and rs[0][0] < target.get(key, 0) for key, rs in got.items())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if int(end.get("seq", -1)) == int(start.get("seq", -1)) or not end.get("ranges"):
            return []
        if end.get("sid") != self.sid:
            n = R.count(end["ranges"])
            log.warning(
                "kshare source: batch %s was planned by an earlier share session (%s); not re-reading its %d "
                "records: the share group redelivers them with a higher delivery count", end.get("seq"),
                end.get("sid"), n)
            return []
        ranges = end["ranges"]
        total = R.count(ranges)
        slices = R.split(ranges, self._pieces(len(ranges), total))
        log.debug("kshare source: batch %s: %d records in %d input partitions", end.get("seq"), total, len(slices))
        return [ShareGroupPartition([(*R.split_key(key), [list(r) for r in rs]) for key, rs in piece])
                for piece in slices]

    def _pieces(self, topic_partitions: int, records: int) -> int:
        """How many input partitions a batch gets: the most of ``minPartitions``, the
        topic-partitions assigned to this member and those in the batch -- as Spark's Kafka source
        has one per topic-partition, but with the records spread evenly over them, since the share
        group, not the source, decides where a batch's records come from; never slices under
        ``MIN_SLICE`` records."""
        assigned = self._acquirer.assigned if self._acquirer is not None else 0
        wanted = max(self.opts.min_partitions or 0, assigned, topic_partitions)
        return max(1, min(wanted, -(-records // MIN_SLICE)))

    def commit(self, end: dict) -> None:
        if self._acquirer is not None:  # nothing acquired in this session: nothing to acknowledge
            self._acquirer.acknowledge_through(int(end.get("seq", -1)))

    def stop(self) -> None:
        acquirer, self._acquirer = self._acquirer, None
        lifecycle.unwatch(self)
        if acquirer is not None:
            log.info("kshare source: stopping, stats %s", acquirer.stats)
            acquirer.close(release=True)

    # -- executors ---------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator:
        part = cast(ShareGroupPartition, partition)  # partitions() made every one of them
        for topic, number, ranges in part.parts:
            yield from read_ranges(self.opts, topic, number, ranges)
