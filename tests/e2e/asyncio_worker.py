"""A share consumer in its own process, for e2e tests: kshare's asyncio ShareConsumer.

The asyncio counterpart of share_worker.py (same arguments, same JSON lines), so the fault
scenarios that need a real process — SIGKILL with records held — run with this client too:
{"ev": "rec", p, o, dc, v} per record received, {"ev": "ack", p, o, ok} per explicit
acknowledgement's outcome, {"ev": "closed"} after a clean close. Stops after --idle-s without
records (or --grace-s at start-up), after --max-s, or on SIGTERM (closing cleanly).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time

from kshare_sidecar.client import AcknowledgeType, ShareConsumer


async def run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    out = open(args.out, "a", buffering=1)
    started = time.monotonic()
    last = started + args.grace_s
    async with ShareConsumer(args.topic, bootstrap_servers=args.bootstrap, group_id=args.group,
                             acknowledgement_mode=args.mode, max_poll_records=args.max_poll_records) as consumer:
        while not stop.is_set() and time.monotonic() - started < args.max_s:
            batch = [r for recs in (await consumer.getmany(timeout_ms=500)).values() for r in recs]
            for r in batch:
                out.write(json.dumps({"ev": "rec", "p": r.partition, "o": r.offset, "dc": r.delivery_count,
                                      "v": r.value.decode(), "t": round(time.time(), 3)}) + "\n")
                if args.work_ms:
                    await asyncio.sleep(args.work_ms / 1000)
            if batch:
                last = time.monotonic()
                if args.mode == "explicit" and args.ack == "accept":
                    for r in batch:
                        consumer.acknowledge(r, AcknowledgeType.ACCEPT)
                    results = await consumer.commit()
                    failed = {tp.partition for tp, exc in results.items() if exc is not None}
                    for r in batch:
                        out.write(json.dumps({"ev": "ack", "p": r.partition, "o": r.offset, "dc": r.delivery_count,
                                              "ok": r.partition not in failed, "t": round(time.time(), 3)}) + "\n")
            elif time.monotonic() - last > args.idle_s:
                break
    out.write(json.dumps({"ev": "closed"}) + "\n")
    out.close()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=["implicit", "explicit"], default="implicit")
    ap.add_argument("--ack", choices=["accept", "none"], default="accept", help="explicit mode: accept or hold")
    ap.add_argument("--idle-s", type=float, default=5.0)
    ap.add_argument("--grace-s", type=float, default=20.0)
    ap.add_argument("--max-s", type=float, default=120.0)
    ap.add_argument("--max-poll-records", type=int, default=500)
    ap.add_argument("--work-ms", type=float, default=0.0, help="simulated processing per record")
    return asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
