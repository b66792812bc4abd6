"""The nemesis' seeded random schedule (tests/e2e/test_nemesis.py, ``make nemesis-schedule``): faults
of every class, one or two at a time (a combination), on targets chosen by ``random.Random(seed)``,
so that a failing schedule is replayed by its seed."""

from __future__ import annotations

import random
import time

from tests.e2e.nemesis_lab import Run


# -- the seeded schedule ----------------------------------------------------------------------------
#: fault classes a schedule chooses from (and how their unserved bound is read: "client" faults cut
#: client links, which clients notice only at their own request timeouts)
KINDS = ("cut-backend", "cut-clients", "split", "slow", "flap", "isolate-broker")


def apply(run: Run, kind: str, rng: random.Random) -> str:
    """Start one fault of ``kind`` on a target chosen by ``rng``; what it did, for the log."""
    s = run.settings
    n = rng.randint(1, s.sidecars)
    if kind == "cut-backend":
        return run.cut_from_backend(n).what
    if kind == "cut-clients":
        return run.cut_from_clients_and_peers(n).what
    if kind == "split":
        side = rng.sample(run.nl.sidecar_hosts, max(1, s.sidecars // 2)) + \
            rng.sample(run.nl.client_hosts, max(1, len(s.clients) // 4))
        return run.split(side).what
    if kind == "slow":
        return run.slow_backend(n, rng.choice((200, 400, 800))).what
    if kind == "flap":
        return run.flap(n, rng.uniform(3, 10), rng.uniform(2, 5), seed=rng.randrange(1 << 30)).what
    if kind == "isolate-broker":
        return run.isolate_broker(rng.randint(1, s.brokers)).what
    raise ValueError(f"unknown fault kind {kind!r} (one of {', '.join(KINDS)})")


def schedule(run: Run, seed: int, minutes: float, log) -> list[tuple[float, str]]:
    """Faults chosen by ``random.Random(seed)`` for ``minutes``: one or two at a time (a
    combination), each 10-40 s, then everything healed and 10-30 s of quiet; returns what was done
    when (seconds from the start). Replay: the same seed on the same settings."""
    rng = random.Random(seed)
    kinds = [k for k in KINDS if k != "isolate-broker" or run.settings.brokers >= 3]
    started, timeline = time.monotonic(), []
    while time.monotonic() - started < minutes * 60:
        chosen = [rng.choice(kinds)]
        if rng.random() < 0.3:
            chosen.append(rng.choice(kinds))
        for kind in chosen:
            what = apply(run, kind, rng)
            timeline.append((round(time.monotonic() - started, 1), what))
            log(f"[nemesis seed={seed}] +{timeline[-1][0]:.0f} s: {what}")
        time.sleep(rng.uniform(10, 40))
        run.heal()
        timeline.append((round(time.monotonic() - started, 1), "heal"))
        log(f"[nemesis seed={seed}] +{timeline[-1][0]:.0f} s: heal")
        time.sleep(rng.uniform(10, 30))
    return timeline
