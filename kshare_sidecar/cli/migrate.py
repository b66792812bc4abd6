"""``kshare state migrate-to-native`` and ``kshare state migrate-from-native`` (docs/migration.md).

Reach the backend as ``kshare state migrate`` does (``-b`` or the sidecar's ``bootstrap.servers``
from ``--config``, with its ``backend.*`` security settings), read kshare's state from the state
topic, and move share groups to a cluster with native share groups (``--native``, the backend
itself by default) or back. A dry run by default: it prints, per share-partition, the start
offset that moves and how many records will be delivered again; ``--execute`` moves. kshare's side
is written through a running sidecar (``--sidecar``, on a PLAINTEXT listener). Exit codes: 0 the
move can be made (dry run) or was made, 1 refused or failed (one line per group on stderr), 2 bad
arguments or configuration, 3 a cluster could not be reached.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ..config import ConfigError, load_config
from .groups import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, console, out_json

if TYPE_CHECKING:
    from ..backend.security import BackendSecurity
    from ..persist.settings import TopicSettings
    from ..migrate.plan import GroupPlan

GROUPS = typer.Argument(..., help="Share groups to move.", show_default=False)
BOOTSTRAP = typer.Option(None, "--bootstrap-server", "-b", help="Backend cluster holding the state topic, host:port[,...]")
CONFIG = typer.Option(None, "--config", help="The sidecar's TOML config file (backend address and security)")
STATE_TOPIC = typer.Option(None, "--state-topic", help="State topic (default: state.topic)")
NATIVE = typer.Option(None, "--native", help="Cluster with native share groups (default: the backend)")
SIDECAR = typer.Option(None, "--sidecar", help="A sidecar serving this state topic, host:port (PLAINTEXT)")
EXECUTE = typer.Option(False, "--execute", help="Move (default: report only)")
DRAIN = typer.Option(False, "--wait-for-drain", help="Wait until nothing would be delivered again and the "
                     "consumers have stopped, then move")
DRAIN_TIMEOUT = typer.Option(600.0, "--drain-timeout", help="Seconds --wait-for-drain waits", min=1)
JSON = typer.Option(False, "--json", help="Print the plans as JSON")
TIMEOUT = typer.Option(30.0, "--timeout", help="Seconds to wait for each answer", min=0.1)
LOG_LEVEL = typer.Option("WARNING", "--log-level", help="DEBUG, INFO, WARNING, ERROR")


def to_native(groups: list[str] = GROUPS, bootstrap_server: str = BOOTSTRAP, config: Path = CONFIG,
              state_topic: str = STATE_TOPIC, native: str = NATIVE, sidecar: str = SIDECAR, execute: bool = EXECUTE,
              wait_for_drain: bool = DRAIN, drain_timeout: float = DRAIN_TIMEOUT, as_json: bool = JSON,
              timeout: float = TIMEOUT, log_level: str = LOG_LEVEL) -> None:
    """Move share groups from kshare to a Kafka 4.2+ cluster's native share groups."""
    _main("migrate-to-native", groups, bootstrap_server, config, state_topic, native, sidecar, execute,
          wait_for_drain, drain_timeout, as_json, timeout, log_level)


def from_native(groups: list[str] = GROUPS, bootstrap_server: str = BOOTSTRAP, config: Path = CONFIG,
                state_topic: str = STATE_TOPIC, native: str = NATIVE, sidecar: str = SIDECAR, execute: bool = EXECUTE,
                wait_for_drain: bool = DRAIN, drain_timeout: float = DRAIN_TIMEOUT, as_json: bool = JSON,
                timeout: float = TIMEOUT, log_level: str = LOG_LEVEL) -> None:
    """Move share groups from a Kafka cluster's native share groups to kshare."""
    _main("migrate-from-native", groups, bootstrap_server, config, state_topic, native, sidecar, execute,
          wait_for_drain, drain_timeout, as_json, timeout, log_level)


