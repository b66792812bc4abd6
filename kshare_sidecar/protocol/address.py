"""``host:port`` and comma-separated bootstrap lists, parsed one way everywhere.

Why one function: the sidecar's config, the backend clients, the authorizer, the CLI, the share
consumer and the harness all take Kafka addresses; each used to split them itself, and the copies
disagreed on IPv6 brackets (``[::1]:9092``) and on what a bad value raised. Here a bad value is a
:class:`ValueError` naming it, and IPv6 brackets are removed from the host.
"""

from __future__ import annotations

from collections.abc import Iterable


def problem(text: str) -> str | None:
    """Why ``text`` is not ``host:port`` (port 0..65535), or ``None`` if it is."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or not 0 <= int(port) < 65536:
        return "expected host:port, for example 127.0.0.1:9192"
    return None


def parse_host_port(text: str, what: str = "address") -> tuple[str, int]:
    """``"host:port"`` -> ``("host", port)``; ``"[::1]:9092"`` -> ``("::1", 9092)``.

    Raises :class:`ValueError` naming ``what`` and ``text`` when it is not ``host:port``."""
    if (why := problem(text)) is not None:
        raise ValueError(f"bad {what} {text.strip()!r}: {why}")
    host, _, port = text.strip().rpartition(":")
    return host.strip("[]"), int(port)


def parse_bootstrap(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """``"a:1,b:2"`` (or a list of ``host:port``) -> ``[("a", 1), ("b", 2)]``; blanks are skipped.

    Raises :class:`ValueError` for a bad entry or an empty list."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = [parse_host_port(item, "bootstrap server") for item in items if item.strip()]
    if not out:
        raise ValueError("no bootstrap server given")
    return out


def first_server(servers: str) -> tuple[str, int]:
    """The first entry of a bootstrap list (for one-connection diagnostics and probes)."""
    return parse_bootstrap(servers)[0]


def parse_count_overrides(text: str, what: str = "max.connections.per.ip.overrides") -> dict[str, int]:
    """Kafka's ``host:count[,host:count...]`` (max.connections.per.ip.overrides) -> {host: count};
    '' -> {}. A host is an IP address or a name (the listener resolves names once, at start).
    Raises :class:`ValueError` naming ``what`` and the bad entry."""
    out: dict[str, int] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        if not sep or not host.strip("[]") or not count.isdigit():
            raise ValueError(f"bad {what} entry {entry!r}: expected host:count, for example 127.0.0.1:200")
        out[host.strip("[]")] = int(count)
    return out
