"""``kshare state``: the sidecar's state topic.

``migrate`` moves share-partition records written in the single-sidecar layout of older builds
(placed by the whole key) to their topic-partition home (docs/persistence.md, "Layout"). Sidecars
do it themselves when they start (a single sidecar after its takeover, a cluster member before it
joins); the command is for doing it ahead of an upgrade, or when a cluster member refused a state
partition holding such records. Dry run by default, as ``kshare groups reset-offsets``: it reads the
topic and reports; ``--execute`` takes every state partition over (fencing whichever sidecar runs
on the topic: stop them first), moves the records, writes the layout records and gives the
partitions up. Exit codes: 0 done or nothing to move, 1 records to move (dry run) or the move
failed, 2 bad configuration, 3 the backend could not be reached.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..config import ConfigError, load_config
from . import migrate as migrate_cli
from .groups import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, OneLineCommand

if TYPE_CHECKING:
    from ..persist.settings import TopicSettings

app = typer.Typer(help="The sidecar's state topic, and moving share groups to and from native Kafka.",
                  no_args_is_help=True)
app.command("migrate-to-native", cls=OneLineCommand)(migrate_cli.to_native)
app.command("migrate-from-native", cls=OneLineCommand)(migrate_cli.from_native)


@app.command(cls=OneLineCommand)
def migrate(
    bootstrap_server: str = typer.Option(None, "--bootstrap-server", "-b", help="Backend cluster, host:port[,...]"),
    config: Path = typer.Option(None, "--config", help="The sidecar's TOML config file"),
    state_topic: str = typer.Option(None, "--state-topic", help="State topic (default: state.topic)"),
    execute: bool = typer.Option(False, "--execute", help="Move the records (default: report only)"),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON"),
    log_level: str = typer.Option("WARNING", "--log-level", help="DEBUG, INFO, WARNING, ERROR"),
) -> None:
    """Move share-partition records of the older single-sidecar layout to their topic-partition home."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(config, overrides={"bootstrap.servers": bootstrap_server, "state.topic": state_topic})
        if cfg.plugins.persister != "topic":
            raise ConfigError(f"persister = {cfg.plugins.persister!r} keeps no state topic; nothing to migrate")
        from ..default_plugins.persisters import persister_options
        from ..backend.clients import BackendClients
        from ..backend.security import BackendSecurity

        clients = BackendClients.from_config(cfg, BackendSecurity.from_config(cfg))
        settings = persister_options(cfg, clients)["settings"]
    except ConfigError as exc:
        typer.echo(f"kshare state migrate: error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    raise typer.Exit(asyncio.run(_migrate(settings, execute, as_json)))


async def _migrate(settings: TopicSettings, execute: bool, as_json: bool) -> int:
    import dataclasses

    from ..persist.errors import PersistError
    from ..persist.topic import TopicPersister

    probe = TopicPersister(settings)
    try:
        report = await probe.layout_report()
    except PersistError as exc:
        typer.echo(f"kshare state migrate: error: {exc}", err=True)
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 - aiokafka's connection errors vary: one line
        typer.echo(f"kshare state migrate: error: backend {settings.bootstrap_servers}: {exc!r}", err=True)
        return EXIT_UNREACHABLE
    finally:
        await probe.close()
    topic, partitions = probe.topic, probe.partitions
    misplaced = len(report.misplaced)
    out = {"topic": topic, "partitions": partitions, "misplaced": misplaced,
           "layout_records": sorted(report.layouts.items()), "moved": 0, "executed": False}
    code = EXIT_OK
    if misplaced and execute:
        mover = TopicPersister(dataclasses.replace(settings, partitions=partitions))
        try:
            await mover.start()  # takeover of every partition, then persist/layout.py's move
            out.update(moved=misplaced, executed=True)
        except PersistError as exc:
            typer.echo(f"kshare state migrate: error: {exc}", err=True)
            code = EXIT_FAILED
        finally:
            await mover.close()
    elif misplaced:
        code = EXIT_FAILED
    if as_json:
        typer.echo(json.dumps(out))
    elif not misplaced:
        typer.echo(f"state topic {topic} ({partitions} partitions): every share-partition record is at its "
                   f"topic-partition home; nothing to move")
    elif out["executed"]:
        typer.echo(f"state topic {topic} ({partitions} partitions): moved {misplaced} share-partition records to "
                   f"their topic-partition home")
    elif code == EXIT_FAILED and execute:
        pass
    else:
        typer.echo(f"state topic {topic} ({partitions} partitions): {misplaced} share-partition records are in the "
                   f"single-sidecar layout of older builds; run again with --execute to move them (it takes every "
                   f"state partition over: stop the sidecars on this topic first)")
    return code
