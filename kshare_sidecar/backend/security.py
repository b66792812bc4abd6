"""How the sidecar authenticates to a secured backend: TLS and SASL for every backend connection.

One :class:`BackendSecurity` is built from the ``backend.*`` settings (Kafka's own client names
under a prefix: ``backend.security.protocol``, ``backend.sasl.mechanism``,
``backend.sasl.jaas.config``, ``backend.ssl.truststore.location`` ...) and handed to every backend
client: aiokafka's (reads, state writers, admin — :meth:`aiokafka_options`) and the raw
pass-through connections (:meth:`sasl_authenticator`, :attr:`ssl_context`).

Secrets (passwords, key passwords, tokens) come from the environment or from files, are kept
out of ``repr`` and are never logged; a token file is re-read at every authentication so a
rotating token keeps working.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiokafka.abc import AbstractTokenProvider

from ..config import ConfigError
from ..protocol.constants import SCRAM_MECHANISMS
from . import oauth

if TYPE_CHECKING:
    from ..config import SidecarConfig
    from ..config.sections import BackendSettings

_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


class SecurityConfigError(ConfigError):
    """A ``backend.*`` security setting is missing or inconsistent; the message names the key."""


@dataclass(frozen=True)
class BackendSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token_file: str | None = None
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    #: OAUTHBEARER: an object with ``async token() -> str`` (aiokafka's AbstractTokenProvider
    #: shape) used instead of ``token_file`` (the asyncio client's ``sasl_oauth_token_provider``)
    token_provider: Any = field(default=None, repr=False, compare=False)
    #: SCRAM with credentials fetched at every authentication: an object with ``async
    #: credentials() -> (username, password)`` and a ``describe`` string, used instead of
    #: ``username``/``password`` (pass-through as a client's principal: a delegation token's id and
    #: HMAC, ``passthrough/tokens.py``). With ``token_auth`` the client-first message carries Kafka's
    #: ``tokenauth=true`` extension (KIP-48).
    credential_source: Any = field(default=None, repr=False, compare=False)
    token_auth: bool = False

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    # -- from settings ---------------------------------------------------------------------------
    @classmethod
    def from_config(cls, cfg: SidecarConfig) -> BackendSecurity:
        """Build from a :class:`~kshare_sidecar.config.SidecarConfig` (raises naming the key)."""
        return cls.from_settings(cfg.backend)

    @classmethod
    def from_settings(cls, backend: BackendSettings) -> BackendSecurity:
        """Build from the ``backend.*`` section of the config (raises naming the key)."""
        protocol = backend.security_protocol
        context = _ssl_context(backend) if protocol in ("SSL", "SASL_SSL") else None
        if not protocol.startswith("SASL_"):
            return cls(protocol=protocol, ssl_context=context)
        mechanism = backend.sasl_mechanism
        if mechanism == "OAUTHBEARER":
            return cls(protocol=protocol, mechanism=mechanism, ssl_context=context, **_oauth_source(backend))
        username, password = _credentials(backend)
        return cls(protocol=protocol, mechanism=mechanism, username=username, password=password,
                   ssl_context=context)

    # -- for aiokafka clients -------------------------------------------------------------------------
    def aiokafka_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.ssl_context is not None:
            options["ssl_context"] = self.ssl_context
        if self.sasl:
            options["sasl_mechanism"] = self.mechanism
            if self.mechanism == "OAUTHBEARER":
                options["sasl_oauth_token_provider"] = self._token_provider()
            else:
                options["sasl_plain_username"] = self.username
                options["sasl_plain_password"] = self.password
        return options

    # -- for raw connections (backend/brokerconn.py) ----------------------------------------------------
    def sasl_authenticator(self) -> Any:
        """A fresh aiokafka SASL authenticator: ``await step(server_token)`` → ``(token, expects
        answer)`` or ``None`` when done. aiokafka's (a chosen library) implements PLAIN, SCRAM and
        OAUTHBEARER; only the exchange around it (SaslHandshake/SaslAuthenticate) is ours."""
        from aiokafka.conn import OAuthAuthenticator, SaslPlainAuthenticator, ScramAuthenticator

        loop = asyncio.get_running_loop()
        if self.mechanism == "PLAIN":
            return SaslPlainAuthenticator(loop=loop, sasl_plain_username=self.username,
                                          sasl_plain_password=self.password)
        if self.mechanism in SCRAM_MECHANISMS:
            return ScramAuthenticator(loop=loop, sasl_plain_username=self.username,
                                      sasl_plain_password=self.password, sasl_mechanism=self.mechanism)
        return OAuthAuthenticator(sasl_oauth_token_provider=self._token_provider())

    def _token_provider(self) -> Any:
        return self.token_provider if self.token_provider is not None else TokenFile(self.token_file or "")

    def describe(self) -> str:
        """For log lines: protocol, mechanism and user — never a secret."""
        parts = [self.protocol]
        if self.sasl and self.credential_source is not None:
            parts.append(f"{self.mechanism} with {getattr(self.credential_source, 'describe', 'fetched credentials')}")
        elif self.sasl:
            parts.append(f"{self.mechanism}" + (f" as {self.username!r}" if self.username else ""))
        return " ".join(parts)


class TokenFile(AbstractTokenProvider):
    """An OAUTHBEARER token provider reading a file (re-read each time: tokens rotate). An
    ``AbstractTokenProvider``: aiokafka's clients refuse any other (isinstance check)."""

    def __init__(self, path: str) -> None:
        self.path = path

    async def token(self) -> str:
        return _read_secret(self.path, "backend.sasl.oauthbearer.token.file")

    def __repr__(self) -> str:
        return f"TokenFile({self.path!r})"


