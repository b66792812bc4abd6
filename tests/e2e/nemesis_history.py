"""A finished nemesis run's history (tests/e2e/nemesis_lab.py), read back from what the run left in
its directory — ``run.json``, the clients' event files, ``state.jsonl`` (the state topic's dump) —
for the checker (kshare_sidecar.testing.nemesis). ``python -m tests.e2e.nemesis_history RUN_DIR...``
checks finished runs again (a checker change re-judged on old runs)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_OWNER, KIND_PARTITION
from kshare_sidecar.persist.ownership import share_partition_home
from kshare_sidecar.testing.nemesis import Ack, Delivery, History, Snapshot, check, tenures_from


def history_of(run_dir: Path) -> History:
    """A finished run's history, from what it left in its directory (``run.json``, the clients'
    events, ``state.jsonl``): ``python -m tests.e2e.nemesis_history RUN_DIR`` checks it again."""
    meta = json.loads((run_dir / "run.json").read_text())
    s, group = meta["settings"], meta["group"]  # the lab's Settings, as a dict
    dump = run_dir / "state.jsonl"
    deliveries, acks = [], []
    gone: dict[str, float] = {}  # consumers whose events end without "closed": they died
    for host, path in ((h, run_dir / Path(p).name) for h, p in meta["clients"]):  # the run dir may have moved
        last: dict | None = None
        for line in event_lines(path):
            e = last = json.loads(line)
            if e["ev"] == "rec":
                deliveries.append(Delivery(host, e["p"], e["o"], e["dc"], e["t"], e.get("n"), e.get("lo"), e.get("hi")))
            elif e["ev"] == "ack":
                acks.append(Ack(host, e["p"], e["o"], e["dc"], e["ok"], e["t"], e.get("e")))
        if last is None or last["ev"] != "closed":
            gone[host] = last["t"] if last is not None else 0.0
    # The asyncio worker bounds each hand-out by its ShareFetch's send (lo) and answer (hi); a worker
    # whose instrument stopped seeing its ShareFetches would leave every lo out, and the rules would
    # judge its records by when the application got them: refuse such a history, do not judge it.
    blind = {d.consumer for d in deliveries if d.node is not None} - {
        d.consumer for d in deliveries if d.lo is not None}
    if blind:
        raise ValueError(f"{sorted(blind)}: no delivery carries the send time of its ShareFetch (lo): the asyncio "
                         "worker's stamps (tests/e2e/nemesis_worker.py) no longer see its ShareFetches")
    marks: dict[int, list] = {}
    snaps: dict[int, list[Snapshot]] = {}
    topic_id = None
    ends: dict[int, int] = {}
    starts: dict[int, int] = {}
    for line in event_lines(dump):
        r = json.loads(line)
        if "ends" in r:
            ends = {int(p): e for p, e in r["ends"].items()}
            starts = {int(p): e for p, e in r["starts"].items()}
            continue
        if r["k"] is None or r["v"] is None:
            continue
        kind, ident = codec.decode_key(r["k"].encode())
        if kind == KIND_OWNER:
            epoch, node, released = codec.decode_owner_mark(r["v"].encode())
            marks.setdefault(ident, []).append((r["ts"], epoch, node, released))
        elif kind == KIND_PARTITION and ident.group_id == group:
            topic_id = ident.topic_id
            st = codec.decode_partition(r["v"].encode()).state
            snaps.setdefault(ident.partition, []).append(
                Snapshot(r["o"], r["ts"], st.start_offset, st.state_epoch, st.leader_epoch))
    home = {p: share_partition_home(topic_id, p, s["state_partitions"]) for p in range(s["partitions"])} \
        if topic_id else {}
    heals = [(f["what"], f["healed"]) for f in meta["faults"] if f["healed"] is not None]
    return History(ends=ends, deliveries=deliveries, acks=acks, home=home,
                   tenures={sp: tenures_from(m) for sp, m in marks.items()}, snapshots=snaps,
                   lock_s=s["lock_ms"] / 1000, limit=s["limit"], heals=heals, exits=meta["exits"], gone=gone,
                   starts=starts,
                   reloads={int(p): ts for p, ts in meta.get("reloads", {}).items()})


def log_time(stamp: str) -> float:
    """A sidecar log line's time ("2026-11-29 06:25:23,198", the machine's local time)."""
    day, rest = stamp.split(" ")
    clock, ms = rest.split(",")
    return time.mktime(time.strptime(f"{day} {clock}", "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000


def event_lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if line.strip() and
            (line.endswith("}") or line[0].isdigit())]


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        bound = json.loads((Path(arg) / "run.json").read_text())["settings"]["unserved_bound_s"]
        print(arg, check(history_of(Path(arg)), unserved_bound_s=float(bound)).text())
