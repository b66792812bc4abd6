"""``kshare dlq``: a dead-letter topic's records, and the redrive, without a browser.

Talks to the **backend** (where the dead-letter topic is), not to the sidecar: ``--bootstrap-server``
names it, and ``--config`` a sidecar's TOML file whose ``bootstrap.servers`` and ``backend.*``
security settings are used (the same credentials the sidecar has). The redrive is the console's
(kshare_sidecar/dlq/redrive.py): each record once through a Kafka transaction, progress kept on
the backend, so a redrive stopped (Ctrl-C) or killed goes on where it stopped when started again —
from here or from a console. Exit codes as ``kshare groups``: 0 done, 1 refused or failed,
2 bad arguments, 3 the backend could not be reached.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from ..config import ConfigError, load_config
from .groups import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    JSON,
    OneLineCommand,
    OneLineGroup,
    console,
    fail,
    out_json,
)

app = typer.Typer(help="Dead-letter topics: list and show records, redrive them back.", no_args_is_help=True,
                  cls=OneLineGroup)

BACKEND = typer.Option(None, "--bootstrap-server", "-b", help="The backend cluster (where the dead-letter topic "
                       "is), host:port[,...]; default: bootstrap.servers of --config")
CONFIG = typer.Option(None, "--config", help="A sidecar's TOML config: its backend address and security settings")
LOG = typer.Option("WARNING", "--log-level", help="DEBUG, INFO, WARNING, ERROR")


def _backend(prog: str, bootstrap: str | None, config: Path | None) -> tuple[str, dict[str, Any]]:
    try:
        cfg = load_config(config, overrides={"bootstrap.servers": bootstrap})
        from ..backend.security import BackendSecurity

        return cfg.backend.bootstrap_servers, BackendSecurity.from_config(cfg).aiokafka_options()
    except ConfigError as exc:
        fail(prog, str(exc))


def _payload(p: dict[str, Any]) -> str:
    if p["kind"] == "null":
        return "null"
    text = p["text"] if p["kind"] == "text" else f"hex:{p['text']}"
    return text + (f" … ({p['size']} bytes)" if p["truncated"] else "")


def _run(prog: str, coro: Any) -> int:
    from ..dlq.reader import ReadError

    try:
        return asyncio.run(coro)
    except ReadError as exc:
        typer.echo(f"{prog}: error: {exc}", err=True)
        return EXIT_UNREACHABLE if "cannot reach" in str(exc) else EXIT_FAILED


@app.command("list", cls=OneLineCommand)
def list_letters(
    topic: str = typer.Argument(..., help="The dead-letter topic"),
    bootstrap_server: str = BACKEND, config: Path = CONFIG,
    group: str = typer.Option(None, "--group", help="Only the dead letters of this share group"),
    partition: int = typer.Option(None, "--partition", help="Only this partition"),
    limit: int = typer.Option(20, "--limit", min=1, max=10_000, help="The newest N records of each partition"),
    width: int = typer.Option(60, "--width", min=8, help="Bytes of key and value shown"),
    as_json: bool = JSON, log_level: str = LOG,
) -> None:
    """The newest dead letters, with their __dlq.errors.* context."""
    logging.basicConfig(level=log_level.upper())
    bootstrap, options = _backend("kshare dlq list", bootstrap_server, config)
    raise typer.Exit(_run("kshare dlq list", _list(bootstrap, options, topic, group, partition, limit, width,
                                                   as_json)))


async def _list(bootstrap: str, options: dict, topic: str, group: str | None, partition: int | None, limit: int,
                width: int, as_json: bool) -> int:
    from ..dlq.reader import TopicReader

    reader = TopicReader(bootstrap, options, client_id="kshare-dlq-cli")
    try:
        bounds = await reader.bounds(topic)
        letters = []
        for p, (begin, end) in sorted(bounds.items()):
            if partition is None or p == partition:
                got, _ = await reader.dead_letters(topic, p, max(begin, end - limit), limit, end=end)
                letters += [d for d in got if group is None or d.group == group]
    finally:
        await reader.close()
    rows = [d.as_dict(width) for d in letters]
    if as_json:
        out_json({"topic": topic, "partitions": {p: {"start": b, "end": e} for p, (b, e) in bounds.items()},
                  "records": rows})
        return EXIT_OK
    t = Table("partition", "offset", "group", "source", "deliveries", "message", "key", "value", "headers",
              title=f"{topic}: {sum(e - b for b, e in bounds.values())} record(s), newest {limit} per partition")
    for d in rows:
        src = d["source"]
        t.add_row(str(d["partition"]), str(d["offset"]), d["group"] or "-",
                  f"{src['topic']}-{src['partition']}@{src['offset']}" if src["topic"] is not None else "-",
                  str(d["delivery_count"] or "-"), d["message"] or "-", _payload(d["key"]),
                  "(headers only)" if d["headers_only"] else _payload(d["value"]), str(len(d["headers"])))
    console().print(t)
    return EXIT_OK


@app.command("show", cls=OneLineCommand)
def show(
    topic: str = typer.Argument(..., help="The dead-letter topic"),
    partition: int = typer.Argument(..., help="Partition"),
    offset: int = typer.Argument(..., help="Offset"),
    bootstrap_server: str = BACKEND, config: Path = CONFIG,
    width: int = typer.Option(4096, "--width", min=8, help="Bytes of key, value and header values shown"),
    as_json: bool = JSON, log_level: str = LOG,
) -> None:
    """One dead letter in full: context, key, value, every header (text when printable, else hex)."""
    logging.basicConfig(level=log_level.upper())
    bootstrap, options = _backend("kshare dlq show", bootstrap_server, config)
    raise typer.Exit(_run("kshare dlq show", _show(bootstrap, options, topic, partition, offset, width, as_json)))


async def _show(bootstrap: str, options: dict, topic: str, partition: int, offset: int, width: int,
                as_json: bool) -> int:
    from ..dlq.reader import TopicReader

    reader = TopicReader(bootstrap, options, client_id="kshare-dlq-cli")
    try:
        await reader.partitions(topic)
        got, _ = await reader.dead_letters(topic, partition, offset, 1, end=offset + 1)
    finally:
        await reader.close()
    if not got:
        typer.echo(f"kshare dlq show: error: {topic}-{partition} has no record at offset {offset}", err=True)
        return EXIT_FAILED
    d = got[0].as_dict(width)
    if as_json:
        out_json(d)
        return EXIT_OK
    src = d["source"]
    out = console()
    for name, value in (("record", f"{topic}-{partition}@{offset}"), ("group", d["group"]),
                        ("source", f"{src['topic']}-{src['partition']}@{src['offset']}"),
                        ("delivery count", d["delivery_count"]), ("message", d["message"]),
                        ("key", _payload(d["key"])), ("value", _payload(d["value"]))):
        out.print(f"{name}: {value}", markup=False)
    for h in d["headers"]:
        out.print(f"header {h['key']}: {_payload(h['value'])}", markup=False)
    return EXIT_OK


@app.command("redrive", cls=OneLineCommand)
def redrive(
    group: str = typer.Option(..., "--group", help="The share group whose dead letters go back"),
    topic: str = typer.Option(..., "--topic", help="The dead-letter topic"),
    to: str = typer.Option("", "--to", help="Target topic (default: each record's source, __dlq.errors.topic)"),
    rate: float = typer.Option(100.0, "--rate", min=0.01, help="Records per second at most"),
    skip_missing: bool = typer.Option(False, "--skip-missing", help="Pass over headers-only dead letters whose "
                                      "source record is gone from the log (default: stop there)"),
    status: bool = typer.Option(False, "--status", help="Only show the positions the backend keeps"),
    bootstrap_server: str = BACKEND, config: Path = CONFIG, as_json: bool = JSON, log_level: str = LOG,
) -> None:
    """Copy a share group's dead letters back to their source topic, each once (resumable)."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    bootstrap, options = _backend("kshare dlq redrive", bootstrap_server, config)
    if status:
        raise typer.Exit(_run("kshare dlq redrive", _status(bootstrap, options, group, topic, as_json)))
    raise typer.Exit(_run("kshare dlq redrive", _redrive(bootstrap, options, group, topic, to, rate, skip_missing,
                                                         as_json)))


