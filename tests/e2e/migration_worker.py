"""A share consumer for the migration tests: confluent-kafka's ShareConsumer, unmodified.

``--mode hold``: polls until it holds records, then stops polling (its records stay acquired) until
SIGTERM, and closes without acknowledging them — they are released, as a consumer that stops in
the middle of a batch leaves them. ``--mode work``: acknowledges every record it gets explicitly —
ACCEPT, or REJECT for offsets that are multiples of ``--reject-every`` — and stops after ``--max``
records, after ``--idle-s`` without one, or on SIGTERM. One JSON line per record and per outcome
to ``--out``: {"ev": "rec", p, o, dc} (received), {"ev": "ack", p, o, t: "accept"|"reject", ok}.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from confluent_kafka import AcknowledgeType, ShareConsumer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=["hold", "work"], required=True)
    ap.add_argument("--max", type=int, default=0, help="work: stop after this many records (0: no limit)")
    ap.add_argument("--reject-every", type=int, default=0)
    ap.add_argument("--idle-s", type=float, default=6.0)
    ap.add_argument("--grace-s", type=float, default=30.0)
    ap.add_argument("--max-poll-records", type=int, default=100)
    ap.add_argument("--work-ms", type=float, default=0.0, help="work: time spent on each record")
    args = ap.parse_args()
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = ShareConsumer({"bootstrap.servers": args.bootstrap, "group.id": args.group, "log_level": 3,
                              "share.acknowledgement.mode": "implicit" if args.mode == "hold" else "explicit",
                              "max.poll.records": args.max_poll_records})
    consumer.subscribe([args.topic])
    out = open(args.out, "a", buffering=1)

    def emit(**event: object) -> None:
        out.write(json.dumps(event) + "\n")

    started = time.monotonic()
    last = started + args.grace_s
    seen = 0
    try:
        while not stop and (not args.max or seen < args.max):
            msgs = [m for m in consumer.poll(0.5) if m.error() is None]
            for m in msgs:
                emit(ev="rec", p=m.partition(), o=m.offset(), dc=m.delivery_count())
                if args.work_ms and args.mode == "work":
                    time.sleep(args.work_ms / 1000)
            if args.mode == "hold":
                if msgs:
                    emit(ev="holding", n=len(msgs))
                    while not stop:  # no poll: the records stay acquired until close releases them
                        time.sleep(0.1)
                continue
            if msgs:
                seen += len(msgs)
                last = time.monotonic()
                kinds = {}
                for m in msgs:
                    reject = args.reject_every and m.offset() % args.reject_every == 0
                    kinds[(m.partition(), m.offset())] = "reject" if reject else "accept"
                    consumer.acknowledge(m, AcknowledgeType.REJECT if reject else AcknowledgeType.ACCEPT)
                results = consumer.commit_sync(30)
                failed = {tp.partition for tp, exc in results.items() if exc is not None}
                for (p, o), kind in kinds.items():
                    emit(ev="ack", p=p, o=o, t=kind, ok=p not in failed)
            elif time.monotonic() - last > args.idle_s:
                break
    finally:
        consumer.close()
        emit(ev="closed")
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
