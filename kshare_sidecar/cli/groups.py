"""``kshare groups``: list, describe, reset offsets, delete offsets, delete share groups.

Works against the sidecar and against any Kafka 4.x broker with share groups. Rich tables by
default, ``--json`` for scripts. Exit codes (docs/cli.md): 0 success, 1 the cluster refused or
failed the operation (or part of it), 2 bad arguments, 3 the cluster could not be reached.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, NoReturn, TypedDict

import typer
from kio.schema.errors import ErrorCode
from rich.console import Console
from rich.table import Table
from typer.core import TyperCommand, TyperGroup

from ..protocol.constants import SHARE_GROUP_STATES
from .kclient import EARLIEST, LATEST, AdminClient, ClientError

# Typer (>= 0.26, pinned <0.30) vendors click: the click package is not a dependency of ours.
from typer._click import exceptions as _typer_click_exc

_USAGE_ERRORS: tuple[type[_typer_click_exc.UsageError], ...] = (_typer_click_exc.UsageError,)
_HELP_ERRORS: tuple[type[Exception], ...] = (_typer_click_exc.NoArgsIsHelpError,)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


class _OffsetRow(TypedDict):
    """One partition of ``describe --offsets`` (also its --json shape)."""

    topic: str
    partition: int
    start_offset: int | None
    lag: int | None
    error: str | None


class _ResetRow(TypedDict):
    """One partition of ``reset-offsets`` (also its --json shape)."""

    topic: str
    partition: int
    new_start_offset: int
    error: str | None


# -- shared CLI plumbing (also used by cli/configs.py and cli/consume.py) ------------------------
class OneLineCommand(TyperCommand):
    """Bad arguments print one line (``kshare <cmd>: error: ...``) and exit 2, no usage panel."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except _HELP_ERRORS:
            raise
        except _USAGE_ERRORS as exc:
            prog = " ".join(filter(None, [parent.command_path if parent else "kshare", info_name]))
            typer.echo(f"{prog}: error: {exc.format_message()}", err=True)
            raise typer.Exit(EXIT_USAGE) from None


class OneLineGroup(TyperGroup):
    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except _HELP_ERRORS:
            raise
        except _USAGE_ERRORS as exc:
            typer.echo(f"{ctx.command_path}: error: {exc.format_message()}", err=True)
            raise typer.Exit(EXIT_USAGE) from None


def fail(prog: str, message: str, code: int = EXIT_USAGE) -> NoReturn:
    typer.echo(f"{prog}: error: {message}", err=True)
    raise typer.Exit(code)


def run_client(prog: str, bootstrap: str, timeout: float, fn: Callable[[AdminClient], int]) -> NoReturn:
    """Call ``fn`` with a connected client; map connection trouble to exit 3 with one line."""
    try:
        client = AdminClient(bootstrap, timeout=timeout)
    except ValueError as exc:
        fail(prog, str(exc))
    try:
        with client:
            code = fn(client)
    except ClientError as exc:
        fail(prog, str(exc), EXIT_UNREACHABLE)
    raise typer.Exit(code)


def out_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def err_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def error_name(code: ErrorCode | int) -> str:
    return ErrorCode(code).name.upper()


BOOTSTRAP = typer.Option(..., "--bootstrap-server", "-b", help="The sidecar (or a Kafka 4.x broker), host:port[,...]",
                         envvar="KSHARE_BOOTSTRAP_SERVER", show_envvar=False)
JSON = typer.Option(False, "--json", help="Print JSON for scripts instead of tables.")
TIMEOUT = typer.Option(15.0, "--timeout", help="Seconds to wait for each answer.", min=0.1)

app = typer.Typer(help="Share groups: list, describe, reset offsets, delete.", no_args_is_help=True,
                  cls=OneLineGroup)


# -- list --------------------------------------------------------------------------------------
_STATES = {state.lower(): state for state in SHARE_GROUP_STATES}


@app.command("list", cls=OneLineCommand)
def list_groups(
    bootstrap_server: str = BOOTSTRAP,
    state: str = typer.Option(None, "--state", help="Only groups in these states (Empty,Stable,Dead)."),
    as_json: bool = JSON,
    timeout: float = TIMEOUT,
) -> None:
    """List share groups (with their state)."""
    prog = "kshare groups list"
    states: list[str] = []
    if state:
        for s in state.split(","):
            if s.strip().lower() not in _STATES:
                fail(prog, f"invalid state {s.strip()!r}: valid states are Empty, Stable, Dead")
            states.append(_STATES[s.strip().lower()])

    def go(client: AdminClient) -> int:
        groups = client.list_groups(states)
        if as_json:
            out_json([{"group": g.group_id, "state": g.group_state} for g in groups])
            return EXIT_OK
        table = Table("GROUP", "STATE", box=None, pad_edge=False)
        for g in groups:
            table.add_row(g.group_id, g.group_state)
        console().print(table if groups else "No share groups.")
        return EXIT_OK

    run_client(prog, bootstrap_server, timeout, go)


