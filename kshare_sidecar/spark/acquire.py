"""The driver's share consumer: acquire ranges, acknowledge them later, release on stop.

One long-lived confluent-kafka ``ShareConsumer`` in explicit-acknowledgement mode lives in
Spark's driver-side Python streaming-source process. Payloads arrive (librdkafka has no
offsets-only fetch) but are dropped at once: only ``(topic, partition, offset,
deliveryCount)`` is kept, compressed into ranges. Acknowledgements go by offset
(``acknowledge_offset``) and are flushed with ``commit_sync`` so failures are visible.

librdkafka refuses a second ``poll`` while records of the previous one are unacknowledged,
so each micro-batch is exactly one poll: the batch is planned only after everything before
it was acknowledged (which Spark guarantees, see ``source.py``).

Every librdkafka call runs inside ``lifecycle.consumer_call()`` so that a SIGTERM arriving in
the middle of one unwinds instead of closing the client under it (``lifecycle.py``). The share
consumer reports statistics (assignment and join state) so that ``Trigger.AvailableNow`` can
tell "nothing acquirable" from "not assigned yet" (``wait_assigned``).
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
    def __init__(self, opts: SourceOptions, sid: str | None = None) -> None:
        self.opts = opts
        self.sid = sid or uuid.uuid4().hex[:12]
        self._consumer: ShareConsumer | None = None
        #: seq -> ranges acquired in this session and not yet acknowledged or released.
        self.outstanding: dict[int, dict[str, list[R.Range]]] = {}
        self._acquired_at: dict[int, float] = {}
        self.stats = {"acquired": 0, "acknowledged": 0, "ack_failed": 0, "released": 0, "polls": 0}
        #: seconds spent per step of a trigger (logged on stop; the benchmark reads them too)
        self.timings = dict.fromkeys(("acknowledge", "commit", "poll", "take"), 0.0)
        #: from librdkafka's statistics: partitions assigned and whether the member is in the group.
        self.assigned = 0
        self.joined = False

    # -- client ------------------------------------------------------------------------
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

    # -- acquisition -------------------------------------------------------------------
    def acquire(self, seq: int, timeout_s: float, *, wait_assigned: bool = False) -> dict[str, list[R.Range]]:
        """One poll; returns (and remembers under ``seq``) the acquired ranges, maybe empty.

        ``wait_assigned`` (Trigger.AvailableNow) keeps polling while the member has no
        assignment yet, and until empty polls add up to ``IDLE_S``: an empty result then means
        the group has nothing acquirable for this member, not that it has not joined yet.
        """
        if self.outstanding:
            raise RuntimeError(f"kshare source: cannot acquire batch {seq} while batches "
                               f"{sorted(self.outstanding)} are unacknowledged")
        consumer = self.consumer()
        gcfreeze.freeze_imports()  # see gcfreeze.py
        msgs = self._poll(consumer, timeout_s)
        if wait_assigned and not len(msgs):
            started = time.monotonic()
            idle_since = started if self.joined and self.assigned else None
            while not len(msgs):
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
                msgs = self._poll(consumer, min(timeout_s, 0.5) or 0.5)
        return self._take(seq, msgs)

    def _poll(self, consumer, timeout_s: float):
        started = time.perf_counter()
        with lifecycle.consumer_call():
            msgs = consumer.poll(timeout_s)
        self.stats["polls"] += 1
        self.timings["poll"] += time.perf_counter() - started
        return msgs

    def _take(self, seq: int, msgs) -> dict[str, list[R.Range]]:
        """The poll's records as ranges. Column-wise: each ``Message`` accessor runs over the whole
        poll in C (``map``) and the ranges come from numpy (``ranges.compress_columns``), not from
        Python work per record (issue 19: ~40% of ``latestOffset`` on the driver was this loop)."""
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
        if out:
            self.outstanding[seq] = out
            self._acquired_at[seq] = time.monotonic()
            self.stats["acquired"] += n
        self.timings["take"] += time.perf_counter() - started
        return out

    # -- acknowledgement ---------------------------------------------------------------
    def acknowledge_through(self, seq: int) -> int:
        """ACCEPT every outstanding batch with sequence <= ``seq``; return the records acked."""
        due = sorted(s for s in self.outstanding if s <= seq)
        if not due:
            return 0
        return self._settle(due, accept=True)

    def _settle(self, seqs: list[int], *, accept: bool) -> int:
        from confluent_kafka import AcknowledgeType

        ack_type = AcknowledgeType.ACCEPT if accept else AcknowledgeType.RELEASE
        consumer = self.consumer()
        done = failed = 0
        now = time.monotonic()
        started = time.perf_counter()
        for s in seqs:
            held_ms = (now - self._acquired_at.pop(s, now)) * 1000
            if accept and held_ms > 0.5 * self.opts.lock_ms:
                log.warning(
                    "kshare source: batch %d was acknowledged %.0f ms after it was polled, more than half the "
                    "acquisition lock (%d ms); librdkafka fetches ahead, so records can be locked a whole batch "
                    "before they are polled, and may have been redelivered. Raise the group's "
                    "share.record.lock.duration.ms or lower maxRecordsPerTrigger / the trigger interval.",
                    s, held_ms, self.opts.lock_ms)
            with lifecycle.consumer_call():
                applied, missed = _acknowledge_ranges(consumer, self.outstanding.pop(s), ack_type)
            done += applied
            failed += missed
        self.timings["acknowledge"] += time.perf_counter() - started
        started = time.perf_counter()
        try:
            with lifecycle.consumer_call():
                results = consumer.commit_sync(30.0) or {}
        except Exception as exc:
            log.warning("kshare source: flushing acknowledgements failed (%s); unacknowledged records are "
                        "redelivered after their lock expires", exc)
            results = {}
        self.timings["commit"] += time.perf_counter() - started
        bad = {f"{tp.topic}:{tp.partition}": str(err) for tp, err in results.items() if err is not None}
        if bad or failed:
            log.warning("kshare source: %d acknowledgements could not be applied locally, broker errors: %s; "
                        "those records will be redelivered (at-least-once)", failed, bad or "none")
        self.stats["acknowledged" if accept else "released"] += done
        self.stats["ack_failed"] += failed
        return done

    def close(self, *, release: bool = True) -> None:
        """Release what is still acquired (it is redelivered to other members) and leave the group."""
        consumer, self._consumer = self._consumer, None
        if consumer is None:
            return
        try:
            if release and self.outstanding:
                self._consumer = consumer
                self._settle(sorted(self.outstanding), accept=False)
                self._consumer = None
        finally:
            self.outstanding.clear()
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
