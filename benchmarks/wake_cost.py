"""What a blocking wake-up costs a Python process on this host, and what it does to the work after it.

A sidecar that serves one consumer waits in epoll between the steps of each ShareFetch (the
request, the state write's answer, the backend's read) and is woken for each; a sidecar serving
several consumers finds work waiting more often. Where a wake-up is cheap that difference is
small; on a virtual machine it need not be. This measures it without Kafka: a fixed piece of
Python work (building a dict of tuples, about what a small request's handling allocates) run
back to back, and run after blocking in ``epoll`` for a given idle time, and the blocking alone
without work. User and system CPU of this process (``getrusage``) per round.

Prints one line per case, then the JSON summary as the LAST line.
Usage: python benchmarks/wake_cost.py [--rounds 2000] [--idle-ms 0.5,2] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select


def _work(n: int = 300) -> int:
    d = {}
    for i in range(n):
        d[i] = (i, str(i), [i] * 3)
    return sum(len(v[1]) for v in d.values())


def _case(idle_s: float, work: bool, rounds: int) -> tuple[float, float]:
    """User and system CPU µs per round: an idle wait of ``idle_s`` (none: 0), then the work."""
    r, w = os.pipe()  # never written: epoll returns at its timeout, as a loop woken by a timer
    ep = select.epoll()
    ep.register(r, select.EPOLLIN)
    try:
        before = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(rounds):
            if idle_s:
                ep.poll(idle_s)
            if work:
                _work()
        after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        ep.close()
        os.close(r)
        os.close(w)
    return ((after.ru_utime - before.ru_utime) / rounds * 1e6, (after.ru_stime - before.ru_stime) / rounds * 1e6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--idle-ms", default="0.5,2", help="idle waits before the work, comma-separated")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    idles = [0.0] + [float(x) / 1000 for x in args.idle_ms.split(",") if x]
    cases: list[dict] = []
    for _ in range(args.repeat):
        for idle in idles:
            for work in (True, False) if idle else (True,):
                user, system = _case(idle, work, args.rounds)
                cases.append({"idle_ms": idle * 1000, "work": work, "user_us": round(user, 1),
                              "system_us": round(system, 1)})
                print(f"idle {idle * 1000:4.1f} ms {'then the work' if work else 'alone        '}: "
                      f"user {user:6.1f} µs  system {system:5.1f} µs per round", flush=True)

    def mean(idle: float, work: bool) -> float:
        xs = [c["user_us"] + c["system_us"] for c in cases if c["idle_ms"] == idle * 1000 and c["work"] is work]
        return sum(xs) / len(xs)

    hot = mean(0.0, True)
    summary = {"scenario": "wake_cost", "rounds": args.rounds, "work_back_to_back_us": round(hot, 1), "idle": {}}
    for idle in idles[1:]:
        alone, after = mean(idle, False), mean(idle, True)
        # what the wake-up itself costs, and how much dearer the same work is right after it
        summary["idle"][f"{idle * 1000:g}ms"] = {
            "wake_us": round(alone, 1), "work_after_wake_us": round(after - alone, 1),
            "work_slowdown": round((after - alone) / hot, 2) if hot else None}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
