"""``kshare plugins``: what is loaded, what each plugin registers, versions and failures.

Wired into the root CLI with ``app.add_typer(plugins.app, name="plugins")``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import typer

app = typer.Typer(
    name="plugins",
    help="List loaded plugins, what each registers, and plugins that failed to load.",
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def plugins(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    config: Path = typer.Option(None, "--config", help="The sidecar's TOML config file (plugins.load, "
                                                      "plugins.disable, plugins.trace)"),
) -> None:
    """List plugins (built-ins included), loaded as the sidecar would load them (plugins.* settings,
    from the config file or KSHARE_PLUGINS_*). Exit code 1 when a plugin failed to load."""
    from kshare_sidecar import plugins as plugin_mod
    from kshare_sidecar.config import ConfigError, load_config

    try:
        # listing plugins reaches no backend: a placeholder stands in for the one required key
        cfg = load_config(config, overrides={"bootstrap.servers": "localhost:9092"})
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    plugin_mod.load_configured(cfg.plugins)
    info = plugin_mod.describe()
    if as_json:
        sys.stdout.write(orjson.dumps(info, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_tables(info)
    if info["failures"]:
        raise typer.Exit(1)


def _print_tables(info) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="kshare plugins")
    for col in ("plugin", "distribution", "version", "hooks", "registers"):
        table.add_column(col)
    for p in info["plugins"]:
        registers = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in p["registers"].items())
        name = p["name"] + (" (built-in)" if p["builtin"] else "")
        table.add_row(name, p["distribution"] or "-", p["version"] or "-", ", ".join(p["hooks"]), registers)
    console.print(table)
    for kind in ("assignors", "persisters"):
        t = Table(title=kind)
        t.add_column("name")
        t.add_column("plugin")
        t.add_column("description")
        for name, reg in info[kind].items():
            t.add_row(name, reg["plugin"], reg["description"])
        console.print(t)
    if info["failures"]:
        t = Table(title="failed plugins", style="red")
        for col in ("plugin", "distribution", "stage", "error"):
            t.add_column(col)
        for f in info["failures"]:
            t.add_row(f["name"], f["distribution"] or "-", f["stage"], f["error"])
        console.print(t)
