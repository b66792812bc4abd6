"""Share-partition engine throughput (pure engine, no I/O).

(a) batch path: 10M records read as 500-record log batches, acquired by 8 simulated members in
    turn (window capped at max_record_locks=2000, Kafka's default) and accepted with one
    two-phase ack each (prepare, then commit; the snapshot is taken only with --with-snapshot).
(b) random single-offset acks: a 2,000-record window kept full; acks arrive in random order,
    mostly ACCEPT, some RELEASE and REJECT; released records are re-acquired on refill. Each ack
    is its own two-phase request (prepare + commit). Only engine calls are timed.
(c) key-ordered window: a share-partition with share.key.ordering, 2,000 records in flight in
    5-record log batches, keys ``offset % 100``, acquired 5 at a time by 16 members (most of the
    window waits behind its key, in holds); timed: the state one member's 5-record acknowledgement
    would leave (``persisted``), which every acknowledgement of an ordered group computes.

Timing uses process CPU time (time.process_time), so other load on a shared machine does not
distort the figures. Prints human-readable lines, then one JSON object as the LAST line.
Usage: python benchmarks/engine.py [--quick] [--with-snapshot] [--profile]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kshare_sidecar.share.engine import ShareConfig, SharePartition  # noqa: E402
from kshare_sidecar.states import ACCEPT, REJECT, RELEASE  # noqa: E402


def bench_batch(total: int, batch: int = 500, members: int = 8, with_snapshot: bool = False) -> float:
    now = [0]
    sp = SharePartition(ShareConfig(), lambda: now[0])
    names = [f"member-{i}" for i in range(members)]
    held: list[tuple[str, int, int]] = []
    rng = random.Random(1)
    accept = [ACCEPT]
    start = time.process_time()
    done = 0
    while done < total:
        for name in names:
            off = sp.next_fetch_offset()
            if off is None:
                break
            base = off - off % batch
            for p in sp.acquire(name, [(base, base + batch - 1, -1, False, False)], batch, batch):
                held.append((name, p[0], p[1]))
        rng.shuffle(held)  # members finish in any order
        for name, first, last in held:
            plan = sp.prepare_acknowledge(name, [(first, last, accept)])
            if with_snapshot:
                _ = plan.state
            sp.commit(plan)
            done += last - first + 1
        held.clear()
        now[0] += 1
    elapsed = time.process_time() - start
    assert sp.spso == done and sp.in_flight == 0, (sp.spso, done)
    return done / elapsed


def bench_random_acks(total_acks: int, window: int = 2000, seed: int = 7) -> tuple[float, int]:
    """Only engine calls are timed (refill acquisitions and the acks); shuffling is harness work."""
    now = [0]
    sp = SharePartition(ShareConfig(max_record_locks=window), lambda: now[0])
    rng = random.Random(seed)
    pending: list[int] = []  # offsets acquired, not yet acknowledged
    batch = 100
    log_batch = 100
    acks = 0
    # ~90% accept, 6% release, 4% reject
    kinds = rng.choices([[ACCEPT], [RELEASE], [REJECT]], weights=[90, 6, 4], k=total_acks + window)
    engine_time = 0.0
    perf = time.process_time
    prepare = sp.prepare_acknowledge
    commit = sp.commit
    while acks < total_acks:
        t0 = perf()
        # refill: acquire everything acquirable (re-available records first, then new ones)
        acquired = []
        while True:
            off = sp.next_fetch_offset()
            if off is None:
                break
            base = off - off % log_batch
            log = [(base, base + log_batch - 1, -1, False, False)]
            got = sp.acquire("m", log, batch, batch, fetch_offset=off)
            if not got:
                break
            acquired.extend(got)
        engine_time += perf() - t0
        for first, last, _ in acquired:
            pending.extend(range(first, last + 1))
        rng.shuffle(pending)
        half = len(pending) // 2 or len(pending)
        todo = [(off, off, kinds[acks + i]) for i, off in enumerate(pending[:half])]
        del pending[:half]
        t0 = perf()
        # acknowledge one offset per request, in random order
        for b in todo:
            commit(prepare("m", [b]))
        engine_time += perf() - t0
        acks += len(todo)
        now[0] += 1
    return acks / engine_time, sp.spso


def bench_key_ordered_state(calls: int, keys: int = 100, members: int = 16) -> tuple[float, int]:
    """Microseconds per ``persisted()`` call, and the ranges in the window it walks."""
    from kshare_sidecar.share.engine.config import Extensions
    from kshare_sidecar.share.engine.extended import ExtendedSharePartition

    now = [0]
    sp = ExtendedSharePartition(ShareConfig(record_lock_duration_ms=30_000, max_record_locks=2000), lambda: now[0],
                                ext=Extensions(key_ordering=True), wall=lambda: 1_700_000_000_000 + now[0],
                                start_offset=0)
    log = [(base, base + 4, -1, False, False) for base in range(0, 2000, 5)]
    key_of = (lambda o: b"k%d" % (o % keys))
    names = [f"member-{i}" for i in range(members)]
    delivered: list[tuple[str, int, int]] = []
    while (off := sp.next_fetch_offset()) is not None and sp.can_acquire():
        name = names[len(delivered) % members]
        got = sp.order_by_key(name, sp.acquire(name, [b for b in log if b[1] >= off], 5, fetch_offset=off), key_of)
        delivered += [(name, a.first_offset, a.last_offset) for a in got]
        if not got and sp.next_fetch_offset() == off:
            break
    name, first, last = delivered[len(delivered) // 2]
    runs = [(first, last, ACCEPT)]
    start = time.process_time()
    for _ in range(calls):
        sp.persisted(name, runs)
    return (time.process_time() - start) / calls * 1e6, sum(1 for _ in sp.ranges())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1M records / 50k acks instead of 10M / 300k")
    ap.add_argument("--with-snapshot", action="store_true", help="materialise plan.state on every ack in (a)")
    ap.add_argument("--profile", action="store_true", help="cProfile both runs and print the top entries")
    args = ap.parse_args()
    total = 1_000_000 if args.quick else 10_000_000
    total_acks = 50_000 if args.quick else 300_000
    gc.collect()

    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        bench_batch(total // 10, with_snapshot=args.with_snapshot)
        bench_random_acks(total_acks // 10)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)

    a = bench_batch(total, with_snapshot=args.with_snapshot)
    print(f"(a) batch acquire+accept: {total:,} records, {a:,.0f} records/s", flush=True)
    b, spso = bench_random_acks(total_acks)
    print(f"(b) random single-offset acks: {total_acks:,} acks, {b:,.0f} acks/s (SPSO {spso:,})", flush=True)
    c, ranges = bench_key_ordered_state(2_000 if args.quick else 10_000)
    print(f"(c) key-ordered window: {c:,.0f} us per acknowledgement's state ({ranges} ranges in the window)", flush=True)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "batch_acquire_accept_records_per_s": round(a),
                "random_acks_per_s": round(b),
                "key_ordered_state_us_per_ack": round(c),
                "key_ordered_window_ranges": ranges,
                "peak_rss_mb": round(rss_mb, 1),
                "records": total,
                "acks": total_acks,
                "with_snapshot": args.with_snapshot,
            }
        )
    )


if __name__ == "__main__":
    main()