async def _status(bootstrap: str, options: dict, group: str, topic: str, as_json: bool) -> int:
    from ..dlq.redrive import progress, redrive_name

    try:
        found = [p for p in await progress(bootstrap, options) if p["name"] == redrive_name(group, topic)]
    except Exception as exc:  # noqa: BLE001 - aiokafka's connection errors vary: one line
        typer.echo(f"kshare dlq redrive: error: backend {bootstrap}: {exc!r}", err=True)
        return EXIT_UNREACHABLE
    if as_json:
        out_json(found)
    elif not found:
        typer.echo(f"no redrive of {group}'s dead letters in {topic} has run")
    else:
        p = found[0]
        typer.echo(f"{p['name']}: {'unfinished, ' + str(p['left']) + ' left' if p['unfinished'] else 'finished'} "
                   f"(to {p['target'] or 'source topics'}, started by {p['by'] or '-'})")
    return EXIT_OK


async def _redrive(bootstrap: str, options: dict, group: str, topic: str, to: str, rate: float, skip_missing: bool,
                   as_json: bool) -> int:
    from ..dlq.redrive import Redrive, RedriveError, RedriveRequest

    try:
        job = Redrive(RedriveRequest(group, topic, to, rate, skip_missing, "cli"), bootstrap_servers=bootstrap,
                      client_options=options)
    except RedriveError as exc:
        typer.echo(f"kshare dlq redrive: error: {exc}", err=True)
        return EXIT_USAGE
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, job.stop)
    task = asyncio.create_task(job.run())
    while not task.done():
        await asyncio.wait([task], timeout=2.0)
        s = job.status
        if not as_json and s.state == "running":
            typer.echo(f"{job.name}: {s.examined}/{s.total} looked at, {s.redriven} redriven", err=True)
    result = task.result()
    if as_json:
        out_json(result.as_dict())
    else:
        typer.echo(f"{job.name}: {result.state}: {result.redriven} redriven, {result.passed_over} passed over "
                   f"(other groups, no context), {result.missing} missing" + (f"; {result.error}" if result.error
                                                                              else ""))
    return EXIT_OK if result.state in ("done", "stopped") else EXIT_FAILED
