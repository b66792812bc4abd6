"""The listeners' TLS context from Kafka's broker settings (PEM files, as the backend side takes).

``ssl.keystore.location``: the server certificate chain and its private key in one PEM file
(``ssl.key.password`` if the key is encrypted); ``ssl.truststore.location``: the CAs that sign
client certificates; ``ssl.client.auth``: none | requested | required (Kafka's values).
"""

from __future__ import annotations

import contextvars
import ssl
from typing import TYPE_CHECKING

from ..config import ConfigError

if TYPE_CHECKING:
    from ..config import SidecarConfig

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
#: OpenSSL's reasons for refusing a client's certificate (an untrusted one; none where one is required)
_CERTIFICATE_REFUSED = frozenset({"CERTIFICATE_VERIFY_FAILED", "PEER_DID_NOT_RETURN_A_CERTIFICATE"})


class AlertFirst(ssl.SSLObject):
    """Lets a refused client certificate reach the client as OpenSSL's TLS alert.

    asyncio's TLS transport closes the socket on a failed handshake without sending what OpenSSL
    queued — the alert (``unknown ca``, ``certificate required``) that tells a client *why*. A
    Kafka broker sends it: librdkafka then reports ``ssl/tls alert certificate unknown``; without
    it only ``1/1 brokers are down``. So a certificate refusal is held back once: the handshake
    reports "want read", asyncio writes the alert, the client reads it and closes (or sends more,
    and the refusal is raised then); the listener's handshake timeout bounds the wait. Other
    failures (a plaintext client) are raised at once, as before. The refusal goes into the list
    in :data:`HANDSHAKE_REFUSALS` of the connection's task (asyncio runs the first handshake step in
    a copy of the context of the task that called ``start_tls``), for the listener's log line.
    """

    handshake_failure: ssl.SSLError | None = None
    _report: list[ssl.SSLError] | None = None

    def do_handshake(self) -> None:
        if self._report is None:
            self._report = HANDSHAKE_REFUSALS.get()
        if self.handshake_failure is not None:
            raise self.handshake_failure
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            if exc.reason not in _CERTIFICATE_REFUSED:
                raise
            self.handshake_failure = exc
            if self._report is not None:
                self._report.append(exc)
            raise ssl.SSLWantReadError("the client's certificate was refused: the alert goes out first") from None


#: the listener's list for :class:`AlertFirst` to put a held-back certificate refusal in
HANDSHAKE_REFUSALS: contextvars.ContextVar[list[ssl.SSLError] | None] = contextvars.ContextVar(
    "kshare_tls_handshake_refusals", default=None)


def server_ssl_context(cfg: SidecarConfig, *, sasl: bool = False) -> ssl.SSLContext:
    """Raises :class:`ConfigError` naming the key whose file is missing or unusable.

    ``sasl``: for SASL_SSL listeners, which do not ask for client certificates — Kafka applies the
    broker-wide ``ssl.client.auth`` to SSL listeners only (KIP-684: mTLS on SASL_SSL takes a
    listener-prefixed setting, which kshare does not have)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    sec = cfg.listener_security
    keystore = sec.ssl_keystore_location
    try:
        context.load_cert_chain(keystore, password=sec.ssl_key_password or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.keystore.location = {keystore!r}: not a PEM file with the server certificate chain "
                          f"and key, or wrong ssl.key.password ({type(exc).__name__})") from None
    truststore = sec.ssl_truststore_location
    if truststore:
        try:
            context.load_verify_locations(cafile=truststore)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"ssl.truststore.location = {truststore!r}: not a readable PEM CA file "
                              f"({type(exc).__name__})") from None
    context.verify_mode = ssl.CERT_NONE if sasl else _VERIFY[sec.ssl_client_auth]
    context.sslobject_class = AlertFirst
    return context
