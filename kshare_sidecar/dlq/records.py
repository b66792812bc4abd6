"""Dead-letter records as Kafka 4.4 writes them (KIP-1191), read back; payloads shown safely.

A dead-letter record carries six context headers (UTF-8 text): ``__dlq.errors.topic``,
``.partition``, ``.offset``, ``.group``, ``.delivery.count`` and ``.message``. With
``errors.deadletterqueue.copy.record.enable=false`` (Kafka's default) that is all it carries:
key and value are null and no other header is copied; with copy on, the source record's key,
value and headers come first. :func:`parse` reads either shape (and tolerates records another
writer produced: a missing or malformed header is ``None``, never an exception), and
:func:`preview` turns key/value bytes into something a page or a terminal can show without
interpreting it: UTF-8 text when it is printable, hex otherwise, always cut to a limit.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

PREFIX = "__dlq.errors."
TOPIC = PREFIX + "topic"
PARTITION = PREFIX + "partition"
OFFSET = PREFIX + "offset"
GROUP = PREFIX + "group"
DELIVERY_COUNT = PREFIX + "delivery.count"
MESSAGE = PREFIX + "message"
#: The header kshare adds to a record it redrives: ``<dlq topic>/<partition>/<offset>`` it came from.
REDRIVEN_FROM = "kshare.redrive.source"

Header = tuple[str, "bytes | None"]


@dataclass(frozen=True)
class DeadLetter:
    """One record of a dead-letter topic and what its ``__dlq.errors.*`` headers say."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    source_topic: str | None
    source_partition: int | None
    source_offset: int | None
    group: str | None
    delivery_count: int | None
    message: str | None

    @property
    def context_complete(self) -> bool:
        """All of topic, partition and offset are there: the source record can be found."""
        return self.source_topic is not None and self.source_partition is not None and self.source_offset is not None

    @property
    def user_headers(self) -> tuple[Header, ...]:
        """The source record's own headers (copied), without the ``__dlq.errors.*`` context."""
        return tuple((k, v) for k, v in self.headers if not k.startswith(PREFIX))

    @property
    def headers_only(self) -> bool:
        """Written with copy off: no key, no value (null, or empty for a writer whose client cannot
        send null for both) and no header but the context. The source record must then be read
        from the source topic (an empty record copied without headers looks the same, and reading
        the source gives the same record back)."""
        return not self.key and not self.value and not self.user_headers

    def as_dict(self, limit: int = 256) -> dict[str, Any]:
        """The JSON form the console and ``kshare dlq --json`` print (payloads as :func:`preview`)."""
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset,
                "timestamp": self.timestamp, "key": preview(self.key, limit), "value": preview(self.value, limit),
                "headers": [{"key": k, "value": preview(v, limit)} for k, v in self.headers],
                "source": {"topic": self.source_topic, "partition": self.source_partition,
                           "offset": self.source_offset},
                "group": self.group, "delivery_count": self.delivery_count, "message": self.message,
                "headers_only": self.headers_only}


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _int(value: bytes | None) -> int | None:
    text = _text(value)
    if text is None or not text.strip().lstrip("-").isdigit():
        return None
    return int(text.strip())


def parse(topic: str, partition: int, offset: int, timestamp: int, key: bytes | None, value: bytes | None,
          headers: Iterable[tuple[str, bytes | None]]) -> DeadLetter:
    """A record of a dead-letter topic with its context read from the headers (the last of a name
    wins: a record dead-lettered twice — redriven, then failed again — carries the newest context)."""
    hs = tuple((str(k), None if v is None else bytes(v)) for k, v in headers)
    ctx = {k: v for k, v in hs if k.startswith(PREFIX)}
    return DeadLetter(topic, partition, offset, timestamp, key, value, hs, _text(ctx.get(TOPIC)),
                      _int(ctx.get(PARTITION)), _int(ctx.get(OFFSET)), _text(ctx.get(GROUP)),
                      _int(ctx.get(DELIVERY_COUNT)), _text(ctx.get(MESSAGE)))


def redriven_headers(letter: DeadLetter, source_headers: Sequence[Header] | None = None) -> list[Header]:
    """Headers of the record a redrive writes: the source record's own (``source_headers`` when it
    was read from the source topic, else those copied into the dead letter), never the
    ``__dlq.errors.*`` context — a record that fails again gets a fresh one — plus where it came from."""
    own = list(source_headers) if source_headers is not None else list(letter.user_headers)
    own = [(k, v) for k, v in own if not k.startswith(PREFIX) and k != REDRIVEN_FROM]
    return own + [(REDRIVEN_FROM, f"{letter.topic}/{letter.partition}/{letter.offset}".encode())]


_PRINTABLE_CONTROLS = frozenset("\n\t\r")


def preview(data: bytes | None, limit: int = 256) -> dict[str, object]:
    """``{"kind": "null"|"text"|"hex", "text": ..., "size": n, "truncated": bool}``.

    Text is UTF-8 without control characters other than newline, tab and carriage return;
    anything else is shown as hex. At most ``limit`` bytes are looked at, so a huge value costs
    nothing; a multi-byte character cut by the limit is dropped (no replacement character)."""
    if data is None:
        return {"kind": "null", "text": "", "size": 0, "truncated": False}
    head = data[:limit]
    truncated = len(data) > limit
    text = head.decode("utf-8", errors="ignore") if truncated else None
    if not truncated:
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    elif text is not None and len(text.encode()) < len(head) - 3:  # more than a cut character was lost
        text = None
    if text is not None and all(ch.isprintable() or ch in _PRINTABLE_CONTROLS for ch in text):
        return {"kind": "text", "text": text, "size": len(data), "truncated": truncated}
    return {"kind": "hex", "text": head.hex(" "), "size": len(data), "truncated": truncated}
