"""``kshare capacity``: how many sidecars and how much memory a workload needs (docs/capacity.md)."""

from __future__ import annotations

import dataclasses
import sys

import orjson
import typer

from ..capacity import UnitCosts, Workload, fmt, plan


def capacity(
    records_per_second: float = typer.Option(..., "--records-per-second", help="Records delivered per second, "
                                             "all share groups together.", min=0),
    record_bytes: float = typer.Option(1024, help="Average record size (value, key and headers).", min=1),
    share_partitions: int = typer.Option(0, help="Share-partitions with state: each group × the partitions of "
                                         "its topics.", min=0),
    active_share_partitions: int = typer.Option(None, help="Of those, the ones fetched from recently (the rest are "
                                                "dropped from memory while idle); default: all.", min=0),
    members: int = typer.Option(0, help="Share consumers (group members), all groups together.", min=0),
    heartbeat_interval_ms: int = typer.Option(5000, help="group.share.heartbeat.interval.ms.", min=1),
    records_per_fetch: float = typer.Option(500, help="Records a ShareFetch delivers (max.poll.records).", min=1),
    partitions_per_fetch: float = typer.Option(1.0, help="Share-partitions those records come from.", min=1),
    target_utilization: float = typer.Option(0.6, help="Share of a core each sidecar may use (one event loop: "
                                             "at most 1).", min=0.01, max=1.0),
    spare: int = typer.Option(1, help="Sidecars that may be down with the rest still under the target.", min=0),
    memory_limit_mb: float = typer.Option(None, help="Memory each sidecar may use (adds sidecars when exceeded).",
                                          min=1),
    as_json: bool = typer.Option(False, "--json", help="Print the plan and the unit costs as JSON."),
) -> None:
    """How many sidecars and how much memory a workload needs, from the measured unit costs."""
    w = Workload(records_per_s=records_per_second, record_bytes=record_bytes, share_partitions=share_partitions,
                 active_share_partitions=active_share_partitions, members=members,
                 heartbeat_interval_ms=heartbeat_interval_ms, records_per_fetch=records_per_fetch,
                 partitions_per_fetch=partitions_per_fetch)
    p = plan(w, UnitCosts(), target_utilization=target_utilization, spare=spare, memory_limit_mb=memory_limit_mb)
    if as_json:
        out = {"workload": dataclasses.asdict(w), "plan": dataclasses.asdict(p)}
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    for line in fmt(p):
        typer.echo(line)
    typer.echo(f"unit costs:          {UnitCosts().source}")
