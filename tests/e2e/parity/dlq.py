"""Dead-letter queues in the differential sequences (KIP-1191, Kafka 4.4's and kshare's).

Each session seeds two dead-letter topics on both targets (through the sidecar for kshare, which
keeps the topic opt-in a 3.9 backend cannot hold): ``parity-dlq`` (2 partitions, opted in) and
``parity-dlq-off`` (no opt-in). A sequence may start by pointing its group at one of them, at a
topic that does not exist, at a name without the ``dlq.`` prefix or at a refused ``__`` name, with
or without copy.record.enable and with a delivery count limit of 2 or 3; its rejects and
releases then dead-letter records. ``ReadDeadLetters`` compares what each side's dead-letter
topics hold for the sequence's group, field by field (partition, key, value, headers).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .model import Side

DLQ_ON, DLQ_OFF, DLQ_MISSING = "dlq.parity-on", "dlq.parity-off", "dlq.parity-missing"
DLQ_TOPICS = {DLQ_ON: 2, DLQ_OFF: 1}
ENABLE = "errors.deadletterqueue.group.enable"
#: Group configs a sequence may start with (the names: opted in, not opted in, missing, no prefix, refused).
NAMES = (DLQ_ON, DLQ_ON, DLQ_OFF, DLQ_MISSING, "parity-noprefix", "__parity")


def seed_dead_letter_topics(bootstrap: str) -> None:
    """Create the dead-letter topics through ``bootstrap`` (idempotent)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(t, n, 1, config={ENABLE: "true"} if t == DLQ_ON else {})
           for t, n in DLQ_TOPICS.items() if t not in existing]
    for future in (admin.create_topics(new).values() if new else ()):
        future.result(60)


def _read(bootstrap: str, topic: str, group: str) -> list[tuple]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{group}-reader", "enable.auto.commit": False})
    out = []
    try:
        for p in range(DLQ_TOPICS[topic]):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            got, deadline = 0, time.monotonic() + 20
            while got < high - low and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is None or m.error() is not None:
                    continue
                got += 1
                headers = tuple(m.headers() or ())
                if (b"__dlq.errors.group", group.encode()) in ((k.encode(), v) for k, v in headers):
                    out.append((m.partition(), m.key(), m.value(), headers))
    finally:
        consumer.close()
    return sorted(out)


@dataclass(frozen=True)
class ReadDeadLetters:
    """What both dead-letter topics hold for this group, once it stopped growing (writes are
    asynchronous on both: Kafka's after its ARCHIVING state write, kshare's after its hold)."""

    def run(self, side: Side) -> Any:
        seen: dict[str, list] = {}
        stable_since, deadline = time.monotonic(), time.monotonic() + 12
        while True:
            now = {t: _read(side.bootstrap, t, side.group) for t in DLQ_TOPICS}
            if now != seen:
                seen, stable_since = now, time.monotonic()
            elif time.monotonic() - stable_since >= 2.0 or time.monotonic() > deadline:
                return {"dead_letters": {t: [(p, k, v, h) for p, k, v, h in recs] for t, recs in seen.items()}}
            time.sleep(0.5)
