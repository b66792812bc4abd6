"""The driver's share consumer: acquire ranges, acknowledge them later, release on stop.

One long-lived confluent-kafka ``ShareConsumer`` in explicit-acknowledgement mode lives in
Spark's driver-side Python streaming-source process. Payloads arrive (librdkafka has no
offsets-only fetch) but are dropped at once: only ``(topic, partition, offset,
deliveryCount)`` is kept, compressed into ranges. Acknowledgements go by offset
(``acknowledge_offset``) and are flushed with ``commit_sync`` so failures are visible.

librdkafka refuses a second ``poll`` while records of the previous one are unacknowledged,
so each micro-batch is exactly one poll: the batch is planned only after everything before
it was acknowledged (which Spark guarantees, see ``source.py``).
"""

from __future__ import annotations

import logging
import time
import uuid

from . import ranges as R
from .options import SourceOptions

log = logging.getLogger("kshare.spark")


class Acquirer:
    def __init__(self, opts: SourceOptions, sid: str | None = None) -> None:
        self.opts = opts
        self.sid = sid or uuid.uuid4().hex[:12]
        self._consumer = None
        #: seq -> ranges acquired in this session and not yet acknowledged or released.
        self.outstanding: dict[int, dict[str, list[R.Range]]] = {}
        self._acquired_at: dict[int, float] = {}
        self.stats = {"acquired": 0, "acknowledged": 0, "ack_failed": 0, "released": 0, "polls": 0}

    # -- client ------------------------------------------------------------------------
    def consumer(self):
        if self._consumer is None:
            from confluent_kafka import ShareConsumer

            consumer = ShareConsumer(self.opts.share_consumer_config())
            consumer.subscribe(list(self.opts.topics))
            self._consumer = consumer
        return self._consumer

    # -- acquisition -------------------------------------------------------------------
    def acquire(self, seq: int, timeout_s: float) -> dict[str, list[R.Range]]:
        """One poll; returns (and remembers under ``seq``) the acquired ranges, maybe empty."""
        if self.outstanding:
            raise RuntimeError(f"kshare source: cannot acquire batch {seq} while batches "
                               f"{sorted(self.outstanding)} are unacknowledged")
        from confluent_kafka import KafkaError, KafkaException

        consumer = self.consumer()
        msgs = consumer.poll(timeout_s)
        self.stats["polls"] += 1
        got: list[tuple[str, int, int, int]] = []
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.fatal():
                    raise KafkaException(err)
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("kshare source: share consumer reported %s", err)
                continue
            got.append((msg.topic(), msg.partition(), msg.offset(), msg.delivery_count() or 1))
        del msgs  # payloads are not needed on the driver
        out = R.compress(got)
        if out:
            self.outstanding[seq] = out
            self._acquired_at[seq] = time.monotonic()
            self.stats["acquired"] += len(got)
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
        for s in seqs:
            held_ms = (now - self._acquired_at.pop(s, now)) * 1000
            if accept and held_ms > 0.5 * self.opts.lock_ms:
                log.warning(
                    "kshare source: batch %d was acknowledged %.0f ms after it was polled, more than half the "
                    "acquisition lock (%d ms); librdkafka fetches ahead, so records can be locked a whole batch "
                    "before they are polled, and may have been redelivered. Raise the group's "
                    "share.record.lock.duration.ms or lower maxRecordsPerTrigger / the trigger interval.",
                    s, held_ms, self.opts.lock_ms)
            for topic, partition, offset in R.offsets(self.outstanding.pop(s)):
                try:
                    consumer.acknowledge_offset(topic, partition, offset, ack_type)
                    done += 1
                except Exception:  # not in flight any more (lock lapsed, session reset): redelivered
                    failed += 1
        try:
            results = consumer.commit_sync(30.0) or {}
        except Exception as exc:
            log.warning("kshare source: flushing acknowledgements failed (%s); unacknowledged records are "
                        "redelivered after their lock expires", exc)
            results = {}
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
                consumer.close()
            except Exception as exc:  # already closed / broker gone
                log.debug("kshare source: closing the share consumer: %s", exc)
