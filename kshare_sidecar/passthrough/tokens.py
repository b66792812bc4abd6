"""Delegation tokens owned by clients' principals: pass-through *as the client*.

With ``passthrough.credentials = client`` a forwarded request must reach the backend as the
client's own principal, so that the backend authorizes it with its own ACLs. A PLAIN client's
password can be replayed; a SCRAM client's cannot (the sidecar never sees it), nor can a client
certificate's private key. What works for every principal is Kafka's delegation tokens (KIP-48)
with an owner other than the requester (KIP-373, CreateDelegationToken v3, Kafka 3.3+; KRaft
since 3.6): the sidecar, authenticated as itself, asks for a token *owned by the client's
principal* (``User:alice``, ``User:CN=svc-a,O=acme``), and the client's upstream connections
authenticate with it over SCRAM with ``tokenauth=true`` — the broker's principal for them is the
owner, on every broker of the cluster, and a KIP-368 re-authentication simply fetches the
current token again. The backend needs ``delegation.token.secret.key`` and a SCRAM mechanism on
the sidecar's listener; the sidecar's principal needs CREATE_TOKENS on the USER resource of each
client principal (a super user has it).

Lifecycle, per principal: one token, created at the first authentication that needs it, with
``max_lifetime = passthrough.delegation.token.max.lifetime.ms`` (the broker grants at most its
``delegation.token.expiry.time.ms`` / ``max.lifetime.ms``). After 80 % of the granted lifetime
the next authentication creates a fresh one (a new HMAC — replacing rather than renewing, so a
token never outlives its max lifetime and no renewal can race an expiry); the replaced token is
left to expire (its connections re-authenticate before then: the broker bounds a token session by
the token's expiry, and ``BrokerConn`` re-authenticates at 85 % of it). A principal without
upstream connections for ``passthrough.delegation.token.idle.ms`` has its token expired at the
backend at once (ExpireDelegationToken −1; the sidecar names itself as the token's renewer so it
may); so do all at shutdown. A refusal (say DELEGATION_TOKEN_AUTHORIZATION_FAILED) is remembered
for a few seconds so that a client's retries do not turn into a storm of CreateDelegationToken.

The HMAC is a password: it is kept only in memory, never logged, never in a ``repr``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime
import logging
import time
from collections.abc import Callable
from typing import Any

from kio.schema.create_delegation_token.v3.request import CreatableRenewers, CreateDelegationTokenRequest
from kio.schema.errors import ErrorCode
from kio.serial.errors import SerialError
from kio.static.primitive import i64Timedelta

from ..backend.brokerconn import BrokerConnError
from ..backend.errors import SaslError
from ..protocol.requests import leading_error_code
from ..ratelog import RateLimitedLog
from ..wire import codec
from .pool import BackendPool, BackendUnavailable, decode, make

log = logging.getLogger("kshare.forward")
failures = RateLimitedLog(log)

_CREATE, _EXPIRE = 38, 40
REFRESH_AT = 0.8  # fraction of a token's granted lifetime after which a new one is made
#: until this fraction of its life a token is still handed out while its successor settles: the
#: session it gives lasts ≥ 15 % of the lifetime, so the next re-authentication is ≥ 1 s away
#: (Kafka's limit) for lifetimes from ~8 s up
HANDOUT_UNTIL = 0.85
RETRY_S = 5.0  # a refusal is answered from memory this long
#: a broker learns a new token from the metadata log a moment after CreateDelegationToken answers
#: (measured: refused once, ~0.3 s after creation, on a loaded single-node 3.9); until a token is
#: this old a refused authentication is tried again every RETRY_REFUSED_S
PROPAGATION_S, RETRY_REFUSED_S = 5.0, 0.2
#: a successor token is handed out once this old (or when its predecessor is about to expire)
SETTLE_S = 1.0

_WHY = {
    ErrorCode.delegation_token_auth_disabled: "the backend has delegation tokens disabled: set "
    "delegation.token.secret.key on every broker and controller (KRaft: Kafka 3.6+)",
    ErrorCode.delegation_token_request_not_allowed: "the backend does not take token requests on the sidecar's "
    "connection (PLAINTEXT, one-way SSL or itself token-authenticated): use SASL_PLAINTEXT or SASL_SSL",
    ErrorCode.unsupported_version: "the backend's metadata.version is too old for delegation tokens (KRaft: 3.6-IV2)",
}


class DelegationTokenError(Exception):
    """No token for a principal (or the start-up check failed): one line, no secret."""


@dataclasses.dataclass
class _Token:
    token_id: str
    hmac: str = dataclasses.field(repr=False)  # base64 of the HMAC: the SCRAM password
    replace_at: float
    expires_at: float
    made_at: float

    @property
    def handout_until(self) -> float:
        return self.made_at + HANDOUT_UNTIL * (self.expires_at - self.made_at)

    def retry_refused(self, now: float) -> float | None:
        return RETRY_REFUSED_S if now - self.made_at < PROPAGATION_S else None


@dataclasses.dataclass
class _Entry:
    principal: str
    token: _Token | None = None
    users: int = 0
    idle_since: float = 0.0
    failure: tuple[str, float] | None = None  # (message, until)
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    next: _Token | None = None  # the successor, made at 80 % of ``token``'s life
    making: asyncio.Task[None] | None = None
    timer: asyncio.TimerHandle | None = None  # starts the successor at ``token.replace_at``

    def stop(self) -> None:
        for handle in (self.making, self.timer):
            if handle is not None:
                handle.cancel()

    def live(self, now: float) -> list[_Token]:
        return [t for t in (self.token, self.next) if t is not None and now < t.expires_at]


class PrincipalCredentials:
    """The ``credential_source`` of one principal's upstream connections
    (:class:`~kshare_sidecar.backend.security.BackendSecurity`)."""

    def __init__(self, tokens: DelegationTokens, principal: str) -> None:
        self._tokens = tokens
        self.principal = principal
        self.describe = f"a delegation token of {principal}"

    def __repr__(self) -> str:
        return f"PrincipalCredentials({self.principal})"

    async def credentials(self) -> tuple[str, str]:
        return await self._tokens.credentials(self.principal)

    def retry_refused(self, attempt: int) -> float | None:
        """A broker refused the token: seconds to wait before trying again (a token just made may
        not have reached that broker yet), or ``None``."""
        entry = self._tokens._entries.get(self.principal)
        if entry is None or entry.token is None:
            return None
        return entry.token.retry_refused(self._tokens.clock())

    def release(self) -> None:
        self._tokens.release(self.principal)


def split_principal(principal: str) -> tuple[str, str]:
    kind, sep, name = principal.partition(":")
    if not sep or not name:
        raise DelegationTokenError(f"not a principal: {principal!r}")
    return kind, name


class DelegationTokens:
    """Tokens per client principal, made through the sidecar's own backend connections (see
    module docstring). ``start()`` checks the backend's prerequisites once."""

    def __init__(self, pool: BackendPool, *, mechanism: str, max_lifetime_ms: int, idle_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pool = pool
        self.mechanism = mechanism
        self.max_lifetime_ms = max_lifetime_ms
        self.idle_s = idle_ms / 1000
        self.clock = clock
        #: the sidecar's own backend principal (learned at start): named as renewer, so it may expire
        self.renewer: tuple[str, str] | None = None
        self._entries: dict[str, _Entry] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.created = 0
        self.expired = 0

    def __repr__(self) -> str:
        return f"DelegationTokens({len(self._entries)} principals)"

    # -- start-up -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Make a token for the sidecar itself, authenticate one connection with it, expire it:
        delegation tokens enabled, KIP-373 spoken, SCRAM offered, token requests allowed — or
        :class:`DelegationTokenError` with the reason."""
        if self.pool.versions.get(_CREATE, (0, -1))[1] < 3:
            raise DelegationTokenError("the backend does not speak CreateDelegationToken v3 (tokens owned by another "
                             "principal, KIP-373: Kafka 3.3+)")
        token, requester = await self._create(None)
        self.renewer = requester
        node = self.pool.any_node()
        host, port = self.pool.brokers[node]
        security = self.token_security(_Fixed(token, self.clock))
        # the sidecar's own token, not its configured credentials: that is what is checked
        conn = self.pool.clients.broker_as(security, host, port, node_id=node)
        try:
            await conn.connect()
        except BrokerConnError as exc:
            raise DelegationTokenError(f"the backend refused the sidecar's own delegation token over {self.mechanism} "
                             f"(tokenauth): {exc}") from None
        finally:
            await conn.close()
            await self._expire(token, "start-up check")
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop(), name="kshare-token-sweeper")

    def token_security(self, source: Any) -> Any:
        """The pool's security with ``source`` as SCRAM credentials and ``tokenauth=true``."""
        return dataclasses.replace(self.pool.security, mechanism=self.mechanism, username=None, password=None,
                                   token_file=None, token_provider=None, credential_source=source, token_auth=True)

    # -- per principal ----------------------------------------------------------------------------
    def acquire(self, principal: str) -> PrincipalCredentials:
        entry = self._entry(principal)
        entry.users += 1
        return PrincipalCredentials(self, principal)

    def _entry(self, principal: str) -> _Entry:
        entry = self._entries.get(principal)
        if entry is None:
            entry = self._entries[principal] = _Entry(principal)
        return entry

    def release(self, principal: str) -> None:
        entry = self._entries.get(principal)
        if entry is not None and entry.users > 0:
            entry.users -= 1
            if entry.users == 0:
                entry.idle_since = self.clock()

    async def credentials(self, principal: str) -> tuple[str, str]:
        """(token id, HMAC) of ``principal``'s current token. Raises
        :class:`~kshare_sidecar.backend.sasl.SaslError` (the connection fails; no secret in it).

        A token due for replacement (80 % of its life, when a timer makes its successor) is still
        handed out until 85 % while its successor settles; the successor takes over once it is
        ``SETTLE_S`` old (the brokers have learnt it) or at 85 % — so a KIP-368 re-authentication,
        which cannot be retried on its connection, rarely meets a token a broker does not know yet.
        """
        entry = self._entry(principal)
        async with entry.lock:  # one CreateDelegationToken per principal at a time
            now = self.clock()
            self._promote(entry, now)
            token = entry.token
            if token is not None and now < token.replace_at:
                return token.token_id, token.hmac
            if token is not None and now < token.handout_until:
                self._start_successor(entry)
                return token.token_id, token.hmac
            if entry.making is not None:  # the current one is spent and its successor on the way
                await asyncio.gather(asyncio.shield(entry.making), return_exceptions=True)
                self._promote(entry, self.clock(), force=True)
                if entry.token is not None and entry.token is not token:
                    return entry.token.token_id, entry.token.hmac
            if entry.failure is not None and now < entry.failure[1]:
                raise SaslError(entry.failure[0])
            try:
                entry.token, _ = await self._create(principal)
            except (DelegationTokenError, BackendUnavailable) as exc:
                message = f"no delegation token for {principal}: {exc}"
                entry.failure = (message, now + RETRY_S)
                raise SaslError(message) from None
            entry.failure = None
            self._schedule(entry)
            return entry.token.token_id, entry.token.hmac

    def _schedule(self, entry: _Entry) -> None:
        """Make the successor when the token reaches 80 % of its life — ahead of the connections'
        re-authentications (at 85 % of their sessions), so it has settled when they come."""
        if entry.timer is not None:
            entry.timer.cancel()
        token = entry.token
        if token is not None:
            delay = max(0.0, token.replace_at - self.clock())
            entry.timer = asyncio.get_running_loop().call_later(delay, self._start_successor, entry)

    def _start_successor(self, entry: _Entry) -> None:
        """Only for a principal still in use (an idle one gets a fresh token when it returns)."""
        entry.timer = None
        if (entry.making is None and entry.next is None and entry.users > 0
                and self._entries.get(entry.principal) is entry):
            entry.making = asyncio.get_running_loop().create_task(self._successor(entry))

    def _promote(self, entry: _Entry, now: float, *, force: bool = False) -> None:
        nxt, current = entry.next, entry.token
        if nxt is not None and (force or current is None or now - nxt.made_at >= SETTLE_S
                                or now >= current.handout_until):
            entry.token, entry.next = nxt, None
            self._schedule(entry)

    async def _successor(self, entry: _Entry) -> None:
        principal = entry.principal
        try:
            entry.next, _ = await self._create(principal)
        except (DelegationTokenError, BackendUnavailable) as exc:
            entry.failure = (f"no delegation token for {principal}: {exc}", self.clock() + RETRY_S)
            left = entry.token.expires_at - self.clock() if entry.token is not None else 0.0
            failures.log(f"token-{principal}", logging.WARNING, "could not replace the delegation token of %s "
                         "(the current one expires in %.0f s): %s", principal, left, exc)
        finally:
            entry.making = None

    # -- backend requests ---------------------------------------------------------------------------
    async def _create(self, principal: str | None) -> tuple[_Token, tuple[str, str]]:
        owner = split_principal(principal) if principal is not None else (None, None)
        renewers = () if self.renewer is None else (CreatableRenewers(principal_type=self.renewer[0],
                                                                      principal_name=self.renewer[1]),)
        request = CreateDelegationTokenRequest(
            owner_principal_type=owner[0], owner_principal_name=owner[1], renewers=renewers,
            max_lifetime=i64Timedelta.parse(datetime.timedelta(milliseconds=self.max_lifetime_ms)))
        answer = await self._call(request)
        code = ErrorCode(answer.error_code)
        if code != ErrorCode.none:
            raise DelegationTokenError(f"CreateDelegationToken: {code.name.upper()} ({self._why(code, principal)})")
        lifetime = max(1.0, (answer.expiry_timestamp - answer.issue_timestamp).total_seconds())
        now = self.clock()
        self.created += 1
        log.debug("delegation token %s for %s: %.0f s", answer.token_id, principal or "the sidecar", lifetime)
        # the successor is made at 80 % of the life — earlier for short lifetimes, so that it has
        # settled (2 × SETTLE_S) before the old token stops being handed out at 85 %
        due = max(0.5 * lifetime, min(REFRESH_AT * lifetime, HANDOUT_UNTIL * lifetime - 2 * SETTLE_S))
        token = _Token(answer.token_id, base64.b64encode(bytes(answer.hmac)).decode(),
                       replace_at=now + due, expires_at=now + lifetime, made_at=now)
        return token, (answer.token_requester_principal_type, answer.token_requester_principal_name)

    async def _call(self, request: Any) -> Any:
        """The decoded answer — or, for an error answer, just its code: Kafka fills an error
        answer's timestamps with -1, which kio refuses to read as datetimes."""
        api_key, version = type(request).__api_key__, type(request).__version__
        payload = await self.pool.call_payload(None, request)
        try:
            return decode(api_key, version, payload)
        except SerialError:
            return _ErrorOnly(ErrorCode(leading_error_code(payload, codec.response_class(api_key, version))[0]))

    def _why(self, code: ErrorCode, principal: str | None) -> str:
        if code == ErrorCode.delegation_token_authorization_failed:
            me = f"{self.renewer[0]}:{self.renewer[1]}" if self.renewer else "the sidecar's principal"
            return f"{me} needs CREATE_TOKENS on USER {principal} at the backend"
        return _WHY.get(code, "the backend's answer")

    async def _expire(self, token: _Token, why: str) -> None:
        try:
            version = self.pool.version(_EXPIRE, 2)
            request = make(_EXPIRE, version, hmac=base64.b64decode(token.hmac),
                           expiry_time_period=i64Timedelta.parse(datetime.timedelta(milliseconds=-1)))
            answer = await self._call(request)
        except (BackendUnavailable, BrokerConnError, TimeoutError) as exc:
            log.info("could not expire delegation token %s (%s): %s", token.token_id, why, exc)
            return
        code = ErrorCode(answer.error_code)
        if code not in (ErrorCode.none, ErrorCode.delegation_token_not_found, ErrorCode.delegation_token_expired):
            log.info("could not expire delegation token %s (%s): %s", token.token_id, why, code.name.upper())
            return
        self.expired += 1
        log.debug("delegation token %s expired (%s)", token.token_id, why)

    # -- idle tokens and shutdown ---------------------------------------------------------------------
    async def sweep(self) -> None:
        """Expire the tokens of principals without upstream connections for ``idle_s``."""
        now = self.clock()
        for principal, entry in list(self._entries.items()):
            if entry.users == 0 and now - entry.idle_since >= self.idle_s and not entry.lock.locked():
                del self._entries[principal]
                entry.stop()
                for token in entry.live(now):
                    await self._expire(token, f"{principal} idle")

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(max(0.5, min(self.idle_s / 2, 30.0)))
            await self.sweep()

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        entries, self._entries = self._entries, {}
        now = self.clock()
        for entry in entries.values():
            entry.stop()
        live = [token for entry in entries.values() for token in entry.live(now)]
        if live:
            await asyncio.wait([asyncio.ensure_future(self._expire(t, "shutdown")) for t in live], timeout=5.0)


@dataclasses.dataclass(frozen=True)
class _ErrorOnly:
    error_code: ErrorCode


class _Fixed:
    """A credential source that always gives one token (the start-up check)."""

    describe = "the sidecar's own delegation token"

    def __init__(self, token: _Token, clock: Callable[[], float]) -> None:
        self._token = token
        self._clock = clock

    async def credentials(self) -> tuple[str, str]:
        return self._token.token_id, self._token.hmac

    def retry_refused(self, attempt: int) -> float | None:
        return self._token.retry_refused(self._clock())


__all__ = ["DelegationTokens", "PrincipalCredentials", "DelegationTokenError", "split_principal"]
