"""Ownership as a lease (pure, clock injected): how long a sidecar may go on serving what it owns
without hearing from whoever can give it away.

Why a lease and not a discovery: a sidecar cut off from the backend cannot learn that the
sidecars' group gave its state partitions to others — its next state write would be fenced, but
it may never write again, and meanwhile it hands out records nobody accounts for (measured
before this existed: 50,534 records handed out by a sidecar cut off for good, none committed;
its Metadata still naming itself leader). The group coordinator on the backend drops a member
``session.timeout.ms`` after the last heartbeat it *received*; every heartbeat it received was
*sent* by us earlier, so "the coordinator cannot have dropped us before ``sent + session``" holds
for the send time of every request it answered as a member of the current generation. The
lease runs from the newest such send time for the session timeout less a safety margin
(scheduling delay of the event loop, the handful of milliseconds between reading the clock and
writing the request); past it the sidecar stops serving, before anyone else can have been
given its partitions.

What renews (cluster/membership.py reads the answers): a Heartbeat answered NONE, a JoinGroup or
SyncGroup answered NONE. Not a Heartbeat answered REBALANCE_IN_PROGRESS: the coordinator ends a
rebalance by dropping members that did not rejoin within the rebalance timeout counted from its
start, which may precede such a heartbeat's send time.

A single sidecar (no cluster) has no coordinator: its lease is renewed by the backend answering
its health probe (backend/backend.py), and lapsing only pauses its service (nobody else can own
its share-partitions; a sidecar started on the same state topic fences it, persist/).
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import SidecarConfig

#: no renewal yet: a lease that never started is lapsed
NEVER = float("-inf")


def safety_margin_ms(session_timeout_ms: int, heartbeat_interval_ms: int) -> int:
    """The part of the session timeout not served: a fifth of it, at least two heartbeat intervals
    (a heartbeat that misses by a little must not stop service) — and never more than half."""
    return min(max(session_timeout_ms // 5, 2 * heartbeat_interval_ms), session_timeout_ms // 2)


class Lease:
    """Renewed at send times (seconds on ``clock``), valid until ``newest + duration``."""

    def __init__(self, duration_ms: int, clock: Callable[[], float]) -> None:
        if duration_ms <= 0:
            raise ValueError(f"a lease needs a positive duration, got {duration_ms} ms")
        self.duration_s = duration_ms / 1000
        self.clock = clock
        self.renewed_at = NEVER  # send time of the newest renewal
        self.renewals = 0
        self.lapses = 0
        self._lapsed = True  # until the first renewal

    @property
    def expires_at(self) -> float:
        return self.renewed_at + self.duration_s

    def valid(self, now: float | None = None) -> bool:
        return (self.clock() if now is None else now) < self.expires_at

    def remaining_s(self, now: float | None = None) -> float:
        return self.expires_at - (self.clock() if now is None else now)

    def renew(self, sent_at: float) -> bool:
        """A renewal for a request sent at ``sent_at``; True when it ends a lapse (the holder
        must take back what it gave up). An answer older than the newest renewal changes nothing."""
        if sent_at <= self.renewed_at:
            return False
        self.renewed_at = sent_at
        self.renewals += 1
        if self._lapsed and self.valid():
            self._lapsed = False
            return True
        return False

    def check(self, now: float | None = None) -> bool:
        """True exactly once per lapse: the first check after the lease ran out (the holder stops
        serving then)."""
        if self._lapsed or self.valid(now):
            return False
        self._lapsed = True
        self.lapses += 1
        return True

    @property
    def lapsed(self) -> bool:
        return self._lapsed or not self.valid()


def single_lease(cfg: SidecarConfig) -> Lease:
    """A single sidecar serves while its backend answered within cluster.session.timeout.ms less
    the safety margin (docs/deployment.md, "The lease"); renewed by the backend's health probe."""
    cl = cfg.cluster
    lease = Lease(cl.session_timeout_ms - safety_margin_ms(cl.session_timeout_ms, cl.heartbeat_interval_ms),
                  _time.monotonic)
    lease.renew(_time.monotonic())  # the backend just answered: it was started
    return lease
