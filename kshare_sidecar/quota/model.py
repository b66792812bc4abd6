"""Kafka's client quotas, sans-I/O: which quota applies to a (user, client-id), and the byte rate
measured as Kafka measures it, with the throttle time Kafka computes.

Resolution (KIP-55; Kafka's ``ClientQuotaManager.DefaultQuotaCallback``): the most specific of

    /config/users/<user>/clients/<client-id>      /config/users/<user>/clients/<default>
    /config/users/<user>                          /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>     /config/users/<default>
    /config/clients/<client-id>                   /config/clients/<default>

in that order. The matched entity also decides whose bytes are counted together (Kafka's metric
tags): a quota of ``/config/clients/<default>`` is a quota *per client id*, one of
``/config/users/alice`` is alice's across all her client ids.

Measurement (Kafka's ``Rate`` over a ``WindowedSum``): ``quota.window.num`` samples (11) of
``quota.window.size.seconds`` (1); the rate is the sum of the live samples over the time they span,
counted as at least ``num - 1`` whole windows; a sample not written to for ``num`` windows is reset.
A recorded value that makes the rate exceed the bound throttles the client for
``(rate - bound) / bound × window span`` (``QuotaUtils.throttleTime``), which brings the rate back
to the bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: DescribeClientQuotas entity types and the quota keys kshare reads.
USER, CLIENT_ID = "user", "client-id"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
#: Kafka's ClientQuotaManager: "quota types enabled" bits (which entity shapes have any quota).
_CLIENT_ID_Q, _USER_Q, _USER_CLIENT_Q = 1, 2, 4
DEFAULT = None  # an entity name of None is the <default> entity, as DescribeClientQuotas says


@dataclass(frozen=True, slots=True)
class Entity:
    """A quota entity: user and/or client id; ``None`` is ``<default>``, absent (``MISSING``) is
    not part of the entity."""

    user: str | None | _Missing
    client_id: str | None | _Missing


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


def entity_of(components: Iterable[tuple[str, str | None]]) -> Entity | None:
    """A DescribeClientQuotas entity (type, name) list → :class:`Entity`; ``None`` for entities
    kshare does not apply (``ip``: connection-rate quotas)."""
    user: str | None | _Missing = MISSING
    client: str | None | _Missing = MISSING
    for kind, name in components:
        if kind == USER:
            user = name
        elif kind == CLIENT_ID:
            client = name
        else:
            return None
    if user is MISSING and client is MISSING:
        return None
    return Entity(user, client)


class QuotaTable:
    """One quota key's values by entity (a snapshot of the backend's client quotas)."""

    __slots__ = ("_bounds", "_enabled")

    def __init__(self, bounds: Mapping[Entity, float] | None = None) -> None:
        self._bounds = dict(bounds or {})
        enabled = 0
        for e in self._bounds:
            if e.user is MISSING:
                enabled |= _CLIENT_ID_Q
            elif e.client_id is MISSING:
                enabled |= _USER_Q
            else:
                enabled |= _USER_CLIENT_Q
        self._enabled = enabled

    def __len__(self) -> int:
        return len(self._bounds)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QuotaTable) and self._bounds == other._bounds

    def __hash__(self) -> int:  # pragma: no cover - tables are compared, never hashed
        return hash(frozenset(self._bounds.items()))

    @property
    def enabled(self) -> bool:
        return self._enabled != 0

    def resolve(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """The sensor key (Kafka's user and client-id metric tags) whose bytes count together, and
        the bound, for a request of ``user`` (a principal's name) with ``client_id``; ``None``
        when no quota applies."""
        if not self._enabled:
            return None
        tags = self._tags(user, client_id)
        bound = self._bound(*tags)
        return (tags, bound) if bound is not None else None

    def _has(self, user: str | None | _Missing, client: str | None | _Missing) -> bool:
        return Entity(user, client) in self._bounds

    def _tags(self, user: str, client: str) -> tuple[str, str]:
        """Kafka's DefaultQuotaCallback.quotaMetricTags."""
        enabled = self._enabled
        if enabled in (_CLIENT_ID_Q,):
            return "", client
        if enabled == _USER_Q:
            return user, ""
        if enabled == _USER_CLIENT_Q:
            return user, client
        if self._has(user, client) or self._has(user, DEFAULT):
            return user, client
        if self._has(user, MISSING):
            return user, ""
        if self._has(DEFAULT, client) or self._has(DEFAULT, DEFAULT):
            return user, client
        if self._has(DEFAULT, MISSING):
            return user, ""
        return "", client

    def _bound(self, user: str, client: str) -> float | None:
        """Kafka's DefaultQuotaCallback.quotaLimit for the tags."""
        b = self._bounds
        if user and client:
            for e in (Entity(user, client), Entity(user, DEFAULT), Entity(DEFAULT, client), Entity(DEFAULT, DEFAULT)):
                if e in b:
                    return b[e]
            return None
        if user:
            return b.get(Entity(user, MISSING), b.get(Entity(DEFAULT, MISSING)))
        if client:
            return b.get(Entity(MISSING, client), b.get(Entity(MISSING, DEFAULT)))
        return None


class _Sample:
    __slots__ = ("last_ms", "start_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.start_ms = self.last_ms = now_ms
        self.value = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_ms = now_ms
        self.value = 0.0


class SampledRate:
    """Kafka's ``Rate`` (per second) over a ``WindowedSum`` of ``samples`` windows of ``window_ms``."""

    __slots__ = ("_current", "_samples", "num", "window_ms")

    def __init__(self, samples: int = 11, window_ms: int = 1000) -> None:
        self.num, self.window_ms = samples, window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        sample = self._samples[self._current]
        if now_ms - sample.start_ms >= self.window_ms:  # complete: the next one (Kafka keeps num + 1)
            self._current = (self._current + 1) % (self.num + 1)
            if self._current >= len(self._samples):
                sample = _Sample(now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.last_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire = self.num * self.window_ms
        for s in self._samples:
            if now_ms - s.last_ms >= expire:
                s.reset(now_ms)

    def window_span_ms(self, now_ms: int) -> int:
        """Kafka's Rate.windowSize: the time the samples span, at least ``num - 1`` windows."""
        self._purge(now_ms)
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        oldest = min(s.start_ms for s in self._samples)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        """Bytes per second now."""
        span = self.window_span_ms(now_ms)  # purges first, as Kafka's measure does
        return sum(s.value for s in self._samples) / (span / 1000)

    def throttle_ms(self, bound: float, now_ms: int) -> int:
        """0 within ``bound``; else Kafka's throttle time for the current rate."""
        span = self.window_span_ms(now_ms)
        rate = sum(s.value for s in self._samples) / (span / 1000)
        if rate <= bound:
            return 0
        return min(round((rate - bound) / bound * span), 2**31 - 1)

    def room(self, bound: float, now_ms: int) -> float:
        """Bytes that can be recorded now without taking the rate over ``bound`` (<= 0: none)."""
        span = self.window_span_ms(now_ms)
        return bound * span / 1000 - sum(s.value for s in self._samples)

    def idle_since(self) -> int:
        return max((s.last_ms for s in self._samples), default=0)
