"""A confluent-kafka ShareConsumer process for the extension scenarios (docs/extensions.md).

Explicit acknowledgement, decided by the record's value: ``rej-...`` is REJECTed, ``rel-...`` is
RELEASEd (every time, so it reaches the delivery count limit), ``relonce-...`` is RELEASEd on its
first delivery and accepted after, anything else is ACCEPTed. Optional simulated work, uniform
in [0, --work-ms-max] per record. One JSON line per event to --out (wall-clock ``t``):
{"ev": "rec", p, o, dc, k, v, t} on receipt, {"ev": "ack", p, o, dc, k, type, t, ok} where ``t``
is taken just before the acknowledgement is sent (commit_sync) — an acknowledgement cannot reach
the sidecar before it. Stops after --idle-s without records, after --max-s, or on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import time

from confluent_kafka import AcknowledgeType, ShareConsumer

TYPES = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE, "reject": AcknowledgeType.REJECT}


def decide(value: str, delivery_count: int) -> str:
    if value.startswith("rej-"):
        return "reject"
    if value.startswith("rel-"):
        return "release"
    if value.startswith("relonce-") and delivery_count == 1:
        return "release"
    return "accept"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--idle-s", type=float, default=8.0)
    ap.add_argument("--grace-s", type=float, default=30.0)
    ap.add_argument("--max-s", type=float, default=180.0)
    ap.add_argument("--max-poll-records", type=int, default=100)
    ap.add_argument("--work-ms-max", type=float, default=0.0)
    args = ap.parse_args()

    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = ShareConsumer({"bootstrap.servers": args.bootstrap, "group.id": args.group, "log_level": 3,
                              "share.acknowledgement.mode": "explicit",
                              "max.poll.records": args.max_poll_records})
    consumer.subscribe([args.topic])
    out = open(args.out, "a", buffering=1)
    started = time.monotonic()
    last = started + args.grace_s
    rng = random.Random()
    try:
        while not stop and time.monotonic() - started < args.max_s:
            msgs = consumer.poll(0.5)
            batch = []
            for m in msgs:
                if m.error() is not None:
                    out.write(json.dumps({"ev": "err", "e": str(m.error())}) + "\n")
                    continue
                key = m.key().decode() if m.key() is not None else None
                value = m.value().decode()
                batch.append((m, key, value))
                out.write(json.dumps({"ev": "rec", "p": m.partition(), "o": m.offset(), "dc": m.delivery_count(),
                                      "k": key, "v": value, "t": time.time()}) + "\n")
            if not batch:
                if time.monotonic() - last > args.idle_s:
                    break
                continue
            last = time.monotonic()
            for m, key, value in batch:
                if args.work_ms_max:
                    time.sleep(rng.uniform(0, args.work_ms_max) / 1000)
                consumer.acknowledge(m, TYPES[decide(value, m.delivery_count())])
            sent = time.time()
            results = consumer.commit_sync(30)
            failed = {tp.partition for tp, exc in results.items() if exc is not None}
            for m, key, value in batch:
                out.write(json.dumps({"ev": "ack", "p": m.partition(), "o": m.offset(), "dc": m.delivery_count(),
                                      "k": key, "type": decide(value, m.delivery_count()), "t": sent,
                                      "ok": m.partition() not in failed}) + "\n")
    finally:
        consumer.close()
        out.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
