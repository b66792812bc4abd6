"""A share consumer for the nemesis (tests/e2e/nemesis_lab.py), in its own process on its own lab
host: confluent-kafka's ShareConsumer (``--kind confluent``) or kshare's asyncio ShareConsumer
(``--kind asyncio``), explicit ACCEPT of every record, until SIGTERM.

One JSON line per event in --out, what the checker (kshare_sidecar.testing.nemesis) reads:
``{"ev": "rec", "p", "o", "dc", "t", "lo", "hi"}`` per record delivered — ``t`` is when the poll
that returned it did (wall clock: every lab host shares the machine's clock); ``lo``..``hi``
bound when the sidecar handed it out, later by a network round trip: librdkafka's consumer only
knows it came after its last poll that returned records (``lo``), the asyncio client that it came
between the send of the ShareFetch that acquired it and the arrival of its answer — after a stall (a commit waiting on an unreachable sidecar) records
acquired before it reach the application long after; the asyncio client also says which sidecar
(``"n"``) —
``{"ev": "ack", "p", "o", "dc", "ok", "e", "t"}`` per acknowledgement's outcome (``e``: the error's
Kafka name), ``{"ev": "closed"}``. ``--hold-every K`` never acknowledges records whose key is a
multiple of K (poison: their locks expire until the delivery limit archives them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time


def confluent(args: argparse.Namespace, out) -> None:
    from confluent_kafka import AcknowledgeType, ShareConsumer

    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    conf = {"bootstrap.servers": args.bootstrap, "group.id": args.group, "log_level": 3,
            "share.acknowledgement.mode": "explicit", "max.poll.records": args.max_poll_records}
    if args.debug:  # librdkafka's own log, with its timestamps, on stderr (the worker's log file)
        conf.update({"debug": "cgrp,broker,metadata,protocol", "log_level": 7})
    consumer = ShareConsumer(conf)
    consumer.subscribe([args.topic])
    # the return of the last poll that gave records: what a poll returns was fetched after it (a
    # fetch answer held up by a cut link arrives seconds late; meanwhile the polls return nothing)
    polled = round(time.time(), 3)
    try:
        while not stop:
            msgs = consumer.poll(0.5)
            t = lo = round(time.time(), 3)
            if msgs:
                lo, polled = polled, t
            batch = []
            for m in msgs:
                if m.error() is not None:
                    out.write(json.dumps({"ev": "err", "e": str(m.error()), "t": t}) + "\n")
                    continue
                batch.append(m)
                out.write(json.dumps({"ev": "rec", "p": m.partition(), "o": m.offset(), "dc": m.delivery_count(),
                                      "t": t, "lo": lo}) + "\n")
            if not batch:
                continue
            time.sleep(args.work_ms * len(batch) / 1000)
            # librdkafka's explicit mode refuses the next poll while a record of the last one is
            # unacknowledged: a poison record is released (it comes back at once, its count up)
            poison = [m for m in batch if _held(args, m.key())]
            _drop(out, poison, lambda m: (m.partition(), m.offset(), m.delivery_count()))
            for m in poison:
                consumer.acknowledge(m, AcknowledgeType.RELEASE)
            batch = [m for m in batch if not _held(args, m.key())]
            if not batch:
                continue  # the releases go with the next poll
            for m in batch:
                consumer.acknowledge(m, AcknowledgeType.ACCEPT)
            try:
                results = consumer.commit_sync(30)
                failed = {tp.partition: _confluent_error(exc) for tp, exc in results.items() if exc is not None}
            except Exception as exc:  # noqa: BLE001 - the whole commit failed: every ack's outcome is unknown
                failed = {m.partition(): _confluent_error(exc) for m in batch}
            t = round(time.time(), 3)
            for m in batch:
                out.write(json.dumps({"ev": "ack", "p": m.partition(), "o": m.offset(), "dc": m.delivery_count(),
                                      "ok": m.partition() not in failed, "e": failed.get(m.partition()),
                                      "t": t}) + "\n")
    finally:
        consumer.close()


async def asyncio_kind(args: argparse.Namespace, out) -> None:
    from kshare_sidecar.client import AcknowledgeType, ShareConsumer

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with ShareConsumer(args.topic, bootstrap_servers=args.bootstrap, group_id=args.group,
                             acknowledgement_mode="explicit", max_poll_records=args.max_poll_records) as consumer:
        requests, cluster = consumer._requests, consumer._cluster  # which sidecar handed them out
        arrived = _stamp_arrivals(requests)
        while not stop.is_set():
            got = await consumer.getmany(timeout_ms=500)
            t = round(time.time(), 3)
            batch = []
            for tp, records in got.items():
                inflight = requests.inflight.get((cluster.ids.get(tp.topic), tp.partition))
                node = inflight.node if inflight is not None else None
                tid = cluster.ids.get(tp.topic)
                for r in records:
                    batch.append(r)
                    lo, hi = arrived.pop((tid, r.partition, r.offset), (None, None))
                    out.write(json.dumps({"ev": "rec", "p": r.partition, "o": r.offset, "dc": r.delivery_count,
                                          "t": t, "n": node, "lo": lo, "hi": hi}) + "\n")
            if not batch:
                continue
            await asyncio.sleep(args.work_ms * len(batch) / 1000)
            _drop(out, [r for r in batch if _held(args, r.key)], lambda r: (r.partition, r.offset, r.delivery_count))
            batch = [r for r in batch if not _held(args, r.key)]
            if not batch:
                continue
            for r in batch:
                consumer.acknowledge(r, AcknowledgeType.ACCEPT)
            results = await consumer.commit()
            failed = {tp.partition: _asyncio_error(exc) for tp, exc in results.items() if exc is not None}
            t = round(time.time(), 3)
            for r in batch:
                out.write(json.dumps({"ev": "ack", "p": r.partition, "o": r.offset, "dc": r.delivery_count,
                                      "ok": r.partition not in failed, "e": failed.get(r.partition), "t": t}) + "\n")


def _stamp_arrivals(requests) -> dict[tuple, tuple[float | None, float]]:
    """(topic id, partition, offset) -> (when the ShareFetch that acquired it was sent, when its
    answer was taken in): the sidecar handed it out in between — an answer held up by a cut link
    arrives at TCP's next retransmission, seconds after the sidecar wrote it. The client's own
    hooks wrapped (the worker's instrument, not an API): one ShareFetch per node at a time (the
    fetcher's node lock), answered before its records are taken."""
    arrived: dict[tuple, tuple[float | None, float]] = {}
    sent: dict[int, float] = {}  # node -> the send time of the ShareFetch whose answer is being read
    conn_of, take = requests.conn, requests._take_records

    def conn(node):
        c = conn_of(node)
        if not getattr(c, "nemesis_stamped", False):
            call = c.call

            async def stamped_call(req, *args, **kwargs):
                t = round(time.time(), 3)
                resp = await call(req, *args, **kwargs)
                if _is_share_fetch(req):
                    sent[node] = t
                return resp

            c.call, c.nemesis_stamped = stamped_call, True
        return c

    def stamped(node, tp, part):
        bounds = (sent.get(node), round(time.time(), 3))
        for a in part.acquired_records:
            arrived.update(dict.fromkeys(((tp[0], tp[1], o) for o in range(int(a.first_offset),
                                                                           int(a.last_offset) + 1)), bounds))
        return take(node, tp, part)

    requests.conn, requests._take_records = conn, stamped
    return arrived


def _is_share_fetch(req) -> bool:
    """A kio ShareFetchRequest, or the client's ShareFetch in its wire form (``protocol.WireRequest``,
    whose ``response`` is the kio class its answer is read with): by the API key kio classes carry."""
    from kshare_sidecar.client.protocol import WireRequest
    from kshare_sidecar.protocol.constants import ApiKey

    kio_class = req.response if isinstance(req, WireRequest) else type(req)
    return getattr(kio_class, "__api_key__", None) == ApiKey.SHARE_FETCH


def _held(args: argparse.Namespace, key: bytes | None) -> bool:
    """A poison record (``--hold-every K``: keys divisible by K): never acknowledged, so its lock
    expires and it comes back with its delivery count up, until the group's limit archives it."""
    return bool(args.hold_every) and key is not None and int(key) % args.hold_every == 0


def _drop(out, records: list, fields) -> None:
    """Poison records the application gives up without acknowledging (``"e": "HELD"``): its hold
    ends here as far as the checker is concerned — the client may release them (librdkafka does
    when their partition is revoked), or their lock runs out."""
    t = round(time.time(), 3)
    for r in records:
        p, o, dc = fields(r)
        out.write(json.dumps({"ev": "ack", "p": p, "o": o, "dc": dc, "ok": False, "e": "HELD", "t": t}) + "\n")


def _confluent_error(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", None)
    return name() if callable(name) else type(exc).__name__


def _asyncio_error(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    return getattr(code, "name", "UNKNOWN").upper() if code is not None else "NETWORK_EXCEPTION"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=["confluent", "asyncio"], required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-poll-records", type=int, default=100)
    ap.add_argument("--work-ms", type=float, default=0.5, help="simulated processing per record")
    ap.add_argument("--debug", action="store_true", help="the client's debug log on stderr")
    ap.add_argument("--hold-every", type=int, default=0, help="never acknowledge records whose key is a multiple")
    args = ap.parse_args()
    if args.debug and args.kind == "asyncio":
        import logging
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open(args.out, "a", buffering=1) as out:
        if args.kind == "confluent":
            confluent(args, out)
        else:
            asyncio.run(asyncio_kind(args, out))
        out.write(json.dumps({"ev": "closed", "t": round(time.time(), 3)}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
