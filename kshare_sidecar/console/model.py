"""What the console shows, as plain data (the JSON of every page; the HTML is drawn from it).

Read from the services' memory, never written: the coordinator's groups and members, the
share-partition manager's loaded share-partitions (their ranges: state, delivery count, lock
holder and deadline), the admin service for share-partitions not loaded here, and the per-group
counters of ``metrics.STATS``. Each view is built in one go on the event loop (no await between
reading a share-partition's ranges), so it is one consistent picture of that share-partition.

In a cluster of sidecars each console shows its own sidecar's memory: the groups it coordinates
(members, assignments) and the share-partitions it leads (the strips), and names the node that
coordinates or leads the rest.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..metrics import IN_FLIGHT_AGE, STATS
from ..group.admin_model import AdminError
from ..share.engine.holds import BACKOFF, DEAD_LETTER, HOLDERS, KEY_ORDER
from ..states import RecordState

#: Records listed as nearest their delivery limit, per share-partition.
NEAREST = 10
#: A strip is drawn from at most this many runs (neighbours of one kind merged past it).
STRIP_RUNS = 800

_HOLD_KIND = {BACKOFF: "backoff", KEY_ORDER: "keyorder", DEAD_LETTER: "deadletter"}
_STATE_KIND = {RecordState.AVAILABLE: "available", RecordState.ACKNOWLEDGED: "acknowledged",
               RecordState.ARCHIVED: "archived"}


@dataclass
class Services:
    """What the console reads (built once by app.py)."""

    coordinator: Any
    partitions: Any  # share.cache.SharePartitionCache
    admin: Any  # service.admin.AdminService
    node_id: int
    cluster_view: Any = None  # cluster.view.ClusterView of a cluster of sidecars
    group_config: Callable[[str], dict] | None = None


def _kind(state: RecordState, member: str | None) -> str:
    if state == RecordState.ACQUIRED:
        return _HOLD_KIND.get(member or "", "acquired")
    return _STATE_KIND.get(state, "archived")


def partition_view(slot: Any, now_ms: int, *, hwm: int | None = None) -> dict[str, Any]:
    """One loaded share-partition: counts by kind, its strip, histogram, oldest lock, records nearest the limit."""
    sp = slot.partition
    limit = sp.config.delivery_count_limit
    duration = sp.config.record_lock_duration_ms
    counts = dict.fromkeys(("available", "acquired", "backoff", "keyorder", "deadletter", "acknowledged",
                            "archived"), 0)
    histogram: Counter[int] = Counter()
    segments: list[list[Any]] = []
    nearest: list[dict[str, Any]] = []
    oldest_lock_ms = 0
    members: Counter[str] = Counter()
    for first, last, state, count, member, deadline in sp.ranges():
        n = last - first + 1
        kind = _kind(state, member)
        counts[kind] += n
        histogram[count] += n
        if segments and segments[-1][2] == kind and segments[-1][1] + 1 == first:
            segments[-1][1] = last
        else:
            segments.append([first, last, kind])
        if kind == "acquired" and member is not None:
            members[member] += n
            if deadline is not None:
                oldest_lock_ms = max(oldest_lock_ms, now_ms - (deadline - duration))
        if kind in ("available", "acquired", "backoff", "keyorder") and count > 0:
            nearest.append({"first": first, "last": last, "delivery_count": count, "left": max(0, limit - count),
                            "state": kind, "member": member if member not in HOLDERS else None,
                            "lock_remaining_ms": max(0, deadline - now_ms) if deadline is not None and
                            kind == "acquired" else None})
    nearest.sort(key=lambda r: (-r["delivery_count"], r["first"]))
    in_flight = counts["acquired"] + counts["backoff"] + counts["keyorder"] + counts["deadletter"]
    return {"group": slot.key.group_id, "topic": slot.topic, "topic_id": slot.key.topic_id,
            "partition": slot.key.partition, "spso": sp.spso, "speo": sp.speo, "end_offset": sp.end_offset,
            "window": sp.in_flight, "high_watermark": hwm, "lag": sp.lag(hwm) if hwm is not None else None,
            "records_in_flight": in_flight, "counts": counts, "delivery_count_limit": limit,
            "lock_duration_ms": duration, "oldest_acquisition_age_ms": max(0, oldest_lock_ms),
            "oldest_in_flight_age_s": round(IN_FLIGHT_AGE.observe(slot.key, sp.spso, sp.in_flight > 0,
                                                                  time.monotonic()), 1),
            "histogram": {str(k): v for k, v in sorted(histogram.items())},
            "nearest_limit": nearest[:NEAREST], "holders": dict(members),
            "strip": _coarsen(segments, sp.spso, sp.end_offset)}


def _coarsen(segments: list[list[Any]], spso: int, end: int) -> list[list[Any]]:
    """At most STRIP_RUNS runs: past that, each pixel-sized bucket takes its most frequent kind."""
    if len(segments) <= STRIP_RUNS:
        return segments
    span = max(end - spso, 1)
    size = -(-span // STRIP_RUNS)
    buckets: dict[int, Counter[str]] = {}
    for first, last, kind in segments:
        o = first
        while o <= last:
            b = (o - spso) // size
            upto = min(last, spso + (b + 1) * size - 1)
            buckets.setdefault(b, Counter())[kind] += upto - o + 1
            o = upto + 1
    out: list[list[Any]] = []
    for b in sorted(buckets):
        kind = buckets[b].most_common(1)[0][0]
        first, last = spso + b * size, min(end - 1, spso + (b + 1) * size - 1)
        if out and out[-1][2] == kind and out[-1][1] + 1 == first:
            out[-1][1] = last
        else:
            out.append([first, last, kind])
    return out


def _slots(services: Services, group_id: str | None = None) -> list[Any]:
    slots = [s for s in list(services.partitions.slots.values()) if not s.dead]
    if group_id is not None:
        slots = [s for s in slots if s.key.group_id == group_id]
    return sorted(slots, key=lambda s: (s.key.group_id, s.topic, s.key.partition))


def _coordinator_node(services: Services, group_id: str) -> int:
    view = services.cluster_view
    if view is None:
        return services.node_id
    owner = view.coordinator(group_id)
    return services.node_id if owner is None else owner


def group_ids(services: Services) -> list[str]:
    """Groups this sidecar knows: those it coordinates (listed as ListGroups lists them) and those
    whose share-partitions it leads."""
    try:
        ids = {g.group_id for g in services.admin.list_groups()}
    except AdminError:  # the state is still loading (a takeover): what is loaded is all there is
        ids = set()
    ids |= {s.key.group_id for s in _slots(services)}
    return sorted(ids)


def dlq_topic(services: Services, group_id: str) -> str:
    if services.group_config is None:
        return ""
    return str(services.group_config(group_id).get("errors.deadletterqueue.topic.name") or "")


def group_summary(services: Services, group_id: str, now_ms: int) -> dict[str, Any]:
    """One row of the groups page."""
    group = services.coordinator.groups.get(group_id)
    parts = [partition_view(s, now_ms, hwm=STATS.high_watermarks.get(s.key)) for s in _slots(services, group_id)]
    lags = [p["lag"] for p in parts if p["lag"] is not None]
    assigned = sum(len(ps) for m in (group.members.values() if group else ()) for ps in m.assignment.values())
    return {"group_id": group_id, "state": group.state.value if group is not None else "",
            "coordinator": _coordinator_node(services, group_id),
            "coordinated_here": _coordinator_node(services, group_id) == services.node_id,
            "group_epoch": group.group_epoch if group is not None else None,
            "members": len(group.members) if group is not None else 0, "assigned_partitions": assigned,
            "share_partitions_loaded": len(parts), "lag": sum(lags) if lags else None,
            "records_in_flight": sum(p["records_in_flight"] for p in parts),
            "oldest_acquisition_age_ms": max((p["oldest_acquisition_age_ms"] for p in parts), default=0),
            "oldest_in_flight_age_s": max((p["oldest_in_flight_age_s"] for p in parts), default=0.0),
            "delivered_total": STATS.group_delivered.get(group_id, 0),
            "redelivered_total": STATS.group_redelivered.get(group_id, 0),
            "dead_lettered_total": STATS.group_dead_lettered.get(group_id, 0),
            # of those, archived without reaching the topic (missing, no opt-in, writes that failed)
            "dead_letters_unwritten_total": STATS.dlq["unwritten"].get(group_id, 0),
            "dead_letter_topic": dlq_topic(services, group_id)}


def member_views(group: Any, topic_name: Callable[[Any], str]) -> list[dict[str, Any]]:
    out = []
    for m in sorted(group.members.values(), key=lambda m: m.member_id):
        out.append({"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                    "member_epoch": m.member_epoch, "rack_id": m.rack_id, "subscribed": sorted(m.subscribed),
                    "assignment": {topic_name(tid): sorted(ps) for tid, ps in m.assignment.items()}})
    return out


class Sampler:
    """The last minutes of each group, for the plots: one sample per interval (a deque per group)."""

    FIELDS = ("records_in_flight", "lag", "delivery_rate", "redelivery_rate", "dead_letter_rate")

    def __init__(self, interval_s: float, keep_s: float = 600.0) -> None:
        self.interval_s = interval_s
        self.size = max(2, int(keep_s / interval_s))
        self.series: dict[str, deque[dict[str, Any]]] = {}
        self._last: dict[str, tuple[float, int, int, int]] = {}

    def sample(self, rows: Iterable[dict[str, Any]], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        seen = set()
        for row in rows:
            g = row["group_id"]
            seen.add(g)
            totals = (now, row["delivered_total"], row["redelivered_total"], row["dead_lettered_total"])
            prev = self._last.get(g)
            self._last[g] = totals
            rates: list[float | None] = [None, None, None]
            if prev is not None and now > prev[0]:
                rates = [max(0.0, (totals[i] - prev[i]) / (now - prev[0])) for i in (1, 2, 3)]
            self.series.setdefault(g, deque(maxlen=self.size)).append(
                {"t": round(time.time(), 1), "records_in_flight": row["records_in_flight"], "lag": row["lag"],
                 "delivery_rate": rates[0], "redelivery_rate": rates[1], "dead_letter_rate": rates[2]})
        for g in [g for g in self.series if g not in seen]:
            del self.series[g]
            self._last.pop(g, None)

    def history(self, group_id: str) -> list[dict[str, Any]]:
        return list(self.series.get(group_id, ()))

    def rates(self, group_id: str) -> dict[str, float | None]:
        """The latest delivery / redelivery / dead-letter rates (records per second)."""
        last = self.series.get(group_id)
        sample = last[-1] if last else {}
        return {k: sample.get(k) for k in ("delivery_rate", "redelivery_rate", "dead_letter_rate")}


def _topic_name(services: Services, topic_id: Any) -> str:
    info = services.partitions.backend.topic_by_id(topic_id)
    return info.name if info is not None else str(topic_id)


async def group_detail(services: Services, group_id: str, sampler: Sampler) -> dict[str, Any]:
    """The group page: its summary, members, every share-partition loaded here (strips) and, from
    the state, those loaded nowhere or led by another sidecar (start offset and lag only)."""
    now_ms = services.partitions.clock()
    detail = group_summary(services, group_id, now_ms)
    group = services.coordinator.groups.get(group_id)
    detail["member_count"] = detail["members"]
    detail["members"] = member_views(group, lambda tid: _topic_name(services, tid)) if group is not None else []
    detail["assignor"] = services.coordinator.assignor_name(group) if group is not None else ""
    loaded = [partition_view(s, now_ms, hwm=STATS.high_watermarks.get(s.key)) for s in _slots(services, group_id)]
    detail["partitions"] = loaded
    here = {(p["topic"], p["partition"]) for p in loaded}
    others: list[dict[str, Any]] = []
    if detail["coordinated_here"] and group is not None:
        try:
            topics = await services.admin.describe_offsets(group_id, None)
        except Exception as exc:  # noqa: BLE001 - the page shows what it can, and says why not the rest
            detail["offsets_error"] = f"{type(exc).__name__}: {exc}"
            topics = []
        view = services.cluster_view
        for t in topics:
            for po in t.partitions:
                if (t.name, po.partition) in here:
                    continue
                leader = view.leader(str(t.topic_id), po.partition) if view is not None else services.node_id
                others.append({"topic": t.name, "partition": po.partition, "start_offset": po.start_offset,
                               "lag": po.lag, "leader": leader})
    detail["not_loaded"] = others
    detail["history"] = sampler.history(group_id)
    detail.update(sampler.rates(group_id))
    return detail
