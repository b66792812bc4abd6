"""The driver's share consumer: acquire ranges, acknowledge them later, release on stop.

:class:`Acquirer` holds what every driver client shares — the books (``seq`` -> acquired ranges
not yet settled), the ``Trigger.AvailableNow`` wait for an assignment, acknowledging whole batches
and releasing on stop — and two clients fill in the four client steps (open, poll, queue acks,
flush acks):

- :class:`~.acquire_ranges.RangeAcquirer` (the default, ``shareClient=auto``): the project's own
  asyncio share consumer in offsets-only mode. Records are never decoded or copied; only the
  AcquiredRecords ranges of each ShareFetch are kept, and acknowledgements go by range.
- :class:`LibrdkafkaAcquirer` (``shareClient=librdkafka``, or ``auto`` when a ``kafka.share.*``
  setting has no equivalent in the asyncio client): confluent-kafka's ``ShareConsumer`` in
  explicit mode. Payloads arrive and are dropped at once (librdkafka has no offsets-only fetch);
  acknowledgements go by offset (``acknowledge_offset``) and are flushed with ``commit_sync``.
  librdkafka refuses a second ``poll`` while records of the previous one are unacknowledged, so
  each micro-batch is exactly one poll. Every librdkafka call runs inside
  ``lifecycle.consumer_call()`` so that a SIGTERM arriving in the middle of one unwinds instead of
  closing the client under it (``lifecycle.py``); statistics report the assignment and join
  state for ``Trigger.AvailableNow`` (``wait_assigned``).

Either way a batch is planned only after everything before it was acknowledged, which Spark
guarantees (see ``source.py``).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import deque
from itertools import repeat
from operator import length_hint
from typing import TYPE_CHECKING, Any

import numpy as np

from . import gcfreeze, lifecycle
from . import ranges as R
from .options import SourceOptions

if TYPE_CHECKING:  # imported when the first batch is planned (see consumer())
    from confluent_kafka import ShareConsumer

#: librdkafka statistics interval (assignment / join state; cheap at a few partitions).
STATS_INTERVAL_MS = 500
#: Trigger.AvailableNow: how long a member may take to be assigned partitions before the run
#: ends as "nothing acquirable" (Kafka's default heartbeat interval is 5 s).
ASSIGN_TIMEOUT_S = 30.0
#: Trigger.AvailableNow: empty polls (after assignment) that make "nothing acquirable".
IDLE_S = 2.0

log = logging.getLogger("kshare.spark")


class Acquirer:
    """The books and the batch logic both driver clients share (see the module docstring)."""

    def __init__(self, opts: SourceOptions, sid: str | None = None) -> None:
        self.opts = opts
        self.sid = sid or uuid.uuid4().hex[:12]
        #: seq -> ranges acquired in this session and not yet acknowledged or released.
        self.outstanding: dict[int, dict[str, list[R.Range]]] = {}
        self._acquired_at: dict[int, float] = {}
        self.stats = {"acquired": 0, "acknowledged": 0, "ack_failed": 0, "released": 0, "polls": 0}
        #: seconds spent per step of a trigger (logged on stop; the benchmark reads them too)
        self.timings = dict.fromkeys(("acknowledge", "commit", "poll", "take"), 0.0)
        #: partitions assigned and whether the member is in the group (Trigger.AvailableNow).
        self.assigned = 0
        self.joined = False
        self._consumer: Any = None  # the client, made by _open (each subclass its own kind)

    # -- the client's four steps ----------------------------------------------------------
    def _open(self) -> None:
        """Create the client and subscribe (idempotent)."""
        raise NotImplementedError

    def _poll_ranges(self, timeout_s: float) -> tuple[dict[str, list[R.Range]], int]:
        """One poll: the acquired ranges and how many records they hold."""
        raise NotImplementedError

    def _queue_acks(self, ranges: dict[str, list[R.Range]], accept: bool) -> tuple[int, int]:
        """Queue ACCEPT (or RELEASE) for ``ranges``; (applied, failed locally)."""
        raise NotImplementedError

    def _flush(self) -> dict[str, str]:
        """Send queued acks now; the partitions whose acks the broker refused, with the error."""
        raise NotImplementedError

    def _close_client(self) -> None:
        raise NotImplementedError

    def _client_open(self) -> bool:
        return self._consumer is not None

    # -- shared ---------------------------------------------------------------------------
    def end_offsets(self) -> dict[str, int]:
        """``{"topic:partition": log end offset}`` of the subscribed topics now (Trigger.AvailableNow's target)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self.opts.plain_consumer_config())
        try:
            out: dict[str, int] = {}
            meta = consumer.list_topics(timeout=30)
            for topic in self.opts.topics:
                info = meta.topics.get(topic)
                if info is None or info.error is not None:
                    continue  # not there yet: everything in it is "later"
                for partition in info.partitions:
                    _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
                    out[R.tp_key(topic, partition)] = high
            return out
        finally:
            consumer.close()

    def acquire(self, seq: int, timeout_s: float, *, wait_assigned: bool = False) -> dict[str, list[R.Range]]:
        """One poll; returns (and remembers under ``seq``) the acquired ranges, maybe empty.

        ``wait_assigned`` (Trigger.AvailableNow) keeps polling while the member has no
        assignment yet, and until empty polls add up to ``IDLE_S``: an empty result then means
        the group has nothing acquirable for this member, not that it has not joined yet.
        """
        if self.outstanding:
            raise RuntimeError(f"kshare source: cannot acquire batch {seq} while batches "
                               f"{sorted(self.outstanding)} are unacknowledged")
        self._open()
        gcfreeze.freeze_imports()  # see gcfreeze.py
        got, n = self._timed_poll(timeout_s)
        if wait_assigned and not got:
            started = time.monotonic()
            idle_since = started if self.joined and self.assigned else None
            while not got:
                now = time.monotonic()
                if idle_since is None and self.joined and self.assigned:
                    idle_since = now
                if idle_since is not None and now - idle_since >= max(IDLE_S, timeout_s):
                    break
                if idle_since is None and now - started > ASSIGN_TIMEOUT_S:
                    log.warning("kshare source: no partitions assigned to this member of group %s after %.0f s; "
                                "ending the Trigger.AvailableNow run with nothing acquired", self.opts.group,
                                ASSIGN_TIMEOUT_S)
                    break
                got, n = self._timed_poll(min(timeout_s, 0.5) or 0.5)
        if got:
            self.outstanding[seq] = got
            self._acquired_at[seq] = time.monotonic()
            self.stats["acquired"] += n
        return got

    def _timed_poll(self, timeout_s: float) -> tuple[dict[str, list[R.Range]], int]:
        started = time.perf_counter()
        out = self._poll_ranges(timeout_s)
        self.stats["polls"] += 1
        self.timings["poll"] += time.perf_counter() - started
        return out

    def acknowledge_through(self, seq: int) -> int:
        """ACCEPT every outstanding batch with sequence <= ``seq`` now; return the records acked."""
        due = sorted(s for s in self.outstanding if s <= seq)
        if not due:
            return 0
        return self._settle(due, accept=True)

    def _settle(self, seqs: list[int], *, accept: bool) -> int:
        self._open()
        done = failed = 0
        now = time.monotonic()
        started = time.perf_counter()
        for s in seqs:
            held_ms = (now - self._acquired_at.pop(s, now)) * 1000
            if accept and held_ms > 0.5 * self.opts.lock_ms:
                log.warning(
                    "kshare source: batch %d was acknowledged %.0f ms after it was polled, more than half the "
                    "acquisition lock (%d ms); records may have been redelivered. Raise the group's "
                    "share.record.lock.duration.ms or lower maxRecordsPerTrigger / the trigger interval.",
                    s, held_ms, self.opts.lock_ms)
            applied, missed = self._queue_acks(self.outstanding.pop(s), accept)
            done += applied
            failed += missed
        self.timings["acknowledge"] += time.perf_counter() - started
        self._report(self._timed_flush(), failed)
        self.stats["acknowledged" if accept else "released"] += done
        self.stats["ack_failed"] += failed
        return done

    def _timed_flush(self) -> dict[str, str]:
        started = time.perf_counter()
        try:
            return self._flush()
        except Exception as exc:
            log.warning("kshare source: flushing acknowledgements failed (%s); unacknowledged records are "
                        "redelivered after their lock expires", exc)
            return {}
        finally:
            self.timings["commit"] += time.perf_counter() - started

    @staticmethod
    def _report(bad: dict[str, str], failed: int) -> None:
        if bad or failed:
            log.warning("kshare source: %d acknowledgements could not be applied locally, broker errors: %s; "
                        "those records will be redelivered (at-least-once)", failed, bad or "none")

    def close(self, *, release: bool = True) -> None:
        """Release what is still acquired (it is redelivered to other members) and leave the group."""
        if not self._client_open():
            return
        try:
            if release and self.outstanding:
                self._settle(sorted(self.outstanding), accept=False)
        finally:
            self.outstanding.clear()
            self._close_client()


class LibrdkafkaAcquirer(Acquirer):
    """The driver on confluent-kafka's ``ShareConsumer`` (see the module docstring)."""

    def __init__(self, opts: SourceOptions, sid: str | None = None) -> None:
        super().__init__(opts, sid)
        self._consumer: ShareConsumer | None = None

    def _open(self) -> None:
        self.consumer()

    def consumer(self) -> ShareConsumer:
        if self._consumer is None:
            from confluent_kafka import ShareConsumer

            config = self.opts.share_consumer_config()
            config.setdefault("statistics.interval.ms", STATS_INTERVAL_MS)
            config["stats_cb"] = self._on_stats
            with lifecycle.consumer_call():
                consumer = ShareConsumer(config)
                consumer.subscribe(list(self.opts.topics))
            self._consumer = consumer
        return self._consumer

    def _on_stats(self, text: str) -> None:
        try:
            cgrp = json.loads(text).get("cgrp") or {}
        except ValueError:
            return
        self.assigned = int(cgrp.get("assignment_size") or 0)
        self.joined = cgrp.get("join_state") == "steady"

    def _poll_ranges(self, timeout_s: float) -> tuple[dict[str, list[R.Range]], int]:
        with lifecycle.consumer_call():
            msgs = self.consumer().poll(timeout_s)
        return self._take(msgs)

    def _take(self, msgs) -> tuple[dict[str, list[R.Range]], int]:
        """The poll's records as ranges. Column-wise: each ``Message`` accessor runs over the whole
        poll in C (``map``) and the ranges come from numpy (``ranges.compress_columns``), not from
        Python work per record (~40% of ``latestOffset`` on the driver was this loop)."""
        from confluent_kafka import KafkaError, KafkaException, Message

        started = time.perf_counter()
        if any(map(Message.error, msgs)):  # rare: error events among the records
            good = []
            for msg in msgs:
                err = msg.error()
                if err is None:
                    good.append(msg)
                    continue
                if err.fatal():
                    raise KafkaException(err)
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("kshare source: share consumer reported %s", err)
            msgs = good
        n = len(msgs)
        counts: list[Any] = list(map(Message.delivery_count, msgs))
        if None in counts:
            counts = [c or 1 for c in counts]
        topics: list[Any] = list(map(Message.topic, msgs))  # a record always has its topic
        out = R.compress_columns(topics,
                                 np.fromiter(map(Message.partition, msgs), np.int64, n),
                                 np.fromiter(map(Message.offset, msgs), np.int64, n), counts)
        del msgs  # payloads are not needed on the driver
        self.timings["take"] += time.perf_counter() - started
        return out, n

    def _queue_acks(self, ranges: dict[str, list[R.Range]], accept: bool) -> tuple[int, int]:
        from confluent_kafka import AcknowledgeType

        with lifecycle.consumer_call():
            return _acknowledge_ranges(self.consumer(), ranges,
                                       AcknowledgeType.ACCEPT if accept else AcknowledgeType.RELEASE)

    def _flush(self) -> dict[str, str]:
        with lifecycle.consumer_call():
            results = self.consumer().commit_sync(30.0) or {}
        return {f"{tp.topic}:{tp.partition}": str(err) for tp, err in results.items() if err is not None}

    def _close_client(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        try:
            with lifecycle.consumer_call():
                consumer.close()
        except Exception as exc:  # already closed / broker gone
            log.debug("kshare source: closing the share consumer: %s", exc)


def _acknowledge_ranges(consumer, ranges: dict[str, list[R.Range]], ack_type) -> tuple[int, int]:
    """``acknowledge_offset`` for every offset of ``ranges``; (applied, failed). The calls run in C
    (``map`` drained by a zero-length deque), not a Python loop per record; an offset that is not
    in flight any more (lock lapsed, session reset: it will be redelivered) raises, is counted and
    skipped, and the run goes on after it."""
    ack = consumer.acknowledge_offset
    done = failed = 0
    for key, rs in ranges.items():
        topic, partition = R.split_key(key)
        for first, last, _ in rs:
            position = first
            while position <= last:
                offsets = iter(range(position, last + 1))
                try:
                    deque(map(ack, repeat(topic), repeat(partition), offsets, repeat(ack_type)), maxlen=0)
                except Exception:
                    bad = last - length_hint(offsets)  # the offset whose call raised
                    done += bad - position
                    failed += 1
                    position = bad + 1
                else:
                    done += last - position + 1
                    break
    return done, failed
