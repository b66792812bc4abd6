"""Run one sequence of operations on both targets, step by step, and report the first difference.

Each step runs on both targets at the same time (one thread per side), so that both see the
same pace: a fetch that parks until a lock expires on one side does not delay the other side's
clock, and a ``Wait`` sleeps once for both.
"""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .model import NO_TOPIC, PARTITIONS, TOPIC_A, TOPIC_B, TOPIC_NEW, Side  # noqa: F401 (re-exported)
from .ops import FindCoordinator, Produce, SetConfig, Wait
from .passthrough import delete_new_topic

MEMBERS = ("a", "b", "c")


class Divergence(AssertionError):
    """The targets answered one step differently; the message is a replayable sequence."""


@dataclass
class Report:
    sequences: int = 0
    operations: int = 0
    dead_letters: int = 0  # dead-letter records compared (dlq.py)
    deliberate: list[str] = field(default_factory=list)


def prologue() -> list[Any]:
    """Find the group's coordinator, as clients do, and start from the earliest offset."""
    return [FindCoordinator(), SetConfig("share.auto.offset.reset", "earliest")]


def run_sequence(ops: Sequence[Any], native: str, kshare: str, *, report: Report | None = None,
                 group: str | None = None) -> list[tuple[Any, Any]]:
    """Run ``prologue() + ops`` on both; raise :class:`Divergence` at the first differing step."""
    group = group or f"parity-{uuid.uuid4().hex[:10]}"
    ids = {name: f"{name}-{uuid.uuid4().hex[:16]}" for name in MEMBERS}
    sides = [Side("native", native, group, ids), Side("kshare", kshare, group, ids)]
    steps = [*prologue(), *ops]
    seen: list[tuple[Any, Any]] = []
    pool = ThreadPoolExecutor(2, thread_name_prefix="parity")
    try:
        for i, op in enumerate(steps):
            if isinstance(op, Wait):
                time.sleep(op.seconds)
                continue
            observed = list(pool.map(op.run, sides))
            seen.append(tuple(observed))
            if report is not None:
                report.operations += 1
                if isinstance(observed[0], dict) and "dead_letters" in observed[0]:
                    report.dead_letters += sum(len(v) for v in observed[0]["dead_letters"].values())
            if observed[0] != observed[1]:
                shown = "\n".join(f"  {o!r}," for o in ops)
                where, a, b = first_difference(observed[0], observed[1])
                raise Divergence(
                    f"step {i} {op!r} differs (group {group}) at {where or 'top'}:\n  native: {a!r}\n  kshare: {b!r}\n"
                    f"whole answers:\n  native: {observed[0]!r}\n  kshare: {observed[1]!r}\n"
                    f"replay: run_sequence([\n{shown}\n], native, kshare)")
    finally:
        pool.shutdown()
        for side in sides:
            delete_new_topic(side)
            side.close()
    if report is not None:
        report.sequences += 1
        if progress := os.environ.get("KSHARE_PARITY_PROGRESS"):  # a long run's running count, in a file
            with open(progress, "a") as out:
                out.write(f"{time.strftime('%H:%M:%S')} {report.sequences} sequences {report.operations} operations "
                          f"{report.dead_letters} dead-letter records\n")
    return seen


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any]:
    """The path of the first place two observations differ, and the two values there."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key, "<absent>") != b.get(key, "<absent>"):
                return first_difference(a.get(key, "<absent>"), b.get(key, "<absent>"), f"{path}/{key}")
    return path, a, b


def seed_topics(bootstrap: str) -> None:
    """Create the parity topics and their first records through ``bootstrap`` (idempotent).

    Partition 0 of ``parity-pa`` gets batches of 5 and 3 records, the others one batch of 4:
    acquisition is aligned to batches, so different batch sizes are part of what is compared.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(t, n, 1) for t, n in PARTITIONS.items() if t not in existing]
    if not new:
        return
    for future in admin.create_topics(new).values():
        future.result(60)
    deadline = time.monotonic() + 30
    while not all(t in admin.list_topics(timeout=10).topics for t in PARTITIONS):
        if time.monotonic() > deadline:
            raise TimeoutError("parity topics did not appear")
        time.sleep(0.2)
    side = Side("seed", bootstrap, "seed", {})
    try:
        for topic, partitions in PARTITIONS.items():
            for p in range(partitions):
                for n in ((5, 3) if (topic, p) == (TOPIC_A, 0) else (4,)):
                    for _ in range(50):
                        if Produce(topic, p, n).run(side)["error"] == 0:
                            break
                        time.sleep(0.2)  # leadership still settling after creation
                    else:
                        raise RuntimeError(f"could not produce to {topic}-{p}")
    finally:
        side.close()
