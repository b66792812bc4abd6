"""``kshare configs``: read and change a share group's ``share.*`` configs (GROUP resources)."""

from __future__ import annotations

import typer
from kio.schema.errors import ErrorCode
from rich.table import Table

from ..config import GROUP_CONFIG_NAMES
from .groups import (
    BOOTSTRAP,
    EXIT_FAILED,
    EXIT_OK,
    JSON,
    TIMEOUT,
    OneLineCommand,
    OneLineGroup,
    console,
    error_name,
    fail,
    out_json,
    run_client,
)
from ..protocol.constants import AlterConfigOp, ConfigSource
from .kclient import AdminClient

OP_SET, OP_DELETE = AlterConfigOp.SET, AlterConfigOp.DELETE
_SOURCES = {ConfigSource.GROUP_CONFIG: "group", ConfigSource.DEFAULT_CONFIG: "default",
            ConfigSource.STATIC_BROKER_CONFIG: "sidecar", ConfigSource.DYNAMIC_BROKER_CONFIG: "dynamic"}

app = typer.Typer(help="Per-group share.* configs (kafka-configs --entity-type groups).", no_args_is_help=True,
                  cls=OneLineGroup)


@app.command("get", cls=OneLineCommand)
def get(
    bootstrap_server: str = BOOTSTRAP,
    group: str = typer.Option(..., "--group", "-g", help="The share group."),
    key: list[str] = typer.Option(None, "--key", "-k", help="Only this config; repeatable."),
    as_json: bool = JSON,
    timeout: float = TIMEOUT,
) -> None:
    """Show a group's effective share.* configs and where each value comes from."""
    prog = "kshare configs get"
    for k in key or []:
        if k not in GROUP_CONFIG_NAMES:
            fail(prog, f"{k} is not a group config: allowed keys are {', '.join(GROUP_CONFIG_NAMES)}")

    def go(client: AdminClient) -> int:
        res = client.describe_group_configs(group, key or None)
        if res.error_code != ErrorCode.none:
            fail(prog, f"{error_name(res.error_code)}: {res.error_message or 'refused'}", EXIT_FAILED)
        rows = [{"name": c.name, "value": c.value, "source": _SOURCES.get(c.config_source, str(c.config_source))}
                for c in res.configs]
        if as_json:
            out_json({"group": group, "configs": rows})
            return EXIT_OK
        table = Table("NAME", "VALUE", "SOURCE", box=None, pad_edge=False)
        for r in rows:
            table.add_row(r["name"], r["value"], r["source"])
        console().print(table)
        return EXIT_OK

    run_client(prog, bootstrap_server, timeout, go)


@app.command("set", cls=OneLineCommand)
def set_(
    assignments: list[str] = typer.Argument(..., metavar="KEY=VALUE...", help="Configs to set."),
    bootstrap_server: str = BOOTSTRAP,
    group: str = typer.Option(..., "--group", "-g", help="The share group (it need not exist yet)."),
    validate_only: bool = typer.Option(False, "--validate-only", help="Check the values, change nothing."),
    as_json: bool = JSON,
    timeout: float = TIMEOUT,
) -> None:
    """Set share.* configs of a group, e.g. share.auto.offset.reset=earliest."""
    prog = "kshare configs set"
    ops = []
    for a in assignments:
        name, sep, value = a.partition("=")
        if not sep or not name:
            fail(prog, f"bad assignment {a!r}: expected KEY=VALUE, e.g. share.auto.offset.reset=earliest")
        ops.append((name.strip(), OP_SET, value.strip()))
    _alter(prog, bootstrap_server, group, ops, validate_only, as_json, timeout)


@app.command("delete", cls=OneLineCommand)
def delete(
    keys: list[str] = typer.Argument(..., metavar="KEY...", help="Configs to return to the sidecar default."),
    bootstrap_server: str = BOOTSTRAP,
    group: str = typer.Option(..., "--group", "-g", help="The share group."),
    as_json: bool = JSON,
    timeout: float = TIMEOUT,
) -> None:
    """Remove per-group overrides (back to the sidecar's defaults)."""
    _alter("kshare configs delete", bootstrap_server, group, [(k, OP_DELETE, None) for k in keys], False, as_json,
           timeout)


def _alter(prog, bootstrap, group, ops, validate_only, as_json, timeout) -> None:
    def go(client: AdminClient) -> int:
        res = client.alter_group_configs(group, ops, validate_only)
        ok = res.error_code == ErrorCode.none
        if as_json:
            out_json({"group": group, "ok": ok, "validate_only": validate_only,
                      "error": None if ok else error_name(res.error_code), "message": res.error_message})
        elif ok:
            verb = "valid" if validate_only else "updated"
            console().print(f"Configs for share group '{group}' {verb}: "
                            + ", ".join(n if v is None else f"{n}={v}" for n, _op, v in ops))
        if not ok:
            if not as_json:
                fail(prog, f"{error_name(res.error_code)}: {res.error_message or 'refused'}", EXIT_FAILED)
            return EXIT_FAILED
        return EXIT_OK

    run_client(prog, bootstrap, timeout, go)
