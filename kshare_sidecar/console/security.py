"""Who is asking, and whether a change may be made: the console's authentication, sessions,
CSRF defence and response headers.

- **Authentication** follows the Kafka listeners: when a listener requires it (SASL, or SSL with
  ``ssl.client.auth=required``; ``console.authentication=auto``) so does the console, with the
  same users — HTTP Basic checked by the listeners' SASL authenticator (``auth/``, PLAIN's
  check: static file, or the backend through ``delegate``), or a client certificate (mTLS, the
  principal ``User:<subject DN>`` as on an SSL listener). Basic needs HTTPS off loopback.
- **ACLs**: the principal's decisions come from the same authorizer as the Kafka APIs'
  (``auth/authorizer.py``); each action asks what its Kafka API asks (actions.py).
- **CSRF**: a change is a POST that carries the session's token (a form field or the
  ``X-Kshare-Csrf`` header) and an ``Origin`` (or ``Referer``) of the console itself; the
  session cookie is ``HttpOnly; SameSite=Strict``.
- **Unauthenticated consoles** bind loopback only (unless told otherwise) and answer only
  requests whose ``Host`` is that address, so a page elsewhere cannot reach it by DNS rebinding.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import secrets
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..auth.authenticators import CredentialsUnavailable
from ..auth.principal import tls_principal
from ..config import ConfigError, SidecarConfig

ANONYMOUS = "User:ANONYMOUS"
COOKIE = "kshare_console"
CSRF_HEADER = "X-Kshare-Csrf"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
           "Referrer-Policy": "same-origin", "Cache-Control": "no-store"}
#: A verified Basic credential is trusted again for this long (a page polls every few seconds;
#: PBKDF2 or a round trip to the backend per request would be waste).
CREDENTIAL_CACHE_S = 60.0
SESSION_IDLE_S = 12 * 3600
MAX_SESSIONS = 1000


class Refused(Exception):
    """Answer with this HTTP status and one line (``basic``: ask the browser for credentials)."""

    def __init__(self, status: int, message: str, *, basic: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.basic = status, message, basic


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listeners_require_authentication(cfg: SidecarConfig) -> bool:
    return any(spec.sasl or (spec.protocol == "SSL" and cfg.listener_security.ssl_client_auth == "required")
               for spec in cfg.listener_specs())


@dataclass(frozen=True)
class Plan:
    """How the console authenticates, decided once from the configuration."""

    host: str
    port: int
    required: bool
    basic: bool
    mtls: bool
    tls: bool


def plan(cfg: SidecarConfig, authenticator: Any) -> Plan:
    """Raises ConfigError (one line naming the key) for a console that would be unsafe or unusable."""
    c = cfg.console
    host, _, port = c.listen.rpartition(":")
    host = host.strip("[]")
    required = c.authentication == "required" or (c.authentication == "auto" and listeners_require_authentication(cfg))
    mtls = c.ssl_enable and c.ssl_client_auth != "none"
    basic = required and authenticator is not None and hasattr(authenticator, "verify_plain")
    if c.ssl_client_auth != "none" and not c.ssl_enable:
        raise ConfigError(f"console.ssl.client.auth = {c.ssl_client_auth!r} needs console.ssl.enable = true")
    if required and not basic and not mtls:
        raise ConfigError("console.authentication: the console must authenticate but has no way to: no listener "
                          "has SASL users (sasl.authenticator) for HTTP Basic; set console.ssl.enable = true and "
                          "console.ssl.client.auth = required for client certificates")
    if basic and not c.ssl_enable and not is_loopback(host):
        raise ConfigError(f"console.listen = {c.listen!r}: HTTP Basic authentication off loopback needs "
                          f"console.ssl.enable = true (passwords never cross a network in clear)")
    if not required and not is_loopback(host) and not c.allow_remote_unauthenticated:
        raise ConfigError(f"console.listen = {c.listen!r}: a console without authentication binds a loopback "
                          f"address only (127.0.0.1, ::1); set console.authentication = required, or "
                          f"console.allow.remote.unauthenticated = true")
    return Plan(host, int(port), required, basic, mtls, c.ssl_enable)


def ssl_context(cfg: SidecarConfig) -> ssl.SSLContext:
    """HTTPS with the listeners' keystore; client certificates per console.ssl.client.auth."""
    sec = cfg.listener_security
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(sec.ssl_keystore_location, password=sec.ssl_key_password or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"console.ssl.enable = true needs ssl.keystore.location = {sec.ssl_keystore_location!r} "
                          f"to be a PEM file with the certificate chain and key ({type(exc).__name__})") from None
    if cfg.console.ssl_client_auth != "none":
        try:
            context.load_verify_locations(cafile=sec.ssl_truststore_location or None)
        except (OSError, ssl.SSLError, TypeError) as exc:
            raise ConfigError(f"console.ssl.client.auth = {cfg.console.ssl_client_auth!r} needs "
                              f"ssl.truststore.location: a readable PEM CA file ({type(exc).__name__})") from None
        context.verify_mode = ssl.CERT_REQUIRED if cfg.console.ssl_client_auth == "required" else ssl.CERT_OPTIONAL
    return context


