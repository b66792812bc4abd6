"""The ``delegate`` authenticator: the backend checks a client's PLAIN credentials.

The sidecar keeps no user database: it opens a connection to a backend broker and authenticates
*as the client* (the backend's SASL mechanism from ``backend.sasl.mechanism`` — PLAIN or SCRAM —
with the client's user name and password, over ``backend.security.protocol`` and its TLS
settings). The backend's SASL_AUTHENTICATION_FAILED means a wrong password; a backend that cannot
be reached means "could not verify". SCRAM towards the sidecar cannot be delegated: the sidecar
would need the password (or the backend's stored keys) to answer it, so ``delegate`` serves
PLAIN only — run such a listener as SASL_SSL, the password travels to the sidecar in the clear.

Each authentication opens and closes one backend connection (clients authenticate once per
connection; there is no credential cache, so a password changed on the backend applies to the
next connection at once).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ..config import ConfigError
from ..log.brokerconn import BrokerAuthError, BrokerConn, BrokerConnError
from ..log.security import BackendSecurity
from ..protocol.address import parse_bootstrap
from .authenticators import CredentialsUnavailable
from .scram import ScramCredential

log = logging.getLogger("kshare.auth")


class DelegateAuthenticator:
    mechanisms = frozenset({"PLAIN"})

    def __init__(self, bootstrap_servers: str, security: BackendSecurity, *, timeout_s: float = 10.0) -> None:
        if not security.sasl:
            raise ConfigError(f"sasl.authenticator = 'delegate' needs a SASL backend: backend.security.protocol is "
                              f"{security.protocol}, allowed values SASL_PLAINTEXT, SASL_SSL")
        mechanism = security.mechanism if security.mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") else "PLAIN"
        self._template = dataclasses.replace(security, mechanism=mechanism, username=None, password=None,
                                             token_file=None)
        self._servers = parse_bootstrap(bootstrap_servers)
        self._timeout = timeout_s

    def __repr__(self) -> str:
        return f"DelegateAuthenticator({self._template.protocol} {self._template.mechanism})"

    async def verify_plain(self, username: str, password: str) -> bool:
        security = dataclasses.replace(self._template, username=username, password=password)
        problems = []
        for host, port in self._servers:
            conn = BrokerConn(host, port, security=security, connect_timeout_s=self._timeout)
            try:
                await conn.connect()
                return True
            except BrokerAuthError:
                return False
            except BrokerConnError as exc:
                problems.append(str(exc))
            finally:
                await conn.close()
        raise CredentialsUnavailable("no backend broker could check the credentials: " + "; ".join(problems))

    async def scram_credential(self, mechanism: str, username: str) -> ScramCredential | None:
        return None  # not offered: sasl.enabled.mechanisms is checked against `mechanisms`

    async def close(self) -> None:
        return None


def delegate_authenticator(*, config: Any, backend_security: BackendSecurity, **_: Any) -> DelegateAuthenticator:
    return DelegateAuthenticator(config["bootstrap.servers"], backend_security)
