"""Lab-side tools of the nemesis (tests/e2e/nemesis_lab.py), run on a lab host:

* ``produce`` — create the topic, produce a backlog, then a steady rate until SIGTERM, straight to
  the backend; one ``"partition offset"`` line per record the backend confirmed;
* ``state-topic`` — the run's state topic, compacted but never compacted *during* the run (the
  checker reads its whole history);
* ``dump`` — the state topic, every record with its partition, offset and timestamp (JSON lines),
  then one ``{"ends": ..., "starts": ...}`` line: the topic's end and start offsets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time


def produce(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    futures = admin.create_topics([NewTopic(args.topic, args.partitions, args.replication)])
    futures[args.topic].result(60)
    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    out = open(args.out, "a", buffering=1)

    def delivered(err, msg):
        if err is None:
            out.write(f"{msg.partition()} {msg.offset()}\n")
        else:
            print(f"delivery failed: {err}", file=sys.stderr, flush=True)

    producer = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": 20, "acks": "all",
                         "enable.idempotence": True})
    sent = 0

    def send(n: int) -> None:
        nonlocal sent
        for _ in range(n):
            while True:
                try:
                    producer.produce(args.topic, value=b"x" * 100, key=str(sent).encode(),
                                     partition=sent % args.partitions, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            sent += 1

    send(args.backlog)
    producer.flush(60)
    print(f"backlog of {args.backlog} produced", flush=True)
    started = time.monotonic()
    while not stop:
        due = int((time.monotonic() - started) * args.rate) + args.backlog - sent
        if due > 0:
            send(due)
        producer.poll(0.05)
    left = producer.flush(120)
    out.close()
    print(f"produced {sent} records, {left} unconfirmed", flush=True)
    return 0 if left == 0 else 1


async def _dump(args: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP
    consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, enable_auto_commit=False,
                                isolation_level="read_committed", auto_offset_reset="earliest")
    await consumer.start()
    out = open(args.out, "w")
    try:
        tps = [TopicPartition(args.state_topic, p) for p in range(args.state_partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        left = {tp for tp in tps if ends[tp] > 0}
        deadline = time.monotonic() + 120
        while left and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000, max_records=5000)
            for tp, messages in batches.items():
                for m in messages:
                    out.write(json.dumps({"p": m.partition, "o": m.offset, "ts": m.timestamp / 1000,
                                          "k": m.key.decode() if m.key else None,
                                          "v": m.value.decode() if m.value is not None else None}) + "\n")
            left = {tp for tp in left if await consumer.position(tp) < ends[tp]}
    finally:
        await consumer.stop()
    c = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "nemesis-dump"})
    try:
        watermarks = {p: c.get_watermark_offsets(CTP(args.topic, p), timeout=30) for p in range(args.partitions)}
    finally:
        c.close()
    out.write(json.dumps({"ends": {p: w[1] for p, w in watermarks.items()},
                          "starts": {p: w[0] for p, w in watermarks.items()}}) + "\n")
    out.close()


def state_topic(args: argparse.Namespace) -> int:
    """The run's state topic, made before the sidecars start: compacted (as kshare requires) but
    with segments that never roll during a run. The checker reads every owner record and snapshot
    from it afterwards; kshare's own settings (10-minute segments) let the log cleaner remove
    superseded ones in a long run, and the history would then show tenures missing (deliveries
    "outside any tenure", owner changes unseen)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    configs = {"cleanup.policy": "compact", "segment.ms": str(7 * 24 * 3600 * 1000),
               "segment.bytes": str(1 << 30), "min.cleanable.dirty.ratio": "0.99"}
    futures = admin.create_topics([NewTopic(args.topic, args.partitions, args.replication, config=configs)])
    futures[args.topic].result(60)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--replication", type=int, default=1)
    p.add_argument("--backlog", type=int, default=0)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--out", required=True)
    st = sub.add_parser("state-topic")
    st.add_argument("--bootstrap", required=True)
    st.add_argument("--topic", required=True)
    st.add_argument("--partitions", type=int, required=True)
    st.add_argument("--replication", type=int, default=1)
    d = sub.add_parser("dump")
    d.add_argument("--bootstrap", required=True)
    d.add_argument("--state-topic", required=True)
    d.add_argument("--state-partitions", type=int, required=True)
    d.add_argument("--topic", required=True)
    d.add_argument("--partitions", type=int, required=True)
    d.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.cmd == "produce":
        return produce(args)
    if args.cmd == "state-topic":
        return state_topic(args)
    asyncio.run(_dump(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
