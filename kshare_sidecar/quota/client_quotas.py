"""The backend's client quotas applied to ShareFetch: Kafka's fetch quota (``consumer_byte_rate``)
for the share consumers the sidecar serves.

Why here: a share consumer's records reach it from the sidecar, which reads the backend under its
own identity — the backend's quota for the consumer's user or client id never sees those bytes.
Operators keep one tenant from starving the others with quotas (``kafka-configs.sh --entity-type
clients|users``, through the sidecar or at the backend), so the sidecar applies them itself, as a
broker's ClientQuotaManager does for Fetch and ShareFetch:

- the quotas are the backend's, read with DescribeClientQuotas (api key 48) every
  ``client.quota.refresh.ms`` with the sidecar's backend credentials (which need DESCRIBE_CONFIGS
  on CLUSTER); ``user`` and ``client-id`` entities, resolved as Kafka resolves them (:mod:`.model`);
- each ShareFetch answer's bytes are recorded on the matched entity's rate (``quota.window.num``
  windows of ``quota.window.size.seconds``, Kafka's defaults 11 × 1 s), once per response;
- an answer that brings the rate over the quota carries ``ThrottleTimeMs`` (librdkafka's throttle
  callback fires) and the connection is muted for that long: its next ShareFetch or
  ShareAcknowledge waits for the end of the throttle, as a broker stops reading a throttled
  channel (KIP-219);
- a ShareFetch's MaxBytes is capped at what the quota allows over the window, ``quota × (num − 1)
  × window`` (KafkaApis, ``maxValueInQuotaWindow``), and at what the client may still receive
  within its quota; a client at its quota gets an answer without records (its acknowledgements
  applied) that carries the throttle time.

One difference, deliberate (docs/compatibility.md): Kafka acquires records for the answer that
crosses the quota and then empties it (``throttleResponse``): those records stay locked until
their acquisition lock expires and go out again with a higher delivery count. kshare sizes the
fetch to the quota before acquiring, so it never acquires records it will not send.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.describe_client_quotas.v0.request import DescribeClientQuotasRequest
from kio.schema.describe_client_quotas.v0.response import DescribeClientQuotasResponse
from kio.schema.errors import ErrorCode

from ..backend.brokerconn import BrokerConnError
from ..protocol.requests import decode_response, request_payload
from ..ratelog import RateLimitedLog
from .model import CONSUMER_BYTE_RATE, QuotaTable, SampledRate, entity_of

if TYPE_CHECKING:
    from ..backend.clients import BackendClients

log = logging.getLogger("kshare.quotas")
_failures = RateLimitedLog(log)

#: a rate not recorded to for this long is dropped (Kafka: INACTIVE_SENSOR_EXPIRATION_TIME_SECONDS)
SENSOR_IDLE_MS = 3_600_000


def _user(principal: str) -> str:
    """A principal's name, as Kafka's quota entities name users (``User:alice`` → ``alice``)."""
    return principal.split(":", 1)[1] if ":" in principal else principal


class ClientQuotas:
    """The fetch quotas of the backend, their rates, and the muted connections."""

    def __init__(self, clients: BackendClients, *, refresh_ms: int = 5000, samples: int = 11,
                 window_s: int = 1, clock: Callable[[], float] = time.monotonic, timeout_s: float = 10.0) -> None:
        self._conns = clients.bootstrap_brokers(connect_timeout_s=timeout_s)  # as the sidecar
        self.refresh_s = refresh_ms / 1000
        self.samples, self.window_ms = samples, window_s * 1000
        self._clock = clock
        self._timeout = timeout_s
        self.table = QuotaTable()
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float] | None] = {}  # per table
        self._rates: dict[tuple[str, str], SampledRate] = {}
        self._muted: dict[int, float] = {}  # connection id -> end of its throttle (clock seconds)
        self._task: asyncio.Task[None] | None = None
        self.throttled = 0  # answers that carried a throttle time (metrics, tests)

    def __repr__(self) -> str:
        return f"ClientQuotas({len(self.table)} {CONSUMER_BYTE_RATE} entities, {len(self._rates)} rates)"

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Read the quotas once (a backend that cannot answer: logged, retried in the background)."""
        await self.refresh()
        self._task = asyncio.create_task(self._refresher(), name="kshare-client-quotas")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for conn in self._conns:
            await conn.close()

    async def refresh(self) -> bool:
        """Read the backend's client quotas now; False (and the previous table kept) on failure."""
        try:
            table = await self._describe()
        except (BrokerConnError, TimeoutError, OSError, QuotaReadError) as exc:
            _failures.log("describe", logging.WARNING, "client quotas could not be read from the backend "
                          "(the last ones read stay in force): %s", exc)
            return False
        if table != self.table:
            log.info("client quotas: %d %s entities from the backend", len(table), CONSUMER_BYTE_RATE)
            self.table = table
            self._resolved = {}
        return True

    async def _refresher(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            await self.refresh()
            now = self._now_ms()
            for key, rate in list(self._rates.items()):
                if now - rate.idle_since() > SENSOR_IDLE_MS:
                    del self._rates[key]

    # -- what the ShareFetch path asks (once per request / response) --------------------------
    def _resolve(self, principal: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        key = (principal, client_id)
        try:
            return self._resolved[key]
        except KeyError:
            if len(self._resolved) > 100_000:  # many short-lived client ids: start over
                self._resolved = {}
            found = self._resolved[key] = self.table.resolve(_user(principal), client_id)
            return found

    def admit(self, principal: str, client_id: str, requested: int) -> tuple[int, int]:
        """(MaxBytes for this ShareFetch, ThrottleTimeMs when it may acquire nothing now).

        MaxBytes is capped at what the quota allows over the window (KafkaApis) and at what the
        client may still receive without going over it, so no answer runs far past the quota
        (its first log batch always goes, as Kafka's fetch rule wants). A client already at its
        quota acquires nothing: its acknowledgements are applied and the answer, without records,
        carries the throttle time — the empty throttled answer Kafka sends, without acquiring
        records that would then wait for their lock to expire."""
        resolved = self._resolve(principal, client_id) if self.table.enabled else None
        if resolved is None:
            return requested, 0
        key, bound = resolved
        cap = min(requested, int(bound * (self.samples - 1) * self.window_ms / 1000))
        rate = self._rates.get(key)
        if rate is None:
            return max(1, cap), 0
        now = self._now_ms()
        room = rate.room(bound, now)
        if room < 1:
            return 0, max(1, rate.throttle_ms(bound, now))
        return max(1, min(cap, int(room))), 0

    def record(self, principal: str, client_id: str, size: int, conn_id: int | None, at_least_ms: int = 0) -> int:
        """Record one answer's bytes; its ThrottleTimeMs (0: within the quota; ``at_least_ms``
        from :meth:`admit`). A throttled connection is muted for that long (:meth:`unmuted`)."""
        if not self.table.enabled:
            return 0
        resolved = self._resolve(principal, client_id)
        if resolved is None:
            return 0
        key, bound = resolved
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = SampledRate(self.samples, self.window_ms)
        now = self._now_ms()
        rate.record(size, now)
        throttle = max(rate.throttle_ms(bound, now), at_least_ms)
        if throttle > 0:
            self.throttled += 1
            if conn_id is not None:
                self._muted[conn_id] = self._clock() + throttle / 1000
            log.debug("fetch quota of user=%r client-id=%r (%.0f B/s) exceeded: throttled %d ms", key[0], key[1],
                      bound, throttle)
        return throttle

    async def unmuted(self, conn_id: int) -> None:
        """Wait until the connection's throttle is over (at once when it has none)."""
        until = self._muted.get(conn_id)
        if until is None:
            return
        wait = until - self._clock()
        if wait > 0:
            await asyncio.sleep(wait)
        if self._muted.get(conn_id) == until:
            del self._muted[conn_id]

    def connection_closed(self, conn_id: int) -> None:
        self._muted.pop(conn_id, None)

    # -- internals ---------------------------------------------------------------------------
    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    async def _describe(self) -> QuotaTable:
        payload = request_payload(DescribeClientQuotasRequest(components=(), strict=False), 0, "kshare-quotas")
        last: Exception | None = None
        for conn in self._conns:
            try:
                answer = await conn.request(payload, timeout_s=self._timeout)
            except (BrokerConnError, TimeoutError) as exc:
                last = exc
                continue
            _, response = decode_response(answer, DescribeClientQuotasResponse)
            if response.error_code != ErrorCode.none:
                hint = " (grant the sidecar's backend principal DESCRIBE_CONFIGS on CLUSTER)" \
                    if response.error_code == ErrorCode.cluster_authorization_failed else ""
                raise QuotaReadError(f"DescribeClientQuotas: {response.error_code.name}{hint}")
            bounds = {}
            for entry in response.entries or ():
                entity = entity_of((e.entity_type, e.entity_name) for e in entry.entity)
                if entity is None:
                    continue
                for v in entry.values:
                    if v.key == CONSUMER_BYTE_RATE:
                        bounds[entity] = float(v.value)
            return QuotaTable(bounds)
        raise BrokerConnError(f"no backend broker answered DescribeClientQuotas: {last}")


class QuotaReadError(Exception):
    """The backend refused DescribeClientQuotas."""


def client_quotas(config: Any, clients: BackendClients) -> ClientQuotas | None:
    """The configured quota manager, or ``None`` when ``client.quota.enable`` is off."""
    q = config.quota
    if not q.enable:
        return None
    return ClientQuotas(clients, refresh_ms=q.refresh_ms, samples=q.window_num,
                        window_s=q.window_size_seconds)


__all__ = ["ClientQuotas", "QuotaReadError", "client_quotas"]