_TOKEN_SOURCES = ("backend.sasl.oauthbearer.token.file", "backend.sasl.oauthbearer.token.endpoint.url",
                  "backend.sasl.oauthbearer.token.command")


def _oauth_source(backend: BackendSettings) -> dict[str, Any]:
    """Exactly one OAUTHBEARER token source: a file, a client-credentials endpoint or a command."""
    given = dict(zip(_TOKEN_SOURCES, (backend.sasl_oauthbearer_token_file,
                                      backend.sasl_oauthbearer_token_endpoint_url,
                                      backend.sasl_oauthbearer_token_command), strict=True))
    chosen = [key for key in _TOKEN_SOURCES if given[key]]
    if len(chosen) != 1:
        raise SecurityConfigError(f"backend.sasl.mechanism=OAUTHBEARER needs exactly one of {', '.join(_TOKEN_SOURCES)}"
                                  + (f" (set: {', '.join(chosen)})" if chosen else ""))
    factor = backend.sasl_login_refresh_window_factor
    if chosen[0] == "backend.sasl.oauthbearer.token.file":
        _read_secret(given[chosen[0]], chosen[0])
        return {"token_file": given[chosen[0]]}
    if chosen[0] == "backend.sasl.oauthbearer.token.command":
        command = given[chosen[0]]
        return {"token_provider": oauth.CachedToken(oauth.token_command(command), refresh_factor=factor,
                                              describe=f"token command {command.split()[0]!r}")}
    url = given[chosen[0]]
    if not url.startswith(("https://", "http://")):
        raise SecurityConfigError(f"{chosen[0]} = {url!r}: expected an http(s):// URL")
    # Kafka 3.x put these in the JAAS line (clientId, clientSecret, scope); Kafka 4.1+'s settings win
    jaas = dict(_JAAS_OPTION.findall(backend.sasl_jaas_config))
    client_id = backend.sasl_oauthbearer_client_id or jaas.get("clientId", "")
    secret = backend.sasl_oauthbearer_client_secret
    secret_file = backend.sasl_oauthbearer_client_secret_file
    if secret and secret_file:
        raise SecurityConfigError("set either backend.sasl.oauthbearer.client.credentials.client.secret or "
                                  "backend.sasl.oauthbearer.client.credentials.client.secret.file, not both")
    if secret_file:
        secret = _read_secret(secret_file, "backend.sasl.oauthbearer.client.credentials.client.secret.file")
    secret = secret or jaas.get("clientSecret", "")
    scope = backend.sasl_oauthbearer_scope or jaas.get("scope", "")
    if not client_id or not secret:
        raise SecurityConfigError(f"{chosen[0]} needs backend.sasl.oauthbearer.client.credentials.client.id and "
                                  "backend.sasl.oauthbearer.client.credentials.client.secret (or .secret.file; "
                                  'or clientId="..." clientSecret="..." in backend.sasl.jaas.config)')
    fetch = oauth.client_credentials(url, client_id, secret, scope)
    return {"token_provider": oauth.CachedToken(fetch, refresh_factor=factor,
                                          describe=f"token endpoint {url} as {client_id!r}")}


def _credentials(backend: BackendSettings) -> tuple[str, str]:
    jaas = backend.sasl_jaas_config
    username, password = backend.sasl_username, backend.sasl_password
    password_file = backend.sasl_password_file
    if jaas:
        if username or password or password_file:
            raise SecurityConfigError("set either backend.sasl.jaas.config or backend.sasl.username/"
                                      "backend.sasl.password(.file), not both")
        options = dict(_JAAS_OPTION.findall(jaas))
        username, password = options.get("username", ""), options.get("password", "")
        if not username or not password:
            raise SecurityConfigError('backend.sasl.jaas.config must set username="..." and password="..." '
                                      "(e.g. org.apache.kafka.common.security.scram.ScramLoginModule required "
                                      'username="alice" password="...";)')
        return username, password
    if password and password_file:
        raise SecurityConfigError("set either backend.sasl.password or backend.sasl.password.file, not both")
    if password_file:
        password = _read_secret(password_file, "backend.sasl.password.file")
    if not username or not password:
        raise SecurityConfigError("SASL needs credentials: backend.sasl.username and backend.sasl.password "
                                  "(or backend.sasl.password.file, or backend.sasl.jaas.config)")
    return username, password


def _read_secret(path: str, key: str) -> str:
    try:
        value = Path(path).read_text().strip()
    except OSError as exc:
        raise SecurityConfigError(f"{key} = {path!r}: cannot read it: {exc.strerror}") from None
    if not value:
        raise SecurityConfigError(f"{key} = {path!r}: the file is empty")
    return value


def _ssl_context(backend: BackendSettings) -> ssl.SSLContext:
    """Kafka's PEM truststore/keystore settings as an ``ssl.SSLContext``."""
    truststore = backend.ssl_truststore_location
    try:
        context = ssl.create_default_context(cafile=truststore or None)
    except (OSError, ssl.SSLError) as exc:
        raise SecurityConfigError(f"backend.ssl.truststore.location = {truststore!r}: not a readable PEM CA "
                                  f"file ({exc})") from None
    context.check_hostname = backend.ssl_endpoint_identification_algorithm == "https"
    keystore = backend.ssl_keystore_location
    if keystore:
        key_password = backend.ssl_key_password or None
        try:
            context.load_cert_chain(keystore, password=key_password)
        except (OSError, ssl.SSLError) as exc:
            raise SecurityConfigError(f"backend.ssl.keystore.location = {keystore!r}: not a PEM file with the "
                                      f"client certificate chain and key, or wrong backend.ssl.key.password "
                                      f"({type(exc).__name__})") from None
    return context
