"""Options of the ``kshare`` streaming source, parsed and validated on the driver before any I/O.

Spark hands a data source a case-insensitive dict of strings. Everything here is pure so the
checks run (and are unit-tested) without a SparkSession or a broker.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Mapping

#: Kafka's default acquisition lock (``group.share.record.lock.duration.ms``).
DEFAULT_LOCK_MS = 30_000
DEFAULT_MAX_RECORDS = 10_000
DEFAULT_POLL_TIMEOUT_MS = 1_000
DEFAULT_READ_TIMEOUT_MS = 120_000

#: option name (lower case) -> one-line description, for error messages and docs.
KNOWN_OPTIONS: dict[str, str] = {
    "kafka.bootstrap.servers": "where the share group is served: a Kafka 4.x cluster or a kshare sidecar (required)",
    "kafka.backend.servers": "where executors read record payloads with a plain consumer "
                             "(default: kafka.bootstrap.servers; set it to the backend cluster behind a kshare sidecar)",
    "group": "the share group id (required)",
    "subscribe": "comma-separated topic names (required)",
    "maxrecordspertrigger": f"records acquired per micro-batch, a soft limit (default {DEFAULT_MAX_RECORDS})",
    "polltimeoutms": f"how long one trigger waits for records (default {DEFAULT_POLL_TIMEOUT_MS})",
    "lockdurationms": f"the group's acquisition lock, share.record.lock.duration.ms (default {DEFAULT_LOCK_MS})",
    "triggerintervalms": "the query's trigger interval, to check it against the lock (optional)",
    "readtimeoutms": f"executor deadline to read one partition's ranges (default {DEFAULT_READ_TIMEOUT_MS})",
}

#: Options of Spark's own Kafka source that mean nothing for a share group, with the reason.
_KAFKA_SOURCE_ONLY = {
    "subscribepattern": "share groups subscribe by topic name: list them in 'subscribe'",
    "assign": "a share group assigns partitions itself: use 'subscribe'",
    "startingoffsets": "the share group decides where to start (share.auto.offset.reset on the group)",
    "endingoffsets": "a share group is a queue: there is no ending offset",
    "maxoffsetspertrigger": "use 'maxRecordsPerTrigger'",
    "failondataloss": "records lost to retention are archived by the share group",
    "kafka.group.id": "use 'group'",
}

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

#: Client settings the source owns; a ``kafka.`` pass-through must not override them.
_RESERVED_CLIENT_KEYS = {"group.id", "share.acknowledgement.mode", "max.poll.records", "enable.auto.commit",
                         "enable.partition.eof"}


class OptionError(ValueError):
    """An invalid option; the message says which and how to fix it."""


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
    #: ``kafka.<librdkafka setting>`` pass-through (security, client.id, ...), for both clients.
    client: dict[str, str] = field(default_factory=dict)

    def share_consumer_config(self) -> dict[str, object]:
        return {
            **self.client,
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "share.acknowledgement.mode": "explicit",
            "max.poll.records": self.max_records,
        }

    def plain_consumer_config(self) -> dict[str, object]:
        return {
            **self.client,
            "bootstrap.servers": self.backend,
            # librdkafka wants a group id even for assign(); nothing is ever committed to it.
            "group.id": f"kshare-spark-reader-{self.group}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
        }


def _int(opts: Mapping[str, str], key: str, default: int | None, *, minimum: int) -> int | None:
    raw = opts.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option '{key}' must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option '{key}' must be >= {minimum}, got {value}")
    return value


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate ``options`` (any case) and return them typed; raise :class:`OptionError`."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(options).items()}
    # Spark may add a 'path' for load(path); the source has no use for one.
    opts.pop("path", None)

    client: dict[str, str] = {}
    unknown: list[str] = []
    for key in list(opts):
        if key in KNOWN_OPTIONS:
            continue
        if key in _KAFKA_SOURCE_ONLY:
            raise OptionError(f"option '{key}' is not supported by the kshare source: {_KAFKA_SOURCE_ONLY[key]}")
        if key.startswith("kafka."):
            name = key[len("kafka."):]
            if name in _RESERVED_CLIENT_KEYS:
                raise OptionError(f"option '{key}' is set by the kshare source itself and cannot be overridden")
            client[name] = opts[key]
            continue
        unknown.append(key)
    if unknown:
        known = ", ".join(sorted(KNOWN_OPTIONS))
        raise OptionError(
            f"unknown option(s) {', '.join(sorted(unknown))} for the kshare source; known options: {known}, "
            "plus kafka.<librdkafka setting> pass-throughs"
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

    parsed = SourceOptions(
        bootstrap=bootstrap,
        backend=opts.get("kafka.backend.servers", "").strip() or bootstrap,
        group=group,
        topics=topics,
        max_records=_int(opts, "maxrecordspertrigger", DEFAULT_MAX_RECORDS, minimum=1),
        poll_timeout_ms=_int(opts, "polltimeoutms", DEFAULT_POLL_TIMEOUT_MS, minimum=0),
        lock_ms=_int(opts, "lockdurationms", DEFAULT_LOCK_MS, minimum=1),
        trigger_ms=_int(opts, "triggerintervalms", None, minimum=0),
        read_timeout_ms=_int(opts, "readtimeoutms", DEFAULT_READ_TIMEOUT_MS, minimum=1),
        client=client,
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
