"""TLS and SASL options of the asyncio share consumer, under aiokafka's names.

Why aiokafka's names (``security_protocol``, ``ssl_context``, ``sasl_mechanism``,
``sasl_plain_username``, ``sasl_plain_password``, ``sasl_oauth_token_provider``): the consumer
is shaped like aiokafka's, so a service already configured for aiokafka passes the same keyword
arguments. Underneath they become the sidecar's own
:class:`~kshare_sidecar.backend.security.BackendSecurity`, which ``BrokerConn`` already uses for
every secured backend connection (TLS handshake, then SaslHandshake/SaslAuthenticate with
aiokafka's PLAIN / SCRAM / OAUTHBEARER authenticators) — one tested implementation for both.

Pure: validation and construction only, no I/O. Bad values raise ``ValueError`` naming the
parameter and the allowed values; the password is never part of a message or a ``repr``.
"""

from __future__ import annotations

import ssl
from typing import Any

from kshare_sidecar.backend.security import BackendSecurity
from kshare_sidecar.protocol.constants import SASL_MECHANISMS as MECHANISMS
from kshare_sidecar.protocol.constants import SECURITY_PROTOCOLS as PROTOCOLS


def client_security(security_protocol: str = "PLAINTEXT", ssl_context: ssl.SSLContext | None = None,
                    sasl_mechanism: str | None = None, sasl_plain_username: str | None = None,
                    sasl_plain_password: str | None = None,
                    sasl_oauth_token_provider: Any = None) -> BackendSecurity | None:
    """The connection security for these options (``None``: plain TCP, nothing to do).

    - ``SSL`` / ``SASL_SSL`` without ``ssl_context`` use ``ssl.create_default_context()`` (the
      system's CAs, host name checked); pass a context for a private CA or a client certificate
      (mTLS: ``context.load_cert_chain(cert, key)``).
    - ``SASL_*`` needs ``sasl_mechanism`` (default PLAIN, as aiokafka's): PLAIN and SCRAM-SHA-256/512
      take ``sasl_plain_username``/``sasl_plain_password``; OAUTHBEARER takes
      ``sasl_oauth_token_provider`` (an object with ``async token() -> str``, aiokafka's
      ``AbstractTokenProvider`` shape).
    """
    protocol = str(security_protocol).upper()
    if protocol not in PROTOCOLS:
        raise ValueError(f"security_protocol={security_protocol!r}: allowed values are {', '.join(PROTOCOLS)}")
    tls = protocol in ("SSL", "SASL_SSL")
    if ssl_context is not None and not tls:
        raise ValueError(f"ssl_context is only used with security_protocol SSL or SASL_SSL (got {protocol}): "
                         "set security_protocol, or the connection would silently stay unencrypted")
    if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
        raise ValueError(f"ssl_context must be an ssl.SSLContext, not {type(ssl_context).__name__}")
    context = (ssl_context or ssl.create_default_context()) if tls else None
    if not protocol.startswith("SASL_"):
        extra = [name for name, value in (("sasl_mechanism", sasl_mechanism),
                                          ("sasl_plain_username", sasl_plain_username),
                                          ("sasl_plain_password", sasl_plain_password),
                                          ("sasl_oauth_token_provider", sasl_oauth_token_provider))
                 if value is not None]
        if extra:
            raise ValueError(f"{', '.join(extra)} given but security_protocol={protocol} does not use SASL "
                             "(use SASL_PLAINTEXT or SASL_SSL)")
        return None if protocol == "PLAINTEXT" else BackendSecurity(protocol=protocol, ssl_context=context)
    mechanism = str(sasl_mechanism or "PLAIN").upper()
    if mechanism not in MECHANISMS:
        raise ValueError(f"sasl_mechanism={sasl_mechanism!r}: allowed values are {', '.join(MECHANISMS)}")
    if mechanism == "OAUTHBEARER":
        if sasl_oauth_token_provider is None or not callable(getattr(sasl_oauth_token_provider, "token", None)):
            raise ValueError("sasl_mechanism=OAUTHBEARER needs sasl_oauth_token_provider "
                             "(an object with an async token() method)")
        return BackendSecurity(protocol=protocol, mechanism=mechanism, ssl_context=context,
                               token_provider=sasl_oauth_token_provider)
    if not sasl_plain_username or not sasl_plain_password:
        raise ValueError(f"sasl_mechanism={mechanism} needs sasl_plain_username and sasl_plain_password")
    return BackendSecurity(protocol=protocol, mechanism=mechanism, username=sasl_plain_username,
                           password=sasl_plain_password, ssl_context=context)