# -- describe ----------------------------------------------------------------------------------
def _require_group(prog: str, d) -> None:
    if d.error_code == ErrorCode.group_id_not_found:
        fail(prog, f"share group '{d.group_id}' does not exist", EXIT_FAILED)
    if d.error_code != ErrorCode.none:
        fail(prog, f"cannot describe share group '{d.group_id}': {error_name(d.error_code)}"
             + (f" ({d.error_message})" if d.error_message else ""), EXIT_FAILED)


def _assignment(m) -> str:
    return ",".join(f"{tp.topic_name}:{','.join(map(str, tp.partitions))}"
                    for tp in m.assignment.topic_partitions) or "-"


@app.command("describe", cls=OneLineCommand)
def describe(
    bootstrap_server: str = BOOTSTRAP,
    group: str = typer.Option(..., "--group", "-g", help="The share group."),
    members: bool = typer.Option(False, "--members", help="Show the members and their assignments."),
    offsets: bool = typer.Option(False, "--offsets", help="Show start offsets and lag (the default)."),
    state: bool = typer.Option(False, "--state", help="Show the group's state and epochs."),
    as_json: bool = JSON,
    timeout: float = TIMEOUT,
) -> None:
    """Describe a share group: offsets and lag (default), members, or state."""
    prog = "kshare groups describe"
    if sum((members, offsets, state)) > 1:
        fail(prog, "choose one of --members, --offsets, --state")
    view = "members" if members else "state" if state else "offsets"

    def go(client: AdminClient) -> int:
        d = client.describe_group(group)
        _require_group(prog, d)
        if view == "state":
            data = {"group": d.group_id, "state": d.group_state, "group_epoch": d.group_epoch,
                    "assignment_epoch": d.assignment_epoch, "assignor": d.assignor_name, "members": len(d.members)}
            if as_json:
                out_json(data)
            else:
                table = Table("GROUP", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "ASSIGNOR", "#MEMBERS",
                              box=None, pad_edge=False)
                table.add_row(*(str(v) for v in data.values()))
                console().print(table)
            return EXIT_OK
        if view == "members":
            members = [{"member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                     "rack": m.rack_id, "member_epoch": m.member_epoch,
                     "subscribed": list(m.subscribed_topic_names),
                     "assignment": {tp.topic_name: list(tp.partitions) for tp in m.assignment.topic_partitions}}
                    for m in d.members]
            if as_json:
                out_json({"group": d.group_id, "state": d.group_state, "members": members})
                return EXIT_OK
            if not members:
                err_console().print(f"Share group '{d.group_id}' has no active members.")
                return EXIT_OK
            table = Table("GROUP", "MEMBER-ID", "CLIENT-ID", "HOST", "EPOCH", "ASSIGNMENT", box=None, pad_edge=False)
            for m in d.members:
                table.add_row(d.group_id, m.member_id, m.client_id, m.client_host, str(m.member_epoch), _assignment(m))
            console().print(table)
            return EXIT_OK
        g = client.describe_offsets(group)
        if g.error_code != ErrorCode.none:
            fail(prog, f"cannot read offsets of '{group}': {error_name(g.error_code)}"
                 + (f" ({g.error_message})" if g.error_message else ""), EXIT_FAILED)
        rows: list[_OffsetRow] = []
        for t in g.topics:
            for p in t.partitions:
                rows.append({"topic": t.topic_name, "partition": p.partition_index,
                             "start_offset": p.start_offset if p.start_offset >= 0 else None,
                             "lag": p.lag if p.lag >= 0 else None,
                             "error": error_name(p.error_code) if p.error_code != ErrorCode.none else None})
        rows.sort(key=lambda r: (r["topic"], r["partition"]))
        if as_json:
            out_json({"group": d.group_id, "state": d.group_state, "offsets": rows})
            return EXIT_OK
        if d.group_state == "Empty":
            err_console().print(f"Share group '{d.group_id}' has no active members.")
        if not rows:
            console().print(f"Share group '{d.group_id}' has no offset information.")
            return EXIT_OK
        table = Table("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG", box=None, pad_edge=False)
        for r in rows:
            table.add_row(d.group_id, r["topic"], str(r["partition"]),
                          "-" if r["start_offset"] is None else str(r["start_offset"]),
                          r["error"] or ("-" if r["lag"] is None else str(r["lag"])))
        console().print(table)
        return EXIT_OK

    run_client(prog, bootstrap_server, timeout, go)


