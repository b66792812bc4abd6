"""Which reader the executors use, and the ``kafka.read.*`` settings of the raw Fetch reader.

The default reader (``readClient=auto``) fetches with the project's own connections and decodes
the record batches into Arrow columns (``fetch.py``, ``decode.py``, ``read.py``). The user's
settings are written in librdkafka's names (librdkafka validates them at ``load()``,
``clientconf.py``), so this module translates the ones the raw reader has an equivalent for,
as ``shareclient.py`` does for the driver. Any other setting keeps librdkafka's plain consumer as
the reader (``readClient=auto``, logged once on the driver), or is refused
(``readClient=kshare``): a setting is never silently dropped, except those below that only tune
librdkafka's own fetch queue or a consumer group the readers never join.

Pure: no I/O but reading the TLS files a setting names when the context is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .options import READER_DEFAULTS, OptionError, SourceOptions
from .shareclient import _IGNORED, _MECHANISMS, _TLS, _bool, tls_context


def _isolation(value: str) -> int:
    text = str(value).strip().lower()
    if text not in ("read_committed", "read_uncommitted"):
        raise ValueError(f"must be read_committed or read_uncommitted, got {value!r}")
    return 1 if text == "read_committed" else 0


#: librdkafka name -> (ReaderConfig field, converter)
_DIRECT: dict[str, tuple[str, Any]] = {
    "client.id": ("client_id", str),
    "security.protocol": ("security_protocol", lambda v: str(v).upper()),
    "sasl.mechanism": ("sasl_mechanism", lambda v: str(v).upper()),
    "sasl.mechanisms": ("sasl_mechanism", lambda v: str(v).upper()),
    "sasl.username": ("sasl_username", str),
    "sasl.password": ("sasl_password", str),
    "isolation.level": ("isolation", _isolation),
    "fetch.wait.max.ms": ("max_wait_ms", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "max.partition.fetch.bytes": ("partition_max_bytes", int),
    "socket.timeout.ms": ("request_timeout_ms", int),
    "check.crcs": ("check_crcs", _bool),
}
#: librdkafka consumer settings with no meaning for a reader that fetches exactly the offsets it
#: reads and never joins a group (``kafka.*`` settings reach the readers too: a session timeout
#: meant for the share consumer must not push the readers onto librdkafka).
_NO_MEANING = ("queued.min.messages", "queued.max.messages.kbytes", "fetch.queue.backoff.ms", "fetch.min.bytes",
               "fetch.error.backoff.ms", "auto.offset.reset", "enable.auto.offset.store", "auto.commit.interval.ms",
               "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms", "group.instance.id",
               "partition.assignment.strategy", "group.protocol", "group.remote.assignor", "retry.backoff.ms",
               "retry.backoff.max.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms")


@dataclass(frozen=True)
class ReaderConfig:
    """The raw reader's settings (hashable: executors keep one ``Fetcher`` per configuration)."""

    servers: str
    client_id: str = "kshare-spark-reader"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    tls: tuple[tuple[str, str], ...] = ()  # librdkafka's TLS settings, for tls_context
    isolation: int = 1  # read_committed: librdkafka's default, which the readers always had
    max_wait_ms: int = 100
    fetch_max_bytes: int = 52_428_800  # librdkafka's fetch.max.bytes
    partition_max_bytes: int = 1_048_576  # librdkafka's max.partition.fetch.bytes: the first fetch's size
    request_timeout_ms: int = 60_000  # librdkafka's socket.timeout.ms
    check_crcs: bool = False  # librdkafka's default

    def security(self) -> Any:
        """The connections' :class:`~kshare_sidecar.backend.security.BackendSecurity` (None: plain TCP)."""
        from ..client.security import client_security

        tls = dict(self.tls)
        context = tls_context(tls) if self.security_protocol in ("SSL", "SASL_SSL") else None
        sasl = self.security_protocol.startswith("SASL_")
        return client_security(self.security_protocol, context, self.sasl_mechanism if sasl else None,
                               self.sasl_username if sasl else None, self.sasl_password if sasl else None)


def untranslatable(opts: SourceOptions) -> list[str]:
    """The options (as the user wrote them) the raw reader has no equivalent for."""
    settings = opts.read_settings()
    out = [s.option for name, s in settings.items()
           if name not in _DIRECT and name not in _TLS and name not in _IGNORED and name not in _NO_MEANING]
    protocol = str(settings["security.protocol"].value).upper() if "security.protocol" in settings else "PLAINTEXT"
    mech = settings.get("sasl.mechanism") or settings.get("sasl.mechanisms")
    if protocol.startswith("SASL_") and (mech is None or str(mech.value).upper() not in _MECHANISMS):
        out.append(mech.option if mech is not None else "kafka.sasl.mechanism (librdkafka's default GSSAPI)")
    return out


def reader_client(opts: SourceOptions) -> tuple[str, str]:
    """``("kshare" | "librdkafka", why)`` for the executors' readers; raises :class:`OptionError`
    when ``readClient=kshare`` meets a setting it cannot honour."""
    if opts.read_choice == "librdkafka":
        return "librdkafka", "readClient=librdkafka"
    missing = untranslatable(opts)
    if not missing:
        return "kshare", f"readClient={opts.read_choice}"
    listed = ", ".join(f"'{m}'" for m in missing)
    if opts.read_choice == "kshare":
        raise OptionError(f"option 'readClient' is 'kshare' but the raw Fetch reader has no equivalent for {listed}; "
                          "remove it or use readClient=librdkafka (or auto)")
    return "librdkafka", f"readClient=auto and no raw-reader equivalent for {listed}"


def reader_config(opts: SourceOptions) -> ReaderConfig:
    """The raw reader's configuration from the ``kafka.read.*`` / ``kafka.*`` settings."""
    settings = opts.read_settings()
    values: dict[str, Any] = {}
    for name, (key, convert) in _DIRECT.items():
        if name in settings:
            try:
                values[key] = convert(settings[name].value)
            except ValueError as exc:
                raise OptionError(f"option '{settings[name].option}': {exc}") from None
    if "fetch.wait.max.ms" not in settings:
        values["max_wait_ms"] = int(str(READER_DEFAULTS["fetch.wait.max.ms"]))
    tls = tuple(sorted((name, str(settings[name].value)) for name in _TLS if name in settings))
    return ReaderConfig(servers=opts.backend, tls=tls, **values)
