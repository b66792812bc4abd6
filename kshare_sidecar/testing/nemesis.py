"""The nemesis checker: what every client saw and what the state topic holds, judged (pure).

A run of the nemesis (tests/e2e/nemesis_lab.py: a cluster of sidecars under a share-consume
while the network is cut, split, slowed or flapped) yields a :class:`History`; :func:`check`
reads it and names every violation of what a production queue promises:

* **lost** — a produced record nobody had accepted at the end (unless its delivery count reached
  the group's limit: archived, as Kafka does; or its last acknowledgement's outcome was unknown to
  the client — a timeout, an unreachable sidecar, or a client that died holding it before it
  could log the outcome — it was never delivered again and the state topic has it done: counted,
  not a violation), or a share-partition whose final SPSO is not the end of its partition;
* **accepted twice** — two successful acknowledgements of one record; and **delivered after
  accepted** — a record handed out (at the earliest moment its client can bound) after an
  acknowledgement of it was answered without error: the acceptance was durable, or should have been;
* **held twice** — a record delivered while another delivery of it still held its acquisition
  lock: not acknowledged (either way) yet, its lock duration not passed, and no change of owner of
  its state partition in between (a new owner voids the locks of the old, as a new leader does in
  Kafka; a sidecar reloading a share-partition from the state topic keeps its locks,
  share/reload_memory.py, so a reload voids nothing). Times are client times: the poll that returned the record, and what the client
  knows of when the sidecar handed it out (:class:`Delivery`), later than the hand-out by a
  network round trip, hence ``tolerance_s``;
* **count went down** — a later delivery of a record with a smaller delivery count; and a
  **count repeated** — two deliveries with one count with no *unplanned* change of owner in
  between (Kafka's accepted imprecision after a crash: acquisitions are not persisted; a planned
  handover writes them, persist/cluster.py). A sidecar reloading a share-partition from the state
  topic after a write whose outcome it could not know keeps the counts memory had (``reloads``
  are counted, not excused);
* **zombie** — a delivery by a sidecar (where the client names it) after its tenure of the
  record's state partition ended;
* **SPSO went back** — within a state epoch, the state topic's snapshots of a share-partition;
* **unserved** — a partition with records left that nobody delivered from for more than
  ``unserved_bound_s`` after a heal of the network or after an unplanned change of owner;
* **died** — a sidecar process that exited during the run; a **client died** — a consumer that
  stopped before the end of the run (its events end without ``closed``): its partitions go
  unserved until its session times out, and it is the first thing to read about a run.

Tenures come from the state topic's owner records (``["o", p]``: epoch, node, and the handover
mark, persist/codec.py) and their timestamps, written by the sidecars on the same clock as the
clients'.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Delivery:
    """One record handed to the application at ``t`` (its poll's return). The sidecar handed it
    out earlier, at a moment the client can bound: ``lo``..``hi`` (None: ``t``) — the asyncio
    client knows when it sent the ShareFetch that acquired it and when the answer arrived;
    librdkafka's consumer only that it came after its last poll that returned records. A consumer
    stalled in a commit hands out buffered records long after they were acquired, and an answer
    held up by a cut link arrives at TCP's next retransmission, seconds after the sidecar wrote it:
    a rule judging ``t`` alone would read them as handed out then."""

    consumer: str
    p: int
    o: int
    dc: int
    t: float
    node: int | None = None
    lo: float | None = None
    hi: float | None = None

    @property
    def earliest(self) -> float:
        # never after ``latest``: without ``lo`` the hand-out is known only to precede ``hi``
        return min(self.t if self.lo is None else self.lo, self.latest)

    @property
    def latest(self) -> float:
        return self.t if self.hi is None else min(self.hi, self.t)


@dataclass(frozen=True)
class Ack:
    consumer: str
    p: int
    o: int
    dc: int
    ok: bool
    t: float
    error: str | None = None  # the error the client got, by Kafka's name

    @property
    def key(self) -> tuple[int, int]:
        return self.p, self.o


#: acknowledgement errors after which the client cannot know whether its acknowledgement was written
INDETERMINATE = frozenset({"COORDINATOR_NOT_AVAILABLE", "REQUEST_TIMED_OUT", "NETWORK_EXCEPTION", "_TIMED_OUT",
                           "_TRANSPORT", "UNKNOWN_SERVER_ERROR", "UNKNOWN"})


@dataclass(frozen=True)
class Tenure:
    """One owner of a state partition, from its takeover record to the next one (or its mark)."""

    epoch: int
    node: int | None
    start: float
    end: float | None = None  # the next owner's takeover, or its own handover mark
    planned: bool = False  # ended by its own handover mark


@dataclass(frozen=True)
class Snapshot:
    offset: int  # in the state topic
    t: float
    spso: int
    state_epoch: int
    leader_epoch: int


@dataclass
class History:
    ends: dict[int, int]  # user partition -> end offset (records 0..end-1 produced)
    deliveries: list[Delivery]
    acks: list[Ack]
    home: dict[int, int]  # user partition -> state partition
    tenures: dict[int, list[Tenure]]  # state partition -> tenures in order
    snapshots: dict[int, list[Snapshot]]  # user partition -> the group's snapshots in state-topic order
    lock_s: float
    limit: int
    heals: list[tuple[str, float]] = field(default_factory=list)  # (what, when)
    exits: dict[str, int | None] = field(default_factory=dict)  # sidecar -> exit code during the run
    #: consumer -> its last event's time, for consumers that stopped before the end of the run
    gone: dict[str, float] = field(default_factory=dict)
    starts: dict[int, int] = field(default_factory=dict)  # user partition -> first offset consumed
    #: user partition -> when a sidecar reloaded its share-partition from the state topic (its log:
    #: after a state write whose outcome it could not know); it keeps the locks and counts memory
    #: had, so a reload excuses nothing (stats only)
    reloads: dict[int, list[float]] = field(default_factory=dict)


@dataclass
class Report:
    violations: list[str]
    stats: dict

    @property
    def ok(self) -> bool:
        return not self.violations

    def text(self, most: int = 12) -> str:
        lines = [f"{len(self.violations)} violation(s)"] + [f"  - {v}" for v in self.violations[:most]]
        if len(self.violations) > most:
            lines.append(f"  ... {len(self.violations) - most} more")
        lines.append("stats: " + ", ".join(f"{k}={v}" for k, v in self.stats.items()))
        return "\n".join(lines)


def tenures_from(marks: list[tuple[float, int, int | None, bool]]) -> list[Tenure]:
    """A state partition's tenures from its owner records in log order: ``(timestamp, epoch,
    node, released)``."""
    out: list[Tenure] = []
    for t, epoch, node, released in marks:
        if released:
            if out and out[-1].epoch == epoch and out[-1].end is None:
                prev = out[-1]
                out[-1] = Tenure(prev.epoch, prev.node, prev.start, t, planned=True)
            continue
        if out and out[-1].end is None:
            prev = out[-1]
            out[-1] = Tenure(prev.epoch, prev.node, prev.start, t)
        out.append(Tenure(epoch, node, t))
    return out


class _Owners:
    """Changes of owner per state partition, searchable by time."""

    def __init__(self, tenures: dict[int, list[Tenure]]) -> None:
        self.tenures = tenures
        self.changes: dict[int, list[float]] = {}  # every takeover after the first
        self.unplanned: dict[int, list[float]] = {}  # takeovers whose predecessor left no mark
        for sp, ts in tenures.items():
            self.changes[sp] = [t.start for t in ts[1:]]
            self.unplanned[sp] = [b.start for a, b in zip(ts, ts[1:]) if not a.planned]

    def next_change(self, sp: int, after: float) -> float:
        """The first change of owner of ``sp`` after ``after`` (inf: none)."""
        return _next(self.changes.get(sp, []), after)

    def unplanned_between(self, sp: int, lo: float, hi: float) -> bool:
        return _next(self.unplanned.get(sp, []), lo) <= hi

    def tenure_at(self, sp: int, node: int, t: float, since: float | None = None) -> Tenure | None:
        """``node``'s tenure of ``sp`` covering ``t`` — or any moment of ``since``..``t`` (None:
        it owned no tenure then)."""
        since = t if since is None else since
        for ten in self.tenures.get(sp, []):
            if ten.node == node and ten.start <= t and (ten.end is None or since <= ten.end):
                return ten
        return None


def check(h: History, *, tolerance_s: float = 1.0, unserved_bound_s: float = 15.0) -> Report:
    owners = _Owners(h.tenures)
    by_record: dict[tuple[int, int], list[Delivery]] = defaultdict(list)
    for d in h.deliveries:
        by_record[(d.p, d.o)].append(d)
    for ds in by_record.values():
        ds.sort(key=lambda d: d.t)
    accepted: Counter = Counter(a.key for a in h.acks if a.ok)
    stats: dict = {"deliveries": len(h.deliveries), "accepted": sum(accepted.values()),
                   "records": sum(end - h.starts.get(p, 0) for p, end in h.ends.items())}
    v: list[str] = []
    settled: dict[tuple[int, int], float] = {}  # record -> when it was done (accepted, archived, ...)
    v += _lost_or_twice(h, by_record, accepted, stats, settled)
    v += _after_accepted(h, by_record, tolerance_s)
    v += _holds_and_counts(h, owners, by_record, tolerance_s, stats)
    v += _spso(h)
    v += _unserved(h, owners, unserved_bound_s, stats, settled)
    died = {n: rc for n, rc in h.exits.items() if rc is not None}
    if died:
        v.append(f"died: sidecars exited during the run: {died}")
    if h.gone:
        v.append(f"client died: consumers stopped before the end of the run (last event): "
                 f"{ {c: round(t, 3) for c, t in sorted(h.gone.items())} }")
    return Report(v, stats)


def _lost_or_twice(h: History, by_record: dict, accepted: Counter, stats: dict,
                   settled: dict[tuple[int, int], float]) -> list[str]:
    """Every record accepted exactly once, archived at the delivery limit, or — its last
    acknowledgement's outcome unknown to the client (a timeout, an unreachable sidecar) and never
    redelivered — done as the state topic says (its partition's final SPSO is past it)."""
    v: list[str] = []
    last_ack: dict[tuple[int, int], Ack] = {}
    for a in h.acks:
        if a.key not in last_ack or a.t >= last_ack[a.key].t:
            last_ack[a.key] = a
    final = {p: snaps[-1].spso for p, snaps in h.snapshots.items() if snaps}
    archived, unknown, lost = 0, 0, []
    ok_times = accepted_times(h.acks)
    for p, end in sorted(h.ends.items()):
        for o in range(h.starts.get(p, 0), end):
            if accepted[(p, o)]:
                settled[(p, o)] = ok_times[(p, o)]
                continue
            seen = by_record.get((p, o), [])
            last = last_ack.get((p, o))
            if seen and max(d.dc for d in seen) >= h.limit:
                archived += 1
                settled[(p, o)] = seen[-1].t
            elif last is not None and seen and last.error in INDETERMINATE and last.t >= seen[-1].t \
                    and final.get(p, -1) > o:
                unknown += 1
                settled[(p, o)] = last.t
            elif seen and seen[-1].consumer in h.gone and (last is None or last.t < seen[-1].t) \
                    and final.get(p, -1) > o:  # its consumer died holding it: it may have sent the ack
                unknown += 1
                settled[(p, o)] = seen[-1].t
            else:
                lost.append((p, o))
    stats["archived_at_limit"] = archived
    stats["ack_outcome_unknown_but_done"] = unknown
    if lost:
        v.append(f"lost: {len(lost)} records never accepted (nor archived at the delivery limit), e.g. {lost[:5]}")
    for p, end in sorted(h.ends.items()):
        if p in final and final[p] != end:
            v.append(f"lost: partition {p} ends with SPSO {final[p]}, its end is {end}")
    twice = sorted(k for k, n in accepted.items() if n > 1)
    if twice:
        v.append(f"accepted twice: {len(twice)} records, e.g. {twice[:5]}")
    return v


def _after_accepted(h: History, by_record: dict, tolerance_s: float) -> list[str]:
    """No record is handed out after an acknowledgement of it was answered without error."""
    again = [(p, o, round(t, 3), d.consumer, round(d.t, 3), d.dc) for (p, o), t in accepted_times(h.acks).items()
             for d in by_record.get((p, o), ()) if d.earliest > t + tolerance_s]
    if not again:
        return []
    return [f"delivered after accepted: {len(again)} deliveries after an acceptance answered without error, "
            f"e.g. {again[:3]} (partition, offset, accepted at, to, at, count)"]


def _holds_and_counts(h: History, owners: _Owners, by_record: dict, tolerance_s: float, stats: dict) -> list[str]:
    ack_end: dict[tuple[str, int, int, int], float] = {}
    for a in h.acks:
        k = (a.consumer, a.p, a.o, a.dc)
        ack_end[k] = min(ack_end.get(k, a.t), a.t)
    held: list[tuple] = []
    down: list[tuple] = []
    repeated: list[tuple] = []
    zombies: list[tuple] = []
    voided = 0
    for (p, o), ds in by_record.items():
        sp = h.home.get(p, -1)
        # each rule judges a hand-out somewhere in earliest..latest, and fails only if every
        # moment in it breaks the rule
        for i, first in enumerate(ds):
            end = min(first.earliest + h.lock_s, ack_end.get((first.consumer, p, o, first.dc), float("inf")))
            change = owners.next_change(sp, first.earliest - tolerance_s)
            for later in ds[i + 1:]:
                if later.t + tolerance_s >= end:
                    break
                if later.latest < first.earliest:
                    continue  # which came first is unknown
                if change <= later.t + tolerance_s:
                    voided += 1
                    continue
                held.append((p, o, first.consumer, first.t, first.dc, later.consumer, later.t, later.dc))
            if first.node is not None and any(t.node is not None for t in owners.tenures.get(sp, [])) \
                    and owners.tenure_at(sp, first.node, first.latest, since=first.earliest - tolerance_s) is None:
                zombies.append((p, o, first.node, first.t))
        for a, b in zip(ds, ds[1:]):
            if b.dc < a.dc and b.earliest - a.latest > tolerance_s:
                down.append((p, o, a.dc, a.t, b.dc, b.t))
            elif b.dc == a.dc and not owners.unplanned_between(
                    sp, min(a.earliest, b.earliest) - tolerance_s, max(a.t, b.t) + tolerance_s):
                repeated.append((p, o, a.dc, a.consumer, a.t, b.consumer, b.t))
    stats["voided_by_owner_change"] = voided
    stats["reloads"] = sum(len(ts) for ts in h.reloads.values())
    stats["redeliveries"] = sum(len(ds) - 1 for ds in by_record.values())
    v: list[str] = []
    if held:
        v.append(f"held twice: {len(held)} deliveries while another delivery's lock held, e.g. "
                 f"{[_held(x) for x in held[:3]]}")
    if down:
        v.append(f"count went down: {len(down)} times, e.g. {down[:3]}")
    if repeated:
        v.append(f"count repeated without an unplanned owner change: {len(repeated)} times, e.g. {repeated[:3]}")
    if zombies:
        v.append(f"zombie: {len(zombies)} records handed out by a sidecar outside its tenure, e.g. {zombies[:3]}")
    return v


def _spso(h: History) -> list[str]:
    for p, snaps in h.snapshots.items():
        for s1, s2 in zip(snaps, snaps[1:]):
            if s1.state_epoch == s2.state_epoch and s2.spso < s1.spso:
                return [f"SPSO went back: partition {p} from {s1.spso} to {s2.spso} at state-topic offset {s2.offset}"]
    return []


def _unserved(h: History, owners: _Owners, bound_s: float, stats: dict,
              settled: dict[tuple[int, int], float]) -> list[str]:
    """After every heal and every unplanned change of owner: each partition with records left is
    delivered from again within ``bound_s``."""
    v: list[str] = []
    firsts = _delivery_times(h.deliveries)
    finished = _finish_times(h, settled)
    worst_heal = worst_takeover = 0.0
    for what, t in h.heals:
        for p in h.ends:
            if not firsts.get(p) or firsts[p][0] > t:
                continue  # not consumed yet: nothing to judge
            gap = _gap(firsts.get(p, []), t, finished.get(p))
            if gap is not None:
                worst_heal = max(worst_heal, gap)
                if gap > bound_s:
                    v.append(f"unserved: partition {p} delivered nothing for {gap:.1f} s after the heal of {what}")
    for sp, starts in owners.unplanned.items():
        for t in starts:
            for p in (p for p, home in h.home.items() if home == sp and p in h.ends):
                if not firsts.get(p) or firsts[p][0] > t:
                    continue  # a takeover before consumption started
                gap = _gap(firsts.get(p, []), t, finished.get(p))
                if gap is not None:
                    worst_takeover = max(worst_takeover, gap)
                    if gap > bound_s:
                        v.append(f"unserved: partition {p} delivered nothing for {gap:.1f} s after the takeover "
                                 f"of state partition {sp}")
    stats["worst_unserved_after_heal_s"] = round(worst_heal, 2)
    stats["worst_unserved_after_takeover_s"] = round(worst_takeover, 2)
    stats["unplanned_takeovers"] = sum(len(s) for s in owners.unplanned.values())
    stats["takeovers"] = sum(len(s) for s in owners.changes.values())
    return v


def _next(times: list[float], after: float) -> float:
    i = bisect.bisect_right(times, after)
    return times[i] if i < len(times) else float("inf")


def accepted_times(acks: list[Ack]) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for a in acks:
        if a.ok:
            out[a.key] = min(out.get(a.key, a.t), a.t)
    return out


def _held(x: tuple) -> str:
    p, o, ca, ta, dca, cb, tb, dcb = x
    return f"{p}:{o} to {ca} at {ta:.3f} (count {dca}), to {cb} at {tb:.3f} (count {dcb})"


def _delivery_times(deliveries: list[Delivery]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = defaultdict(list)
    for d in deliveries:
        out[d.p].append(d.t)
    for ts in out.values():
        ts.sort()
    return out


def _finish_times(h: History, settled: dict[tuple[int, int], float]) -> dict[int, float]:
    """Per partition: when its last record was last delivered, once every record of it is done
    (nothing left to serve after that); inf when one never was."""
    last: dict[int, float] = {}
    for d in h.deliveries:
        last[d.p] = max(last.get(d.p, d.t), d.t)
    out: dict[int, float] = {}
    for p, end in h.ends.items():
        done = all((p, o) in settled for o in range(h.starts.get(p, 0), end))
        out[p] = last.get(p, float("inf")) if done else float("inf")
    return out


def _gap(times: list[float], t: float, finished: float | None) -> float | None:
    """Seconds from ``t`` to the partition's next delivery (None: it had nothing left by then)."""
    if finished is not None and finished < t:
        return None
    i = bisect.bisect_left(times, t)
    if i < len(times):
        return times[i] - t
    return float("inf")
