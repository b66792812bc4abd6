"""OAUTHBEARER tokens for the backend from a client-credentials token endpoint or a command.

Why a cache: every backend connection authenticates (aiokafka's clients, the raw pass-through
connections, KIP-368 re-authentication), and asking the identity provider each time would load
it and slow every reconnect. A token is fetched once and reused until a fraction of its lifetime
has passed — Kafka's ``sasl.login.refresh.window.factor`` (default 0.8) — so every connection
authenticates with a token that still has a fifth of its life, and the broker's session (which
ends when the token expires) is never shorter than that. A failed refresh keeps the current
token until it expires (logged), as Kafka's login refresh does.

The client-credentials request is OAuth 2 (RFC 6749 4.4) as Kafka's own client sends it
(KIP-768): ``POST grant_type=client_credentials[&scope=...]`` with HTTP Basic authentication of
the url-encoded client id and secret; the answer's ``access_token`` is the token and its
``expires_in`` (else the JWT's ``exp`` claim) the lifetime. The client secret and tokens are
kept out of ``repr`` and of every error message.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import shlex
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from aiokafka.abc import AbstractTokenProvider

from .errors import SaslError

log = logging.getLogger("kshare.oauth")

#: lifetime assumed when neither ``expires_in`` nor a JWT ``exp`` says (Kafka's clients require
#: one; a token without is used for this long)
DEFAULT_LIFETIME_S = 300.0


class OAuthTokenError(SaslError):
    """No token could be obtained (endpoint refused, unreachable, bad answer; command failed)."""


class CachedToken(AbstractTokenProvider):
    """An aiokafka token provider: ``fetch() -> (token, lifetime_s)`` runs in a thread, at most
    once at a time, and its token is reused until ``refresh_factor`` of the lifetime has passed.

    ``clock`` is injectable for tests. ``fetches`` counts calls to the source (metrics, tests).
    """

    def __init__(self, fetch: Callable[[], tuple[str, float]], *, describe: str,
                 refresh_factor: float = 0.8, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch, self.describe_source = fetch, describe
        self.refresh_factor, self._clock = refresh_factor, clock
        self._token: str | None = None
        self._refresh_at = self._expires_at = 0.0
        self._lock: asyncio.Lock | None = None
        self.fetches = 0

    async def token(self) -> str:
        if self._token is not None and self._clock() < self._refresh_at:
            return self._token
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._token is None or self._clock() >= self._refresh_at:
                self.fetches += 1
                try:
                    token, lifetime = await asyncio.to_thread(self._fetch)
                except OAuthTokenError as exc:
                    # as Kafka's refresh thread: a failed refresh keeps the current token while it
                    # is valid (an identity provider's blip must not break reconnects); the next
                    # authentication tries again
                    if self._token is None or self._clock() >= self._expires_at:
                        raise
                    log.warning("OAUTHBEARER token refresh failed, the current token is used until it expires "
                                "in %.0f s: %s", self._expires_at - self._clock(), exc)
                    return self._token
                now = self._clock()
                self._token = token
                self._refresh_at = now + max(0.0, lifetime) * self.refresh_factor
                self._expires_at = now + max(0.0, lifetime)
            return self._token

    def __repr__(self) -> str:
        return f"CachedToken({self.describe_source})"


def jwt_lifetime(token: str, now: float | None = None) -> float | None:
    """Seconds until the JWT's ``exp`` claim, or ``None`` if it is not a JWT with one."""
    try:
        body = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        return float(claims["exp"]) - (time.time() if now is None else now)
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def client_credentials(url: str, client_id: str, client_secret: str, scope: str = "",
                       timeout_s: float = 10.0) -> Callable[[], tuple[str, float]]:
    """A fetch function for :class:`CachedToken`: one client-credentials grant at ``url``."""
    def fetch() -> tuple[str, float]:
        form = {"grant_type": "client_credentials"}
        if scope:
            form["scope"] = scope
        basic = base64.b64encode(f"{urllib.parse.quote(client_id)}:{urllib.parse.quote(client_secret)}"
                                 .encode()).decode()
        request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), method="POST", headers={
            "Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json"})
        where = f"token endpoint {url} (client {client_id!r})"
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - configured URL
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise OAuthTokenError(f"{where} refused the client credentials: HTTP {exc.code} {_oauth_error(exc)}") \
                from None
        except (urllib.error.URLError, OSError) as exc:
            raise OAuthTokenError(f"{where} cannot be reached: {getattr(exc, 'reason', exc)}") from None
        except ValueError:
            raise OAuthTokenError(f"{where} did not answer JSON") from None
        token = answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            raise OAuthTokenError(f"{where} answered without an access_token")
        return token, _lifetime(token, answer.get("expires_in"))
    return fetch


def token_command(command: str, timeout_s: float = 30.0) -> Callable[[], tuple[str, float]]:
    """A fetch function for :class:`CachedToken`: the token is the command's standard output
    (run without a shell); its lifetime is the JWT's ``exp`` claim."""
    argv = shlex.split(command)

    def fetch() -> tuple[str, float]:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise OAuthTokenError(f"token command {argv[0]!r} did not run: {exc}") from None
        token = done.stdout.strip()
        if done.returncode != 0 or not token:
            # its stderr may help, its stdout may be a token: only the last stderr line is shown
            last = (done.stderr.strip().splitlines() or [""])[-1][:200]
            raise OAuthTokenError(f"token command {argv[0]!r} failed (exit {done.returncode}, "
                             f"{'no output' if not token else 'output withheld'}): {last}")
        return token, _lifetime(token, None)
    return fetch


def _lifetime(token: str, expires_in: object) -> float:
    if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool) and expires_in > 0:
        return float(expires_in)
    lifetime = jwt_lifetime(token)
    return lifetime if lifetime is not None else DEFAULT_LIFETIME_S


def _oauth_error(exc: urllib.error.HTTPError) -> str:
    """The RFC 6749 5.2 ``error`` (and description) of a refusal — never the request."""
    try:
        body = json.loads(exc.read() or b"{}")
        return " ".join(str(body[k]) for k in ("error", "error_description") if k in body)[:300]
    except (ValueError, OSError, TypeError):
        return exc.reason if isinstance(exc.reason, str) else ""