# -- reset-offsets -----------------------------------------------------------------------------
def parse_topic_partitions(prog: str, specs: list[str]) -> dict[str, list[int] | None]:
    """``T`` (all partitions) or ``T:0,1,2``; repeated topics merge."""
    out: dict[str, list[int] | None] = {}
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            fail(prog, f"bad --topic {spec!r}: expected TOPIC or TOPIC:P[,P...]")
        if not sep:
            out[topic] = None
            continue
        try:
            ps = sorted({int(p) for p in parts.split(",")})
        except ValueError:
            fail(prog, f"bad --topic {spec!r}: partitions must be integers, e.g. {topic}:0,1,2")
        if any(p < 0 for p in ps):
            fail(prog, f"bad --topic {spec!r}: partitions must be >= 0")
        if topic in out and out[topic] is None:
            continue
        out[topic] = sorted(set(out.get(topic) or []) | set(ps))
    return out


def parse_datetime_ms(prog: str, text: str) -> int:
    """ISO-8601 date-time; without a zone it is local time (as in Kafka's tools)."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        fail(prog, f"bad --to-datetime {text!r}: expected ISO-8601, e.g. 2026-01-31T23:57:00.000 or "
                   "2026-01-31T23:57:00+01:00")
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


@app.command("reset-offsets", cls=OneLineCommand)
def reset_offsets(
    bootstrap_server: str = BOOTSTRAP,
    group: str = typer.Option(..., "--group", "-g", help="The share group (it must have no active members)."),
    topic: list[str] = typer.Option(None, "--topic", "-t", help="TOPIC or TOPIC:P[,P...]; repeatable."),
    all_topics: bool = typer.Option(False, "--all-topics", help="Every topic the group has state for."),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="Reset to the log start."),
    to_latest: bool = typer.Option(False, "--to-latest", help="Reset to the log end."),
    to_datetime: str = typer.Option(None, "--to-datetime", help="Reset to the first record at or after this "
                                    "ISO-8601 time (local time without a zone)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only show the new start offsets (the default)."),
    execute: bool = typer.Option(False, "--execute", help="Apply the reset."),
    as_json: bool = JSON,
    timeout: float = TIMEOUT,
) -> None:
    """Reset a share group's start offsets (SPSO); in-flight state and delivery counts are discarded."""
    prog = "kshare groups reset-offsets"
    if sum((to_earliest, to_latest, to_datetime is not None)) != 1:
        fail(prog, "choose exactly one of --to-earliest, --to-latest, --to-datetime")
    if dry_run and execute:
        fail(prog, "choose one of --dry-run and --execute")
    if bool(topic) == all_topics:
        fail(prog, "give --topic (repeatable) or --all-topics")
    wanted = parse_topic_partitions(prog, topic or [])
    spec = EARLIEST if to_earliest else LATEST if to_latest else parse_datetime_ms(prog, to_datetime)

    def go(client: AdminClient) -> int:
        d = client.describe_group(group)
        if d.error_code not in (ErrorCode.none, ErrorCode.group_id_not_found):
            _require_group(prog, d)
        if d.error_code == ErrorCode.none and d.members:
            fail(prog, f"share group '{group}' has {len(d.members)} active member(s); stop them before "
                       "resetting offsets", EXIT_FAILED)
        targets = dict(wanted)
        if all_topics:
            if d.error_code == ErrorCode.group_id_not_found:
                fail(prog, f"share group '{group}' does not exist (use --topic to initialize it)", EXIT_FAILED)
            current = client.describe_offsets(group)
            for t in current.topics:
                targets[t.topic_name] = sorted(p.partition_index for p in t.partitions)
            if not targets:
                fail(prog, f"share group '{group}' has no offsets to reset", EXIT_FAILED)
        known = client.partitions(list(targets))
        resolved: dict[str, list[int]] = {}
        for t, ps in targets.items():
            have = known.get(t)
            if not isinstance(have, list):
                fail(prog, f"topic '{t}' does not exist", EXIT_FAILED)
            missing = sorted(set(ps or []) - set(have))
            if missing:
                fail(prog, f"topic '{t}' has no partition {missing[0]} (partitions 0..{len(have) - 1})", EXIT_FAILED)
            resolved[t] = ps if ps is not None else have
        with err_console().status("resolving offsets...", spinner="dots") if not as_json else nullcontext():
            offsets = client.list_offsets(resolved, spec)
            if spec >= 0 and any(v == -1 for v in offsets.values()):  # no record that recent: the log end
                ends = client.list_offsets({t: [p for p in ps if offsets[(t, p)] == -1] for t, ps in resolved.items()
                                            if any(offsets[(t, p)] == -1 for p in ps)}, LATEST)
                offsets.update(ends)
        bad = {k: v for k, v in offsets.items() if isinstance(v, ErrorCode)}
        if bad:
            (t, p), bad_code = next(iter(sorted(bad.items())))
            fail(prog, f"cannot list offsets of {t}-{p}: {error_name(bad_code)}", EXIT_FAILED)
        plan = {t: {p: int(offsets[(t, p)]) for p in ps} for t, ps in resolved.items()}
        rows: list[_ResetRow] = [{"topic": t, "partition": p, "new_start_offset": o, "error": None}
                for t, ps in sorted(plan.items()) for p, o in sorted(ps.items())]
        code = EXIT_OK
        if execute:
            with err_console().status("resetting...", spinner="dots") if not as_json else nullcontext():
                resp = client.alter_offsets(group, plan)
            if resp.error_code != ErrorCode.none:
                msg = resp.error_message or error_name(resp.error_code)
                fail(prog, f"reset refused: {error_name(resp.error_code)}: {msg}", EXIT_FAILED)
            errors = {(t.topic_name, p.partition_index): (p.error_code, p.error_message)
                      for t in resp.responses for p in t.partitions if p.error_code != ErrorCode.none}
            for r in rows:
                if (r["topic"], r["partition"]) in errors:
                    c, m = errors[(r["topic"], r["partition"])]
                    r["error"] = error_name(c) + (f": {m}" if m else "")
                    code = EXIT_FAILED
        if as_json:
            out_json({"group": group, "executed": execute, "offsets": rows})
            return code
        table = Table("GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET", *(["STATUS"] if execute else []),
                      box=None, pad_edge=False)
        for r in rows:
            status = [r["error"] or "reset"] if execute else []
            table.add_row(group, r["topic"], str(r["partition"]), str(r["new_start_offset"]), *status)
        console().print(table)
        if not execute:
            err_console().print("Dry run: nothing changed. Add --execute to apply.")
        return code

    run_client(prog, bootstrap_server, timeout, go)


