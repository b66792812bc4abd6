"""``kshare dev``: local development helpers (a real broker on loopback)."""

from __future__ import annotations

import json
import signal
import sys
import threading

import typer

from ..testing import KAFKA_VERSIONS, HarnessError, KafkaBroker

app = typer.Typer(help="Local development helpers.", no_args_is_help=True)


@app.command()
def broker(
    kafka: str = typer.Option("3.9", "--kafka", help=f"Kafka line to start: {', '.join(KAFKA_VERSIONS)}"),
) -> None:
    """Start a single-node Apache Kafka (KRaft) on loopback; print one JSON line when ready.

    Runs until SIGINT or SIGTERM, then stops the broker's process tree and removes its directory.
    """
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        kb = KafkaBroker(kafka)
        kb.start()
    except HarnessError as exc:
        typer.echo(f"kshare dev broker: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        sys.stdout.write(json.dumps({"bootstrap": kb.bootstrap, "version": kb.version}) + "\n")
        sys.stdout.flush()
        typer.echo(f"Kafka {kb.version} ready in {kb.startup_seconds:.1f} s; Ctrl-C stops it", err=True)
        while not stop.wait(0.5):
            if not kb.running:
                typer.echo(f"kshare dev broker: Kafka exited unexpectedly; log tail:\n{kb.log_tail()}", err=True)
                raise typer.Exit(1)
    finally:
        kb.stop()
