"""Options of the ``kshare`` streaming source, parsed and validated on the driver before any I/O.

Spark hands a data source a case-insensitive dict whose keys are already lower-cased, so the
messages here name known options in their documented case (``maxRecordsPerTrigger``) and
suggest the closest known name for a typo. Everything in :func:`parse_options` is pure, so the
checks run (and are unit-tested) without a SparkSession or a broker; the librdkafka settings
are checked by :mod:`.clientconf` at ``load()`` too.

Two different Kafka clients take settings: the driver's share consumer and the executors'
plain consumers. ``kafka.<setting>`` goes to both, ``kafka.share.<setting>`` only to the share
consumer and ``kafka.read.<setting>`` only to the readers (a more specific prefix wins), so a
setting that only one of them accepts (``isolation.level``) can still be given.
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import overload

#: Kafka's default acquisition lock (``group.share.record.lock.duration.ms``).
DEFAULT_LOCK_MS = 30_000
DEFAULT_MAX_RECORDS = 10_000
DEFAULT_POLL_TIMEOUT_MS = 1_000
DEFAULT_READ_TIMEOUT_MS = 120_000
#: ``shareClient``: the driver's share consumer (``shareclient.py``)
SHARE_CLIENTS = ("auto", "kshare", "librdkafka")
#: ``readClient``: the executors' readers (``readclient.py``)
READ_CLIENTS = ("auto", "kshare", "librdkafka")

#: The executors' readers' librdkafka defaults (a ``kafka.read.*`` or ``kafka.*`` setting wins);
#: the raw Fetch reader (``readclient.py``) takes ``fetch.wait.max.ms`` from here too.
#: librdkafka's consumer prefetches until ``queued.min.messages`` (default 100,000) are queued:
#: reading a 10k-record range, it fetched 4.2-4.8x the records kept (measured with its
#: statistics) — broker reads, network and decoding for nothing, on the cores the
#: batch runs on. 1000 keeps about one fetch (max.partition.fetch.bytes) ahead, like Kafka's Java
#: consumer: 1.4-1.5x. ``fetch.queue.backoff.ms`` (default 1000) is how long a partition waits
#: to be fetched again once that threshold was reached: at 1000 a read stalled for a second per
#: fetch; 1 fetches again as soon as the queue drains.
READER_DEFAULTS: dict[str, object] = {"fetch.wait.max.ms": 100, "queued.min.messages": 1000,
                                      "fetch.queue.backoff.ms": 1}

#: option name (documented case) -> one-line description, for error messages and docs.
KNOWN_OPTIONS: dict[str, str] = {
    "kafka.bootstrap.servers": "where the share group is served: a Kafka 4.x cluster or a kshare sidecar (required)",
    "kafka.backend.servers": "where executors read record payloads with a plain consumer (default: "
                             "kafka.bootstrap.servers, which a kshare sidecar serves too; set it to the backend "
                             "cluster to read payloads without the extra hop)",
    "group": "the share group id (required)",
    "subscribe": "comma-separated topic names (required)",
    "maxRecordsPerTrigger": f"records acquired per micro-batch, a soft limit (default {DEFAULT_MAX_RECORDS})",
    "pollTimeoutMs": f"how long one trigger waits for records (default {DEFAULT_POLL_TIMEOUT_MS})",
    "lockDurationMs": f"the group's acquisition lock, share.record.lock.duration.ms (default {DEFAULT_LOCK_MS})",
    "triggerIntervalMs": "the query's trigger interval, to check it against the lock (optional)",
    "shareClient": "the driver's share consumer: auto (default: kshare's asyncio client, offsets only, unless a "
                   "kafka.share.* setting needs librdkafka), kshare, or librdkafka",
    "readClient": "the executors' readers: auto (default: raw Fetch requests decoded straight into Arrow columns, "
                  "unless a kafka.read.* setting needs librdkafka), kshare, or librdkafka (a plain consumer)",
    "readTimeoutMs": f"executor deadline to read one partition's ranges (default {DEFAULT_READ_TIMEOUT_MS})",
    "minPartitions": "input partitions (Spark tasks) per micro-batch at least, its records spread evenly over them "
                     "(default: one per topic-partition assigned to the query's share consumer)",
    "includeHeaders": "true: rows carry a 'headers' column, as with Spark's Kafka source's option of that name "
                      "(default false)",
}
#: lower case (as Spark hands it over) -> documented case.
CANONICAL: dict[str, str] = {k.lower(): k for k in KNOWN_OPTIONS}

#: Options of Spark's own Kafka source that mean nothing for a share group, with the reason.
_KAFKA_SOURCE_ONLY = {
    "subscribePattern": "share groups subscribe by topic name: list them in 'subscribe'",
    "assign": "a share group assigns partitions itself: use 'subscribe'",
    "startingOffsets": "the share group decides where to start (share.auto.offset.reset on the group)",
    "endingOffsets": "a share group is a queue: there is no ending offset",
    "maxOffsetsPerTrigger": "use 'maxRecordsPerTrigger'",
    "failOnDataLoss": "records lost to retention are archived by the share group",
    "kafka.group.id": "use 'group'",
}
_KAFKA_SOURCE_ONLY_LC = {k.lower(): (k, why) for k, why in _KAFKA_SOURCE_ONLY.items()}

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

#: Client prefixes, most specific first: (prefix, which client(s)).
PREFIX_SHARE = "kafka.share."
PREFIX_READ = "kafka.read."
PREFIX_BOTH = "kafka."

#: librdkafka settings the source sets itself, per client, with what to use instead.
_RESERVED_SHARE = {
    "bootstrap.servers": "use 'kafka.bootstrap.servers'",
    "group.id": "use 'group'",
    "share.acknowledgement.mode": "the source acknowledges explicitly, per micro-batch",
    "max.poll.records": "use 'maxRecordsPerTrigger'",
}
_RESERVED_READ = {
    "bootstrap.servers": "use 'kafka.backend.servers'",
    "group.id": "the readers never join a group",
    "enable.auto.commit": "the readers never commit",
    "enable.partition.eof": "the readers need end-of-partition events",
}


class OptionError(ValueError):
    """An invalid option; the message says which and how to fix it."""


@dataclass(frozen=True)
class ClientSetting:
    """One ``kafka.*`` option: the librdkafka ``name``/``value`` and the option it came from."""

    option: str
    name: str
    value: str


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    backend: str
    group: str
    topics: tuple[str, ...]
    max_records: int = DEFAULT_MAX_RECORDS
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    lock_ms: int = DEFAULT_LOCK_MS
    trigger_ms: int | None = None
    read_timeout_ms: int = DEFAULT_READ_TIMEOUT_MS
    #: the driver's share consumer: auto, kshare or librdkafka (``shareclient.py``)
    client_choice: str = "auto"
    #: the executors' readers: auto, kshare or librdkafka (``readclient.py``)
    read_choice: str = "auto"
    #: ``kafka.<setting>``: both clients; ``kafka.share.<setting>`` / ``kafka.read.<setting>``: one.
    client: tuple[ClientSetting, ...] = ()
    share_client: tuple[ClientSetting, ...] = ()
    read_client: tuple[ClientSetting, ...] = ()
    #: ``minPartitions``: at least this many input partitions per batch (``source._pieces``); None: default.
    min_partitions: int | None = None
    #: ``includeHeaders``: the schema has the ``headers`` column (``source.schema_for``).
    include_headers: bool = False
    #: whether kafka.backend.servers was given (else executors read through kafka.bootstrap.servers).
    backend_given: bool = field(default=False, compare=False)

    def share_settings(self) -> dict[str, ClientSetting]:
        """The share consumer's pass-through settings by librdkafka name (kafka.share.* wins)."""
        return {s.name: s for s in (*self.client, *self.share_client)}

    def read_settings(self) -> dict[str, ClientSetting]:
        return {s.name: s for s in (*self.client, *self.read_client)}

    def share_consumer_config(self, *, with_bootstrap: bool = True) -> dict[str, object]:
        cfg: dict[str, object] = {name: s.value for name, s in self.share_settings().items()}
        cfg.update({"group.id": self.group, "share.acknowledgement.mode": "explicit",
                    "max.poll.records": self.max_records})
        if with_bootstrap:
            cfg["bootstrap.servers"] = self.bootstrap
        return cfg

    def plain_consumer_config(self, *, with_bootstrap: bool = True) -> dict[str, object]:
        cfg: dict[str, object] = dict(READER_DEFAULTS)  # defaults a kafka.read.* may override
        cfg.update({name: s.value for name, s in self.read_settings().items()})
        cfg.update({
            # librdkafka wants a group id even for assign(); nothing is ever committed to it.
            "group.id": f"kshare-spark-reader-{self.group}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        })
        if with_bootstrap:
            cfg["bootstrap.servers"] = self.backend
        return cfg


def did_you_mean(key: str) -> str:
    """`` (did you mean 'maxRecordsPerTrigger'?)`` for a near miss of a known option, else ''."""
    candidates = list(CANONICAL) + list(_KAFKA_SOURCE_ONLY_LC)
    close = difflib.get_close_matches(key.lower(), candidates, n=1, cutoff=0.75)
    if not close:
        return ""
    name = CANONICAL.get(close[0]) or _KAFKA_SOURCE_ONLY_LC[close[0]][0]
    return f" (did you mean '{name}'?)"


@overload
def _int(opts: Mapping[str, str], name: str, default: int, *, minimum: int) -> int: ...
@overload
def _int(opts: Mapping[str, str], name: str, default: None, *, minimum: int) -> int | None: ...


def _int(opts: Mapping[str, str], name: str, default: int | None, *, minimum: int) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option '{name}' must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option '{name}' must be >= {minimum}, got {value}")
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    """``true`` / ``false`` in any case, as Spark's own sources take booleans."""
    raw = str(opts.get(name.lower(), "")).strip().lower()
    if not raw:
        return default
    if raw not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {opts[name.lower()]!r}")
    return raw == "true"


def _client_setting(key: str, value: str) -> tuple[str, ClientSetting]:
    """``kafka.[share.|read.]<name>`` -> (which client(s), setting); reserved names raise."""
    for prefix, which in ((PREFIX_SHARE, "share"), (PREFIX_READ, "read"), (PREFIX_BOTH, "both")):
        if key.startswith(prefix):
            name = key[len(prefix):]
            break
    if not name:
        raise OptionError(f"option '{key}' names no client setting")
    reserved = []
    if which in ("share", "both"):
        reserved += [_RESERVED_SHARE.get(name), _RESERVED_SHARE.get(f"share.{name}") if which == "share" else None]
    if which in ("read", "both"):
        reserved.append(_RESERVED_READ.get(name))
    hint = next((r for r in reserved if r), None)
    if hint:
        raise OptionError(f"option '{key}' is set by the kshare source itself and cannot be overridden: {hint}")
    return which, ClientSetting(key, name, value)


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate ``options`` (any case) and return them typed; raise :class:`OptionError`."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(options).items()}
    # Spark may add a 'path' for load(path); the source has no use for one.
    opts.pop("path", None)

    settings: dict[str, list[ClientSetting]] = {"both": [], "share": [], "read": []}
    unknown: list[str] = []
    for key in sorted(opts):
        if key in CANONICAL:
            continue
        if key in _KAFKA_SOURCE_ONLY_LC:
            name, why = _KAFKA_SOURCE_ONLY_LC[key]
            raise OptionError(f"option '{name}' is not supported by the kshare source: {why}")
        if key.startswith(PREFIX_BOTH):
            which, setting = _client_setting(key, opts[key])
            settings[which].append(setting)
            continue
        unknown.append(key)
    if unknown:
        listed = "; ".join(f"'{k}'{did_you_mean(k)}" for k in unknown)
        raise OptionError(
            f"unknown option(s) for the kshare source: {listed}. Known options: {', '.join(KNOWN_OPTIONS)}, plus "
            "librdkafka settings as kafka.<setting> (both clients), kafka.share.<setting> (the driver's share "
            "consumer) or kafka.read.<setting> (the executors' readers)"
        )

    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionError("option 'kafka.bootstrap.servers' is required: the Kafka 4.x cluster or kshare sidecar "
                          "that serves the share group")
    group = opts.get("group", "").strip()
    if not group:
        raise OptionError("option 'group' is required: the share group id to consume as")
    subscribe = opts.get("subscribe", "")
    topics = tuple(dict.fromkeys(t.strip() for t in subscribe.split(",") if t.strip()))
    if not topics:
        raise OptionError("option 'subscribe' is required: a comma-separated list of topic names")
    bad = [t for t in topics if not _TOPIC.match(t)]
    if bad:
        raise OptionError(f"option 'subscribe' has invalid topic name(s): {', '.join(bad)}")

    backend = opts.get("kafka.backend.servers", "").strip()
    choice = opts.get("shareclient", "").strip().lower() or "auto"
    if choice not in SHARE_CLIENTS:
        raise OptionError(f"option 'shareClient' must be one of {', '.join(SHARE_CLIENTS)}, got {opts['shareclient']!r}")
    read_choice = opts.get("readclient", "").strip().lower() or "auto"
    if read_choice not in READ_CLIENTS:
        raise OptionError(f"option 'readClient' must be one of {', '.join(READ_CLIENTS)}, got {opts['readclient']!r}")
    parsed = SourceOptions(
        bootstrap=bootstrap,
        backend=backend or bootstrap,
        group=group,
        topics=topics,
        max_records=_int(opts, "maxRecordsPerTrigger", DEFAULT_MAX_RECORDS, minimum=1),
        poll_timeout_ms=_int(opts, "pollTimeoutMs", DEFAULT_POLL_TIMEOUT_MS, minimum=0),
        lock_ms=_int(opts, "lockDurationMs", DEFAULT_LOCK_MS, minimum=1),
        trigger_ms=_int(opts, "triggerIntervalMs", None, minimum=0),
        read_timeout_ms=_int(opts, "readTimeoutMs", DEFAULT_READ_TIMEOUT_MS, minimum=1),
        client_choice=choice,
        read_choice=read_choice,
        include_headers=_bool(opts, "includeHeaders", False),
        min_partitions=_int(opts, "minPartitions", None, minimum=1),
        client=tuple(settings["both"]),
        share_client=tuple(settings["share"]),
        read_client=tuple(settings["read"]),
        backend_given=bool(backend),
    )
    for message in lock_warnings(parsed):
        warnings.warn(message, LockDurationWarning, stacklevel=2)
    return parsed


class LockDurationWarning(UserWarning):
    """The acquisition lock may lapse before a micro-batch is acknowledged."""


def lock_warnings(opts: SourceOptions) -> list[str]:
    out = []
    if opts.trigger_ms is not None and opts.trigger_ms >= opts.lock_ms:
        out.append(
            f"kshare source: the trigger interval ({opts.trigger_ms} ms) is not shorter than the acquisition lock "
            f"({opts.lock_ms} ms): records of each micro-batch will be released and redelivered before they are "
            "acknowledged. Raise share.record.lock.duration.ms on the group, shorten the trigger, or lower "
            "maxRecordsPerTrigger so that trigger interval + batch time stays well under the lock."
        )
    if opts.poll_timeout_ms >= opts.lock_ms:
        out.append(f"kshare source: pollTimeoutMs ({opts.poll_timeout_ms}) is not shorter than the lock "
                   f"({opts.lock_ms} ms)")
    return out