def _main(command: str, groups: list[str], bootstrap: str | None, config: Path | None, state_topic: str | None,
          native: str | None, sidecar: str | None, execute: bool, wait: bool, drain_timeout: float, as_json: bool,
          timeout: float, log_level: str) -> None:
    prog = f"kshare state {command}"
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(config, overrides={"bootstrap.servers": bootstrap, "state.topic": state_topic})
        if cfg.plugins.persister != "topic":
            raise ConfigError(f"persister = {cfg.plugins.persister!r} keeps no state topic; nothing to migrate")
        from ..default_plugins.persisters import persister_options
        from ..backend.clients import BackendClients
        from ..backend.security import BackendSecurity

        security = BackendSecurity.from_config(cfg)
        options = persister_options(cfg, BackendClients.from_config(cfg, security))["settings"]
    except ConfigError as exc:
        typer.echo(f"{prog}: error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    run = _Run(prog, command, options, security, native, sidecar, timeout, cfg.group_config())
    raise typer.Exit(asyncio.run(run(groups, execute=execute, wait=wait, drain_timeout=drain_timeout,
                                     as_json=as_json)))


class _Run:
    def __init__(self, prog: str, command: str, options: TopicSettings, security: BackendSecurity, native: str | None,
                 sidecar: str | None, timeout: float, defaults: dict) -> None:
        self.prog, self.command, self.options, self.defaults = prog, command, options, defaults
        self.security, self.native, self.sidecar, self.timeout = security, native, sidecar, timeout

    async def __call__(self, groups: list[str], *, execute: bool, wait: bool, drain_timeout: float,
                       as_json: bool) -> int:
        from ..migrate.admin import AdminError, ClusterAdmin
        from ..migrate.kshare import KshareState
        from ..migrate.moves import Mover, Sides
        from ..persist.errors import PersistError
        from ..persist.topic import TopicPersister

        backend_address = self.options.bootstrap_servers
        backend = ClusterAdmin(backend_address, security=self.security, timeout_s=self.timeout)
        native = backend if self.native in (None, backend_address) else \
            ClusterAdmin(self.native, security=self.security, timeout_s=self.timeout)
        sidecar = ClusterAdmin(self.sidecar, timeout_s=self.timeout) if self.sidecar else None
        state = KshareState(TopicPersister(dataclasses.replace(self.options, create_topic=False)))
        sides = Sides(state, backend, native, sidecar, state_topic=self.options.topic)
        mover = Mover(sides, execute=execute, wait_for_drain=wait, drain_timeout_s=drain_timeout,
                      kshare_defaults=self.defaults,
                      progress=lambda line: typer.echo(f"{self.prog}: {line}", err=True))
        try:
            plans = await (mover.to_native if self.command == "migrate-to-native" else mover.from_native)(groups)
        except PersistError as exc:
            typer.echo(f"{self.prog}: error: {exc}", err=True)
            return EXIT_FAILED
        except (AdminError, OSError) as exc:
            typer.echo(f"{self.prog}: error: {exc}", err=True)
            return EXIT_UNREACHABLE
        except Exception as exc:  # noqa: BLE001 - aiokafka's connection errors vary: one line
            typer.echo(f"{self.prog}: error: backend {backend_address}: {exc!r}", err=True)
            return EXIT_UNREACHABLE
        finally:
            for admin in {id(a): a for a in (backend, native, sidecar) if a is not None}.values():
                await admin.close()
            await state.close()
        if as_json:
            out_json([p.as_json() for p in plans])
        else:
            for plan in plans:
                _print(plan, execute)
        for plan in plans:
            if plan.refusal:
                typer.echo(f"{self.prog}: refused: {plan.refusal}", err=True)
        return EXIT_FAILED if any(p.refusal for p in plans) else EXIT_OK


def _print(plan: GroupPlan, execute: bool) -> None:
    out = console()
    if not plan.partitions and plan.refusal:
        return  # refused before anything was read: the one line says why
    out.print(f"share group {plan.group}: {plan.source} -> {plan.target}")
    table = Table("TOPIC", "PARTITION", "START-OFFSET", "DELIVERED-AGAIN", "COUNTS-RESET", "STATUS", box=None,
                  pad_edge=False)
    for p in plan.partitions:
        table.add_row(p.topic, str(p.partition), str(p.start_offset) if p.start_offset >= 0 else "-",
                      str(p.redelivered), str(p.counts_reset), p.error or ("moved" if plan.moved else "-"))
    out.print(table)
    if plan.carried:
        out.print("configs carried: " + ", ".join(f"{k}={v}" for k, v in plan.carried.items()))
    for key, why in plan.not_carried.items():
        out.print(f"config not carried: {key}={why}")
    for note in plan.notes:
        out.print(f"note: {note}")
    out.print(f"records delivered again after the move: {plan.redelivered} (acknowledged or archived beyond the "
              f"start offsets: the target keeps only the start offset); released records whose delivery counts "
              f"start over: {plan.counts_reset}")
    if plan.moved:
        out.print(f"moved share group {plan.group}")
    elif not execute and not plan.refusal:
        out.print("dry run: nothing written; run again with --execute to move (the group's consumers stopped)")


__all__ = ["from_native", "to_native"]
