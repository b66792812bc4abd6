"""The checks of setting values (`Setting.check`, config/settings.py) and the listener syntax: each
returns one line saying what is allowed, or None."""

from __future__ import annotations

import re

from ..protocol import address
from ..protocol.constants import SCRAM_MECHANISMS, SECURITY_PROTOCOLS


def _host_port(value: str) -> str | None:
    return address.problem(value)  # named: docs/configuration.md describes validators by name (doc.py)


def _ip_overrides(value: str) -> str | None:
    try:
        address.parse_count_overrides(value)
    except ValueError as exc:
        return str(exc)
    return None


def _optional_host_port(value: str) -> str | None:
    return address.problem(value) if value else None


def _refresh_interval(value: int) -> str | None:
    return None if value == 0 or value >= 60_000 else "must be 0 (never) or at least 60000 (one minute)"


def _bootstrap(value: str) -> str | None:
    if not value:
        return "required: the backend cluster's bootstrap servers, host:port[,host:port...]"
    for part in value.split(","):
        if why := _host_port(part):
            return why
    return None


def _offset_reset(value: str) -> str | None:
    if value in ("latest", "earliest"):
        return None
    if value.startswith("by_duration:"):
        from ..timeutil import parse_iso_duration_ms

        try:
            parse_iso_duration_ms(value.removeprefix("by_duration:"))
        except ValueError as exc:
            return str(exc)
        return None
    return "allowed values are latest, earliest, by_duration:<ISO-8601 duration> (e.g. by_duration:PT1H)"


_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")


def _tag_list_problem(value: str) -> str | None:
    """Kafka 4.4's check of streams.rack.aware.assignment.tags: a list without duplicate keys."""
    tags = [t.strip() for t in value.split(",")] if value.strip() else []
    return "must not contain duplicate tag keys" if len(set(tags)) != len(tags) else None


def _topic_list_problem(value: str) -> str | None:
    """A comma-separated list of legal topic names ('' = none)."""
    for name in (n.strip() for n in value.split(",")):
        if name and (problem := dlq_topic_problem(name)):
            return f"{name!r}: {problem}"
    return None


def dlq_topic_problem(value: str) -> str | None:
    """Kafka's topic-name rules, and no internal name (KIP-1191: a DLQ topic is a user topic)."""
    if value == "":
        return None
    if value in (".", "..") or len(value) > 249 or not _TOPIC_CHARS.match(value):
        return "not a legal topic name (1-249 of a-z A-Z 0-9 . _ -, not . or ..)"
    if value.startswith("__"):
        return "names starting with __ are reserved for internal topics"
    return None


PROTOCOLS = SECURITY_PROTOCOLS
#: what the sidecar's SASL listeners serve (as a client it also speaks OAUTHBEARER)
SASL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)
_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]]*):(?P<port>[0-9]+)$")


def parse_listeners(value: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` → [(NAME, host, port)]; ValueError naming the bad part."""
    out: list[tuple[str, str, int]] = []
    for part in (p.strip() for p in value.split(",")):
        m = _LISTENER.match(part)
        if m is None or int(m["port"]) > 65535:
            raise ValueError(f"{part!r} is not NAME://host:port (for example SASL_SSL://0.0.0.0:9194)")
        name = m["name"].upper()
        if any(name == n for n, _, _ in out):
            raise ValueError(f"listener name {name} appears twice")
        out.append((name, m["host"].strip("[]"), int(m["port"])))
    return out


def _listeners(value: str) -> str | None:
    if not value:
        return None
    try:
        parse_listeners(value)
    except ValueError as exc:
        return str(exc)
    return None


def _protocol_map(value: str) -> str | None:
    for part in (p.strip() for p in value.split(",")):
        name, sep, protocol = part.partition(":")
        if not sep or not name or protocol not in PROTOCOLS:
            return f"{part!r} is not NAME:PROTOCOL; protocols are {', '.join(PROTOCOLS)}"
    return None


def _mechanisms(value: str) -> str | None:
    names = [m.strip() for m in value.split(",") if m.strip()]
    bad = [m for m in names if m not in SASL_MECHANISMS]
    if not names or bad:
        return f"allowed values are {', '.join(SASL_MECHANISMS)} (comma-separated)"
    return None