# -- delete-offsets ----------------------------------------------------------------------------
@app.command("delete-offsets", cls=OneLineCommand)
def delete_offsets(
    bootstrap_server: str = BOOTSTRAP,
    group: str = typer.Option(..., "--group", "-g", help="The share group (it must have no active members)."),
    topic: list[str] = typer.Option(..., "--topic", "-t", help="Topic whose state to delete; repeatable."),
    as_json: bool = JSON,
    timeout: float = TIMEOUT,
) -> None:
    """Delete a share group's state for whole topics (consumption of them starts over)."""
    prog = "kshare groups delete-offsets"
    if any(":" in t for t in topic):
        fail(prog, "delete-offsets works on whole topics: give --topic TOPIC without partitions")

    def go(client: AdminClient) -> int:
        resp = client.delete_offsets(group, list(dict.fromkeys(topic)))
        if resp.error_code == ErrorCode.group_id_not_found:
            fail(prog, f"share group '{group}' does not exist", EXIT_FAILED)
        if resp.error_code != ErrorCode.none:
            fail(prog, f"{error_name(resp.error_code)}: {resp.error_message or 'refused'}", EXIT_FAILED)
        rows = [{"topic": t.topic_name,
                 "error": None if t.error_code == ErrorCode.none else
                 error_name(t.error_code) + (f": {t.error_message}" if t.error_message else "")}
                for t in resp.responses]
        return _report_deletions({"group": group, "topics": rows} if as_json else None, rows, "topic")

    run_client(prog, bootstrap_server, timeout, go)


def _report_deletions(json_doc: Any, rows: list[dict], what: str) -> int:
    """Print per-item deletion outcomes (JSON when ``json_doc`` is given, else a table); exit code."""
    if json_doc is not None:
        out_json(json_doc)
    else:
        table = Table(what.upper(), "STATUS", box=None, pad_edge=False)
        for r in rows:
            table.add_row(r[what], r["error"] or "deleted")
        console().print(table)
    return EXIT_FAILED if any(r["error"] for r in rows) else EXIT_OK


# -- delete ------------------------------------------------------------------------------------
@app.command("delete", cls=OneLineCommand)
def delete(
    bootstrap_server: str = BOOTSTRAP,
    group: list[str] = typer.Option(..., "--group", "-g", help="Share group to delete; repeatable."),
    as_json: bool = JSON,
    timeout: float = TIMEOUT,
) -> None:
    """Delete share groups without active members, with their state and configs."""
    prog = "kshare groups delete"

    def go(client: AdminClient) -> int:
        result = client.delete_groups(list(dict.fromkeys(group)))
        explain = {ErrorCode.non_empty_group: "the group has active members",
                   ErrorCode.group_id_not_found: "no such share group"}
        rows = [{"group": g, "error": None if c == ErrorCode.none else
                 f"{error_name(c)}: {explain.get(c, 'refused')}"} for g, c in result.items()]
        return _report_deletions(rows if as_json else None, rows, "group")

    run_client(prog, bootstrap_server, timeout, go)
