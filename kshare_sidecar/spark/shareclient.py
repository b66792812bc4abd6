"""Which client the driver's share consumer is, and its ``kafka.share.*`` settings for it.

The default driver client is the project's asyncio share consumer in offsets-only mode
(``acquire_ranges.py``): it never decodes the records the driver only needs the offsets of, and it
sends the previous batch's acknowledgements on the ShareFetch that acquires the next batch —
a profile put the driver's ``latestOffset`` (librdkafka: acknowledge, ``commit_sync``,
then a poll that decodes 20k records) at 53-74 ms a batch, the largest gap to Spark's own Kafka
source. The user's settings are written in librdkafka's names (they are validated by librdkafka
at ``load()``, ``clientconf.py``), so this module translates the ones the asyncio client has an
equivalent for. Any other setting keeps librdkafka's ``ShareConsumer`` as the driver client
(``shareClient=auto``, logged once), or is refused (``shareClient=kshare``): a setting is never
silently dropped, except the few below that only tune librdkafka's own logging.

Pure: no I/O but reading the TLS files a setting names when the context is built.
"""

from __future__ import annotations

import ssl
from typing import Any

from .options import OptionError, SourceOptions

def _bool(value: str) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


#: librdkafka name -> (asyncio ShareConsumer keyword, converter)
_DIRECT: dict[str, tuple[str, Any]] = {
    "client.id": ("client_id", str),
    "security.protocol": ("security_protocol", lambda v: str(v).upper()),
    "sasl.mechanism": ("sasl_mechanism", lambda v: str(v).upper()),
    "sasl.mechanisms": ("sasl_mechanism", lambda v: str(v).upper()),
    "sasl.username": ("sasl_plain_username", str),
    "sasl.password": ("sasl_plain_password", str),
    "fetch.wait.max.ms": ("fetch_max_wait_ms", int),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "socket.timeout.ms": ("request_timeout_ms", int),
    "check.crcs": ("check_crcs", _bool),
}
#: TLS settings: they become one ``ssl.SSLContext``.
_TLS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
        "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification")
#: librdkafka's own diagnostics: nothing to translate, nothing lost.
_IGNORED = ("statistics.interval.ms", "debug", "log_level", "log.connection.close")
#: mechanisms the asyncio client speaks (librdkafka's default, GSSAPI, is not one of them)
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def untranslatable(opts: SourceOptions) -> list[str]:
    """The options (as the user wrote them) the asyncio client has no equivalent for."""
    settings = opts.share_settings()
    out = [s.option for name, s in settings.items() if name not in _DIRECT and name not in _TLS
           and name not in _IGNORED]
    protocol = str(settings["security.protocol"].value).upper() if "security.protocol" in settings else "PLAINTEXT"
    mech = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")
    if protocol.startswith("SASL_") and (mech is None or str(mech.value).upper() not in _MECHANISMS):
        # librdkafka's default mechanism is GSSAPI (Kerberos); OAUTHBEARER needs librdkafka's token setup
        out.append(mech.option if mech is not None else "kafka.sasl.mechanism (librdkafka's default GSSAPI)")
    return out


def driver_client(opts: SourceOptions) -> tuple[str, str]:
    """``("kshare" | "librdkafka", why)`` for the driver's share consumer; raises
    :class:`OptionError` when ``shareClient=kshare`` meets a setting it cannot honour."""
    missing = untranslatable(opts)
    if opts.client_choice == "librdkafka":
        return "librdkafka", "shareClient=librdkafka"
    if not missing:
        return "kshare", f"shareClient={opts.client_choice}"
    listed = ", ".join(f"'{m}'" for m in missing)
    if opts.client_choice == "kshare":
        raise OptionError(f"option 'shareClient' is 'kshare' but the asyncio share consumer has no equivalent for "
                          f"{listed}; remove it or use shareClient=librdkafka (or auto)")
    return "librdkafka", f"shareClient=auto and no asyncio-client equivalent for {listed}"


def asyncio_kwargs(opts: SourceOptions) -> dict[str, Any]:
    """Keyword arguments of :class:`kshare_sidecar.client.ShareConsumer` for the driver's settings."""
    settings = {name: s.value for name, s in opts.share_settings().items()}
    out: dict[str, Any] = {}
    for name, (keyword, convert) in _DIRECT.items():
        if name in settings:
            try:
                out[keyword] = convert(settings[name])
            except ValueError as exc:
                raise OptionError(f"option '{opts.share_settings()[name].option}': {exc}") from None
    if out.get("security_protocol") in ("SSL", "SASL_SSL"):
        out["ssl_context"] = tls_context(settings)
    return out


def tls_context(settings: dict[str, str]) -> ssl.SSLContext:
    """librdkafka's TLS settings as an ``SSLContext`` (its defaults: verify, check the host name)."""
    ctx = ssl.create_default_context(cafile=settings.get("ssl.ca.location") or None)
    if settings.get("ssl.endpoint.identification.algorithm", "https").strip().lower() == "none":
        ctx.check_hostname = False
    if not _bool(settings.get("enable.ssl.certificate.verification", "true")):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    cert = settings.get("ssl.certificate.location")
    if cert:
        ctx.load_cert_chain(cert, settings.get("ssl.key.location") or None, settings.get("ssl.key.password") or None)
    return ctx
