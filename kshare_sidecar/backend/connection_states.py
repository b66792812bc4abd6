"""How long the sidecar waits for a connection to a backend broker to be set up: Kafka's
``socket.connection.setup.timeout.ms`` schedule (KIP-601), as its ``ClusterConnectionStates`` keeps it.

Why: a connect whose SYNs are lost (a partition, a broker host gone) is otherwise bounded only by
the request timeout (30 s), while TCP retransmits the SYN at 1, 3, 7, 15 s...: after the partition
heals the sidecar would stay blind for up to that long, its lease lapsing meanwhile. Kafka's clients
give up on a connect after ``socket.connection.setup.timeout.ms`` (10 s) and try again; each
consecutive failure to the same broker doubles the next attempt's timeout, up to
``socket.connection.setup.timeout.max.ms`` (30 s), with ±20 % jitter so that many clients do not
reconnect in step; a connection set up resets it.

Pure: no I/O, no clock. ``uniform`` is the random source (tests pass a fixed one). One instance is
shared by every connection the sidecar opens to the backend (backend/clients.py), keyed by the
broker's address: connections to the same broker learn from each other's failures.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

#: Kafka's ClusterConnectionStates constants for the setup timeout
CONNECTION_SETUP_TIMEOUT_EXP_BASE = 2
CONNECTION_SETUP_TIMEOUT_JITTER = 0.2

#: Kafka's defaults of socket.connection.setup.timeout.ms and socket.connection.setup.timeout.max.ms
DEFAULT_SETUP_TIMEOUT_MS = 10_000
DEFAULT_SETUP_TIMEOUT_MAX_MS = 30_000

Uniform = Callable[[float, float], float]


class ExponentialBackoff:
    """Kafka's ``ExponentialBackoff``: ``initial * multiplier ** attempts`` times a random factor in
    ``[1 - jitter, 1 + jitter)``, never above ``max_ms``. The exponent stops growing once the
    un-jittered term reaches ``max_ms``; a ``max_ms`` below ``initial_ms`` gives ``max_ms`` always."""

    def __init__(self, initial_ms: int, multiplier: int, max_ms: int, jitter: float, *,
                 uniform: Uniform = random.uniform) -> None:
        if not 0 <= jitter <= 1:
            raise ValueError(f"jitter must be in 0..1, got {jitter}")
        if multiplier < 2:
            raise ValueError(f"multiplier must be at least 2, got {multiplier}")
        self.initial_ms = min(initial_ms, max_ms)
        self.multiplier, self.max_ms, self.jitter = multiplier, max_ms, jitter
        self._uniform = uniform
        # the attempt count at which the un-jittered term reaches max_ms (fractional, as Kafka's)
        self._exp_max = (math.log(max_ms / max(self.initial_ms, 1)) / math.log(multiplier)
                         if max_ms > self.initial_ms else 0.0)

    def backoff(self, attempts: int) -> int:
        """Milliseconds for the attempt after ``attempts`` failures."""
        if self._exp_max == 0:
            return self.initial_ms
        term = self.initial_ms * self.multiplier ** min(float(attempts), self._exp_max)
        factor = self._uniform(1 - self.jitter, 1 + self.jitter) if self.jitter > 0 else 1.0
        return min(int(factor * term), self.max_ms)


@dataclass(frozen=True, slots=True)
class SetupAttempt:
    """One connection attempt: to ``address``, after ``failures`` consecutive failures, given
    ``timeout_s`` to be set up. Hand it back to :meth:`ClusterConnectionStates.failed` or
    :meth:`~ClusterConnectionStates.ready`."""

    address: tuple[str, int]
    failures: int
    timeout_s: float


class ClusterConnectionStates:
    """Consecutive connect failures per broker address and the setup timeout they give the next
    attempt (Kafka's ClusterConnectionStates, its setup-timeout part).

    Attempts made at the same time (several connections to one broker, all failing in one
    partition) count as one failure: a failed attempt raises the count to its own count + 1, so the
    timeout grows by one step per round of attempts, as Kafka's single connection per node does."""

    def __init__(self, setup_timeout_ms: int = DEFAULT_SETUP_TIMEOUT_MS,
                 setup_timeout_max_ms: int = DEFAULT_SETUP_TIMEOUT_MAX_MS, *,
                 uniform: Uniform = random.uniform) -> None:
        if setup_timeout_ms < 1 or setup_timeout_max_ms < 1:
            raise ValueError("connection setup timeouts must be at least 1 ms")
        self.setup_timeout_ms, self.setup_timeout_max_ms = setup_timeout_ms, setup_timeout_max_ms
        self._backoff = ExponentialBackoff(setup_timeout_ms, CONNECTION_SETUP_TIMEOUT_EXP_BASE, setup_timeout_max_ms,
                                           CONNECTION_SETUP_TIMEOUT_JITTER, uniform=uniform)
        self._failures: dict[tuple[str, int], int] = {}  # only brokers whose last attempts failed

    def connecting(self, host: str, port: int) -> SetupAttempt:
        """Start an attempt to ``host:port``: its setup timeout, from the failures so far."""
        failures = self._failures.get((host, port), 0)
        return SetupAttempt((host, port), failures, self._backoff.backoff(failures) / 1000)

    def failed(self, attempt: SetupAttempt) -> None:
        """The attempt timed out or was refused before the connection was set up."""
        self._failures[attempt.address] = max(self._failures.get(attempt.address, 0), attempt.failures + 1)

    def ready(self, attempt: SetupAttempt) -> None:
        """The connection was set up: the broker's next attempt starts from the base timeout."""
        self._failures.pop(attempt.address, None)

    def failures(self, host: str, port: int) -> int:
        """Consecutive failed attempts to ``host:port`` (0 after a success)."""
        return self._failures.get((host, port), 0)


__all__ = ["DEFAULT_SETUP_TIMEOUT_MAX_MS", "DEFAULT_SETUP_TIMEOUT_MS", "ClusterConnectionStates",
           "ExponentialBackoff", "SetupAttempt"]
