"""``authorizer.class.name = backend``: the backend's ACLs, fetched per principal and cached.

Why the backend's: a share group served by kshare should be guarded by the same ACLs an operator
already keeps in the cluster (``kafka-acls.sh``, AdminClient.create_acls) — kshare has no ACL store
of its own, and an ACL changed at the backend applies to the sidecar within ``authorizer.cache.ms``.

How: for a principal seen for the first time, two DescribeAcls (api key 29) requests to a backend
broker — the principal's own ACLs and ``User:*``'s — with the sidecar's backend credentials
(which need DESCRIBE on CLUSTER). The pair becomes one immutable :class:`~.acls.AclSet`. After
``authorizer.cache.ms`` a set is refreshed in the background while requests keep using the old one;
principals not seen for a while are dropped. With ``allow.everyone.if.no.acl.found`` a third,
unfiltered DescribeAcls (every principal's ACLs, shared by all principals' refreshes like
``User:*``'s) tells whether *any* ACL matches a resource, which Kafka's rule needs. If refreshing keeps failing, a set older than
:data:`STALE_FACTOR` × cache.ms is no longer trusted: requests fail with a retriable error until
the backend answers again (fail closed, never open).

A refusal never rests on the cache: a broker applies a new ACL from its metadata log within
milliseconds, so a client granted READ a moment ago is served there — and a share consumer
refused GROUP_AUTHORIZATION_FAILED gives up for good. So before a handler refuses
(:meth:`.acls.Decider.confirm`), :meth:`BackendAuthorizer.fresh_acls` reads the principal's
ACLs (and ``User:*``'s, and every ACL with allow.everyone.if.no.acl.found) by a read that started
after the request arrived. Such re-reads of one principal are at least
``authorizer.denial.recheck.ms`` apart — a denied client that keeps asking costs the backend one
DescribeAcls set per interval, and its refusals wait for the next read instead.

Evaluation itself is :mod:`.acls` (sans-I/O); this module is only the I/O and the cache.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.describe_acls.v1.request import DescribeAclsRequest
from kio.schema.describe_acls.v1.response import DescribeAclsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from ..config import ConfigError
from ..backend.brokerconn import BrokerConnError
from ..backend.errors import BackendUnavailableError
from ..protocol.requests import decode_response, request_payload
from ..ratelog import RateLimitedLog
from .acls import WILDCARD_PRINCIPAL, Acl, AclSet, Decider, Pattern, Permission, Res

if TYPE_CHECKING:
    from ..backend.clients import BackendClients

log = logging.getLogger("kshare.authorizer")
_failures = RateLimitedLog(log)

SECURITY_DISABLED = int(ErrorCode.security_disabled)
CLUSTER_AUTHORIZATION_FAILED = int(ErrorCode.cluster_authorization_failed)
COORDINATOR_NOT_AVAILABLE = int(ErrorCode.coordinator_not_available)
_ANY = i8(1)  # ResourceType.ANY / PatternType.ANY / AclOperation.ANY / AclPermissionType.ANY
#: A set not refreshed for this many cache periods is not used any more (fail closed).
STALE_FACTOR = 10
#: Principals not asked about for this many cache periods are forgotten (no refresh for them).
IDLE_FACTOR = 60


class AuthorizerError(Exception):
    """The backend cannot serve ACLs (no authorizer, or the sidecar may not describe them)."""


class AclsUnavailable(BackendUnavailableError):
    """No fresh enough ACLs for a principal: COORDINATOR_NOT_AVAILABLE, retriable — group clients
    retry it (an authorization error would be fatal to them); nothing is allowed meanwhile."""

    def __init__(self, message: str) -> None:
        super().__init__(COORDINATOR_NOT_AVAILABLE, message)

    @property
    def retriable(self) -> bool:
        return True


@dataclass
class _Entry:
    acls: AclSet
    fetched: float
    used: float
    started: float = 0.0  # when the read that produced `acls` was sent (what fresh_acls compares)


def acls_from_response(response: Any) -> list[Acl]:
    """DescribeAcls resources → :class:`Acl` bindings (filter-only patterns dropped)."""
    out = []
    for resource in response.resources:
        pattern = int(getattr(resource, "pattern_type", Pattern.LITERAL))
        for a in resource.acls:
            out.append(Acl(int(resource.resource_type), resource.resource_name, pattern, a.principal, a.host,
                           int(a.operation), int(a.permission_type)))
    return out


class BackendAuthorizer:
    """Per-principal ACL cache over DescribeAcls (see module docstring)."""

    def __init__(self, clients: BackendClients, *, cache_ms: int = 5000,
                 super_users: frozenset[str] = frozenset(), plaintext_anonymous: bool = True,
                 allow_everyone_if_no_acl_found: bool = False, denial_recheck_ms: int = 1000,
                 clock: Callable[[], float] = time.monotonic, timeout_s: float = 10.0) -> None:
        self._conns = clients.bootstrap_brokers(connect_timeout_s=timeout_s)  # as the sidecar
        self.cache_s = cache_ms / 1000
        self.super_users = super_users
        self.plaintext_anonymous = plaintext_anonymous
        self._clock = clock
        self._timeout = timeout_s
        self._entries: dict[str, _Entry] = {}
        self._inflight: dict[str, asyncio.Future[AclSet]] = {}
        self._inflight_started: dict[str, float] = {}
        self.recheck_s = denial_recheck_ms / 1000
        self._rechecked: dict[str, float] = {}  # principal -> when its last re-read (fresh_acls) started
        self.rechecks = 0
        self._task: asyncio.Task[None] | None = None
        self._wildcard: tuple[float, list[Acl]] | None = None
        self.allow_everyone = allow_everyone_if_no_acl_found
        self._everyone: tuple[float, list[Acl]] | None = None  # every ACL (allow_everyone only)
        self.fetches = 0

    def __repr__(self) -> str:
        return f"BackendAuthorizer(cache {self.cache_s * 1000:.0f} ms, {len(self._entries)} principals)"

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Check once that the backend serves ACLs to us; raise :class:`AuthorizerError` if not."""
        try:
            await self._describe(WILDCARD_PRINCIPAL)
        except AuthorizerError:
            raise
        except (BrokerConnError, TimeoutError, OSError) as exc:
            raise AuthorizerError(f"authorizer.class.name = 'backend': the backend did not answer DescribeAcls: "
                                  f"{exc}") from exc
        self._task = asyncio.create_task(self._refresher(), name="kshare-acl-refresh")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for conn in self._conns:
            await conn.close()

    # -- what handlers ask ---------------------------------------------------------------------
    def exempt(self, principal: str, security_protocol: str) -> bool:
        """Super users, and ``User:ANONYMOUS`` on PLAINTEXT listeners unless configured otherwise."""
        return principal in self.super_users or (
            self.plaintext_anonymous and principal == "User:ANONYMOUS" and security_protocol == "PLAINTEXT")

    async def decider(self, principal: str, host: str, security_protocol: str = "PLAINTEXT") -> Decider:
        if self.exempt(principal, security_protocol):
            return Decider(AclSet(super_user=True), principal, host)
        since = self._clock()
        return Decider(await self.acls(principal), principal, host, recheck=self.fresh_acls, since=since)

    async def acls(self, principal: str) -> AclSet:
        now = self._clock()
        entry = self._entries.get(principal)
        if entry is not None:
            entry.used = now
            if now - entry.fetched <= self.cache_s * STALE_FACTOR:
                return entry.acls
        try:
            return await self._load(principal)
        except (BrokerConnError, TimeoutError, OSError, AuthorizerError) as exc:
            _failures.log("acls", logging.WARNING, "ACLs of %s could not be read from the backend: %s", principal, exc)
            raise AclsUnavailable(f"ACLs could not be read from the backend: {exc}") from exc

    async def fresh_acls(self, principal: str, since: float) -> AclSet:
        """The principal's ACLs from a read that started at or after ``since`` (see the module
        docstring): the cached set if it is that recent, a read in flight that started after it,
        or a new read once ``authorizer.denial.recheck.ms`` has passed since the principal's last
        re-read (waiting for that moment). A failed read is AclsUnavailable (retriable), never a
        refusal from the old set."""
        while True:
            entry = self._entries.get(principal)
            if entry is not None and entry.started >= since:
                entry.used = self._clock()
                return entry.acls
            pending = self._inflight.get(principal)
            if pending is not None:
                if self._inflight_started.get(principal, 0.0) >= since:
                    return await self._await_read(principal, pending)
                await asyncio.wait({pending})  # an older read: the next one must start after it
                continue
            wait = self._rechecked.get(principal, float("-inf")) + self.recheck_s - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            self._rechecked[principal] = self._clock()
            self.rechecks += 1
            return await self._await_read(principal, self._start(principal, shared=False))

    async def _await_read(self, principal: str, pending: asyncio.Future[AclSet]) -> AclSet:
        try:
            return await asyncio.shield(pending)
        except (BrokerConnError, TimeoutError, OSError, AuthorizerError) as exc:
            _failures.log("acls", logging.WARNING, "ACLs of %s could not be read from the backend: %s", principal, exc)
            raise AclsUnavailable(f"ACLs could not be read from the backend: {exc}") from exc

    # -- internals -----------------------------------------------------------------------------
    async def _load(self, principal: str) -> AclSet:
        """One DescribeAcls pair per principal at a time (concurrent requests share it)."""
        pending = self._inflight.get(principal)
        if pending is None:
            pending = self._start(principal, shared=True)
        return await asyncio.shield(pending)

    def _start(self, principal: str, *, shared: bool) -> asyncio.Future[AclSet]:
        """Start a read of the principal's ACLs (``shared``: ``User:*``'s and every ACL may come
        from a read of the last half cache period; else they are read now too)."""
        pending = self._inflight[principal] = asyncio.ensure_future(self._fetch(principal, shared=shared))
        self._inflight_started[principal] = self._clock()

        def done(f: asyncio.Future[AclSet]) -> None:
            if self._inflight.get(principal) is f:
                del self._inflight[principal]
            if not f.cancelled():
                f.exception()  # retrieved: the awaiting requests report it

        pending.add_done_callback(done)
        return pending

    async def _fetch(self, principal: str, *, shared: bool = True) -> AclSet:
        started = self._clock()
        own, wildcard, every = await asyncio.gather(self._describe(principal), self._wildcard_acls(shared),
                                                    self._all_acls(shared))
        acls = AclSet([*own, *wildcard] if principal != WILDCARD_PRINCIPAL else own, resource_acls=every)
        now = self._clock()
        old = self._entries.get(principal)
        if old is not None and old.started > started:
            return old.acls  # a later read finished first: keep it
        self._entries[principal] = _Entry(acls, now, old.used if old is not None else now, started)
        self.fetches += 1
        log.debug("ACLs of %s: %d bindings", principal, len(acls))
        return acls

    async def _wildcard_acls(self, shared: bool = True) -> list[Acl]:
        """``User:*``'s ACLs, shared by every principal's refresh within half a cache period (N
        principals cost N + 1 DescribeAcls per period, not 2N); ``shared=False``: read now."""
        now = self._clock()
        if shared and self._wildcard is not None and now - self._wildcard[0] < self.cache_s / 2:
            return self._wildcard[1]
        acls = await self._describe(WILDCARD_PRINCIPAL)
        self._wildcard = (now, acls)
        return acls

    async def _all_acls(self, shared: bool = True) -> list[Acl] | None:
        """Every ACL of the backend (no principal filter), for allow.everyone.if.no.acl.found;
        ``None`` when that is off. Shared within half a cache period, as ``User:*``'s."""
        if not self.allow_everyone:
            return None
        now = self._clock()
        if shared and self._everyone is not None and now - self._everyone[0] < self.cache_s / 2:
            return self._everyone[1]
        acls = await self._describe(None)
        self._everyone = (now, acls)
        return acls

    async def _describe(self, principal: str | None) -> list[Acl]:
        request = DescribeAclsRequest(
            resource_type_filter=_ANY, resource_name_filter=None, pattern_type_filter=_ANY,
            principal_filter=principal, host_filter=None, operation=_ANY, permission_type=_ANY)
        payload = request_payload(request, 0, "kshare-authorizer")
        last: Exception | None = None
        for conn in self._conns:
            try:
                answer = await conn.request(payload, timeout_s=self._timeout)
            except (BrokerConnError, TimeoutError) as exc:
                last = exc
                continue
            _, response = decode_response(answer, DescribeAclsResponse)
            code = int(response.error_code)
            if code == SECURITY_DISABLED:
                raise AuthorizerError("authorizer.class.name = 'backend' but the backend has no authorizer "
                                      "(DescribeAcls: SECURITY_DISABLED); set authorizer.class.name on the "
                                      "brokers, or authorizer.class.name = '' here")
            if code == CLUSTER_AUTHORIZATION_FAILED:
                raise AuthorizerError("authorizer.class.name = 'backend': the sidecar's backend principal may not "
                                      "describe ACLs (CLUSTER_AUTHORIZATION_FAILED): grant it DESCRIBE on CLUSTER")
            if code != 0:
                raise AuthorizerError(f"DescribeAcls failed with error code {code}: {response.error_message}")
            return acls_from_response(response)
        raise BrokerConnError(f"no backend broker answered DescribeAcls: {last}")

    async def _refresher(self) -> None:
        """Every cache period: refresh the sets that are due, forget idle principals."""
        while True:
            await asyncio.sleep(max(self.cache_s / 2, 0.05))
            now = self._clock()
            for principal, entry in list(self._entries.items()):
                if now - entry.used > self.cache_s * IDLE_FACTOR:
                    del self._entries[principal]
                    self._rechecked.pop(principal, None)
                elif now - entry.fetched >= self.cache_s:
                    try:
                        await self._load(principal)
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:  # keep the old set (until STALE_FACTOR); say so once a while
                        _failures.log("refresh", logging.WARNING, "refreshing the ACLs of %s failed: %s",
                                      principal, exc)


def backend_authorizer(config: Any, clients: BackendClients) -> BackendAuthorizer | None:
    """The configured authorizer, or ``None`` when ``authorizer.class.name`` is empty."""
    name = config.authorizer.class_name
    if not name:
        return None
    if name != "backend":
        raise ConfigError(f"authorizer.class.name = {name!r}: allowed values are '' and 'backend'")
    supers = frozenset(p.strip() for p in config.authorizer.super_users.split(";") if p.strip())
    return BackendAuthorizer(clients, cache_ms=config.authorizer.cache_ms,
                             super_users=supers,
                             plaintext_anonymous=config.authorizer.allow_plaintext_anonymous,
                             allow_everyone_if_no_acl_found=config.authorizer.allow_everyone_if_no_acl_found,
                             denial_recheck_ms=config.authorizer.denial_recheck_ms)


__all__ = ["AclsUnavailable", "AuthorizerError", "BackendAuthorizer", "Permission", "Res", "backend_authorizer"]
