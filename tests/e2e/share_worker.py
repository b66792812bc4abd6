"""A share consumer in its own process, for e2e tests: confluent-kafka's ShareConsumer, unmodified.

Writes one JSON line per event to --out: {"ev": "rec", p, o, dc, v} for each record received and
{"ev": "ack", p, o, ok} for each explicit acknowledgement's outcome (both with "t", the wall-clock time). Stops after --idle-s without
records (counted from its last record, or from the end of a --grace-s start-up period if it got
none), after --max-s, or on SIGTERM (closing the consumer cleanly).

``--debug <librdkafka debug contexts>`` (or ``KSHARE_WORKER_DEBUG``; e.g. ``cgrp,protocol,broker,metadata``):
librdkafka's debug log, with its own timestamps, goes to ``<out>.rdkafka.log`` (to find where a
client spends its time after a fault, or what it sent; stderr is a pipe the test reads only at the end).
"""

from __future__ import annotations

import argparse
import json
import os
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
    ap.add_argument("--mode", choices=["implicit", "explicit"], default="implicit")
    ap.add_argument("--ack", choices=["accept", "none"], default="accept", help="explicit mode: accept or hold")
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--grace-s", type=float, default=20.0,
                    help="start-up time before idleness counts for a worker that has received nothing")
    ap.add_argument("--max-s", type=float, default=120.0)
    ap.add_argument("--max-poll-records", type=int, default=500)
    ap.add_argument("--work-ms", type=float, default=0.0, help="simulated processing per record")
    ap.add_argument("--debug", default=os.environ.get("KSHARE_WORKER_DEBUG", ""),
                    help="librdkafka debug contexts, logged to <out>.rdkafka.log")
    args = ap.parse_args()

    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group, "log_level": 3,
            "share.acknowledgement.mode": args.mode, "max.poll.records": args.max_poll_records}
    debug = args.debug
    if debug:
        log = open(args.out + ".rdkafka.log", "a", buffering=1)
        os.dup2(log.fileno(), 2)  # librdkafka's own logger writes to stderr, with timestamps
        conf.update({"debug": debug, "log_level": 7})
    consumer = ShareConsumer(conf)
    consumer.subscribe([args.topic])
    out = open(args.out, "a", buffering=1)
    started = time.monotonic()
    last = started + args.grace_s  # a worker that joins after the queue drained still stops
    seen = 0
    try:
        while not stop and time.monotonic() - started < args.max_s:
            msgs = consumer.poll(0.5)
            batch = []
            for m in msgs:
                if m.error() is not None:
                    out.write(json.dumps({"ev": "err", "e": str(m.error())}) + "\n")
                    continue
                batch.append(m)
                out.write(json.dumps({"ev": "rec", "p": m.partition(), "o": m.offset(), "dc": m.delivery_count(),
                                      "v": m.value().decode(), "t": round(time.time(), 3)}) + "\n")
                if args.work_ms:
                    time.sleep(args.work_ms / 1000)
            if batch:
                seen += len(batch)
                last = time.monotonic()
                if args.mode == "explicit" and args.ack == "accept":
                    for m in batch:
                        consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                    results = consumer.commit_sync(30)
                    failed = {(tp.partition) for tp, exc in results.items() if exc is not None}
                    for m in batch:
                        out.write(json.dumps({"ev": "ack", "p": m.partition(), "o": m.offset(),
                                              "dc": m.delivery_count(),
                                              "ok": m.partition() not in failed, "t": round(time.time(), 3)}) + "\n")
            elif time.monotonic() - last > args.idle_s:
                break
    finally:
        if args.mode == "implicit":
            consumer.commit_sync(30)  # librdkafka does not accept the last poll's records on close
        consumer.close()
        out.write(json.dumps({"ev": "closed"}) + "\n")
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
