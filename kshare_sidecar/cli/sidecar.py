"""``kshare sidecar run``: serve share groups for a backend cluster."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from pathlib import Path

import typer

from ..config import ConfigError, SidecarConfig, load_config

app = typer.Typer(help="Run the share-group sidecar.", no_args_is_help=True)


@app.command()
def run(
    bootstrap_server: str = typer.Option(None, "--bootstrap-server", help="Backend cluster, host:port[,...]"),
    listen: str = typer.Option(None, "--listen", help="Listener address, host:port (default 127.0.0.1:9192)"),
    listeners: str = typer.Option(None, "--listeners", help="Kafka's form, NAME://host:port[,...] "
                                  "(e.g. PLAINTEXT://127.0.0.1:9192,SASL_SSL://0.0.0.0:9194); instead of --listen"),
    config: Path = typer.Option(None, "--config", help="TOML config file"),
    node_id: int = typer.Option(None, "--node-id", help="Node id presented to clients"),
    persister: str = typer.Option(None, "--persister", help="Persister plugin (topic, memory)"),
    metrics_port: int = typer.Option(None, "--metrics-port", help="Serve Prometheus metrics on this port"),
    console_listen: str = typer.Option(None, "--console-listen", help="Serve the web console on host:port "
                                       "(docs/console.md)"),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING, ERROR"),
) -> None:
    """Serve KIP-932 share groups on the Kafka protocol, backed by an ordinary cluster."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(config, overrides={"bootstrap.servers": bootstrap_server, "listen": listen,
                                             "listeners": listeners,
                                             "node.id": node_id, "persister": persister,
                                             "metrics.port": metrics_port, "console.listen": console_listen})
        from ..backend.security import BackendSecurity

        BackendSecurity.from_config(cfg)  # unreadable files, missing credentials: one line, exit 2
    except ConfigError as exc:
        typer.echo(f"kshare sidecar: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(asyncio.run(_serve(cfg)))


def _tune_gc() -> None:
    """A sidecar holds hundreds of thousands of long-lived objects (share-partitions, their state
    records, members), and CPython's full collection walks every one: at 100,000 share-partitions
    it took 0.2-0.5 s of CPU, seconds of stalled heartbeats on a busy host, each time enough
    short-lived request objects had been promoted (about every minute at 400 heartbeats/s;
    benchmarks/scale.py, docs/capacity.md). So what start-up recovered is frozen out of the
    collector's walk, and young collections run every 50,000 allocations instead of 700, which
    promotes far fewer objects that die soon after: full collections become rare. Objects freed
    by reference counting (nearly all of them) are unaffected; only reference cycles wait longer."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    from ..metrics import GC_PAUSES

    GC_PAUSES.install()  # kshare_gc_pause_seconds: what the collections still cost


async def _serve(cfg: SidecarConfig) -> int:
    from ..app import Sidecar

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sidecar = Sidecar(cfg)
    try:
        await sidecar.start()
    except Exception as exc:
        from ..backend.diagnose import diagnose

        reason = None
        security = getattr(sidecar, "security", None)
        if security is not None:  # aiokafka hides some refusals: name the real cause
            try:
                reason = await diagnose(cfg.backend.bootstrap_servers, security)
            except Exception:  # noqa: BLE001 - the diagnosis is best effort; the original error stands
                reason = None
        logging.getLogger("kshare.sidecar").error("start-up failed: %s", reason or exc)
        await sidecar.stop()
        return 1
    _tune_gc()
    where = f"{sidecar.node.host}:{sidecar.node.port}"
    if len(sidecar.listeners) > 1:
        where = ", ".join(f"{listener.name}://{listener.host}:{listener.port}" for listener in sidecar.listeners)
    print(f"kshare sidecar listening on {where}", flush=True)
    await stop.wait()
    logging.getLogger("kshare.sidecar").info("stopping")
    await sidecar.stop()
    return 0