@dataclass
class Identity:
    principal: str
    protocol: str  # as the authorizer knows listeners: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    host: str


@dataclass
class Session:
    principal: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    used: float = field(default_factory=time.monotonic)
    flash: list[tuple[str, str]] = field(default_factory=list)  # (kind, line) shown once


class Guard:
    """Authentication, sessions and the CSRF rule for one console (see the module docstring)."""

    def __init__(self, plan: Plan, authenticator: Any) -> None:
        self.plan = plan
        self.authenticator = authenticator
        self._key = secrets.token_bytes(32)
        self._verified: dict[bytes, float] = {}
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = asyncio.Lock()

    # -- who ---------------------------------------------------------------------------------
    async def identify(self, headers: Any, peercert: dict | None, remote: str) -> Identity:
        tls = self.plan.tls
        if self.plan.mtls and peercert:
            return Identity(tls_principal(peercert), "SSL", remote)
        auth = headers.get("Authorization", "")
        if self.plan.basic and auth[:6].lower() == "basic ":
            user = await self._basic(auth[6:].strip())
            return Identity(f"User:{user}", "SASL_SSL" if tls else "SASL_PLAINTEXT", remote)
        if self.plan.required:
            if self.plan.basic:
                raise Refused(401, "authentication required: the sidecar's users, with HTTP Basic", basic=True)
            raise Refused(403, "a client certificate signed by ssl.truststore.location is required")
        return Identity(ANONYMOUS, "SSL" if tls else "PLAINTEXT", remote)

    async def _basic(self, token: str) -> str:
        try:
            user, sep, password = base64.b64decode(token, validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            raise Refused(401, "malformed Basic credentials", basic=True) from None
        if not sep or not user or not password:
            raise Refused(401, "Basic credentials need a user and a password", basic=True)
        digest = hmac.new(self._key, f"{user}\0{password}".encode(), hashlib.sha256).digest()
        now = time.monotonic()
        if self._verified.get(digest, 0.0) > now:
            return user
        try:
            ok = await self.authenticator.verify_plain(user, password)
        except CredentialsUnavailable as exc:  # the store (or the backend) cannot check now
            raise Refused(503, f"credentials could not be verified now: {type(exc).__name__}") from None
        if not ok:
            raise Refused(401, "wrong user name or password", basic=True)
        if len(self._verified) > 10_000:
            self._verified = {k: v for k, v in self._verified.items() if v > now}
        self._verified[digest] = now + CREDENTIAL_CACHE_S
        return user

    def check_host(self, host_header: str) -> None:
        """An unauthenticated console answers only requests addressed to it (no DNS rebinding)."""
        if self.plan.required or not is_loopback(self.plan.host):
            return
        host = urlsplit(f"//{host_header}").hostname or ""
        if not is_loopback(host):
            raise Refused(421, f"this console answers requests for its loopback address only, not {host_header!r}")

    # -- sessions and CSRF -------------------------------------------------------------------
    def session(self, cookie: str | None, principal: str) -> tuple[str, Session]:
        """The caller's session (a new one when the cookie is unknown or someone else's)."""
        now = time.monotonic()
        s = self.sessions.get(cookie or "")
        if s is not None and s.principal == principal and now - s.used < SESSION_IDLE_S:
            s.used = now
            self.sessions.move_to_end(cookie or "")
            return cookie or "", s
        sid = secrets.token_urlsafe(24)
        s = self.sessions[sid] = Session(principal)
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        return sid, s

    def check_change(self, *, session: Session, token: str | None, origin: str | None, referer: str | None,
                     scheme: str, host: str) -> None:
        """A POST may change something only with the session's token, sent from the console's own pages."""
        own = f"{scheme}://{host}".lower()
        seen = origin or (f"{urlsplit(referer).scheme}://{urlsplit(referer).netloc}" if referer else None)
        if not seen or seen.lower() != own:
            raise Refused(403, f"refused: the request did not come from this console's pages (Origin {seen!r})")
        if not token or not hmac.compare_digest(token.encode(), session.csrf.encode()):
            raise Refused(403, "refused: missing or stale form token (reload the page)")

    def cookie_attrs(self) -> dict[str, Any]:
        return {"httponly": True, "samesite": "Strict", "path": "/", "secure": self.plan.tls}
