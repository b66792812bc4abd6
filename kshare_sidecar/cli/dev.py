"""``kshare dev``: local development helpers (a real broker on loopback)."""

from __future__ import annotations

import json
import signal
import sys
import threading
from typing import Any

import typer

from ..testing import KAFKA_VERSIONS, TANSU_VERSION, HarnessError, KafkaBroker, TansuBroker
from ..testing.tansu import STORAGE_ENGINES, install

app = typer.Typer(help="Local development helpers.", no_args_is_help=True)


@app.command()
def broker(
    kafka: str = typer.Option("3.9", "--kafka", help=f"Kafka release to start: {', '.join(sorted(KAFKA_VERSIONS))} "
                                                     "(or a pinned full version)"),
    zookeeper: bool | None = typer.Option(None, "--zookeeper/--kraft",
                                          help="Metadata mode where the release has both (3.x); default: ZooKeeper "
                                               "for 2.8 and 3.5, KRaft from 3.7"),
    brokers: int = typer.Option(1, "--brokers", min=1, max=9, help="Brokers in the cluster"),
    share_groups: bool | None = typer.Option(None, "--share-groups/--no-share-groups",
                                             help="KIP-932 share groups (4.x); default: on for 4.3 and 4.4, off for "
                                                  "4.0 (early access) and 4.1 (preview)"),
) -> None:
    """Start Apache Kafka on loopback (KRaft, or with its own ZooKeeper); print one JSON line when ready.

    Runs until SIGINT or SIGTERM, then stops the brokers (and ZooKeeper) and removes their directories.
    """
    from ..testing.multibroker import KafkaCluster

    def build() -> Any:
        if brokers == 1:
            return KafkaBroker(kafka, zookeeper=zookeeper, share_groups=share_groups)
        return KafkaCluster(kafka, brokers=brokers, zookeeper=zookeeper, share_groups=share_groups)

    _serve(build, "broker", "Kafka")


@app.command(help=f"Start tansu {TANSU_VERSION} (a Kafka-compatible broker that is not Apache Kafka) on "
                  "loopback; print one JSON line when ready. Needs its binary: kshare dev install-tansu.")
def tansu(
    storage: str = typer.Option("sqlite", "--storage", help=f"Storage engine: {', '.join(STORAGE_ENGINES)}"),
) -> None:
    _serve(lambda: TansuBroker(storage=storage), "tansu", "tansu")


@app.command("install-tansu", help=f"Build tansu {TANSU_VERSION} with cargo into the harness cache unless it is "
                                   "there (~40 min on 2 cores, at the lowest CPU priority); print the binary's path.")
def install_tansu() -> None:
    try:
        typer.echo(str(install()))
    except HarnessError as exc:
        typer.echo(f"kshare dev install-tansu: {exc}", err=True)
        raise typer.Exit(2) from None


def _serve(factory: Any, command: str, product: str) -> None:
    """Start what ``factory`` builds, print its JSON line, run until SIGINT/SIGTERM, stop it."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        kb = factory()
        kb.start()
    except HarnessError as exc:
        typer.echo(f"kshare dev {command}: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        line = {"bootstrap": kb.bootstrap, "version": kb.version}
        if product == "Kafka":
            line |= {"metadata": kb.metadata, "brokers": len(getattr(kb, "nodes", [kb])),
                     "share_groups": kb.share_groups}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        what = f"{product} {kb.version}" + (" with ZooKeeper" if getattr(kb, "zookeeper", False) else "")
        typer.echo(f"{what} ready in {kb.startup_seconds:.1f} s; Ctrl-C stops it", err=True)
        while not stop.wait(0.5):
            if not kb.running:
                typer.echo(f"kshare dev {command}: {product} exited unexpectedly; log tail:\n{kb.log_tail()}",
                           err=True)
                raise typer.Exit(1)
    finally:
        kb.stop()
