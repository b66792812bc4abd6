"""The capacity model (docs/capacity.md): from a workload to sidecars, memory and recovery time.

Pure arithmetic over measured unit costs (:class:`UnitCosts`, whose defaults are the figures of
``benchmarks/scale.py`` and ``benchmarks/cluster.py`` listed in docs/capacity.md). A sidecar is one
asyncio event loop: it uses at most one core, so the CPU a workload needs is spread over sidecars
each planned at ``target_utilization`` of a core — with ``spare`` sidecars more, so that the rest
absorb a failed one's share-partitions (a takeover moves its state partitions to them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class UnitCosts:
    """What one unit of work costs a sidecar (CPU seconds are user + system of its process)."""

    #: sidecar CPU per ShareFetch that delivers records, with the acknowledgement of them (carried
    #: by the member's next ShareFetch) and its state write: the cost of a request, whatever it carries
    cpu_us_per_share_fetch: float = 490.0
    #: sidecar CPU seconds per million records delivered and acknowledged beyond their ShareFetches
    #: (the bytes' way through the sidecar), at 100 B and at 1 KiB (interpolated linearly in
    #: between, extrapolated beyond)
    cpu_s_per_1m_records_100b: float = 0.29
    cpu_s_per_1m_records_1kib: float = 0.85
    #: the records' CPU grows by this share of itself for each sidecar of a cluster beyond the first
    #: (measured on a quiet host: x1.35-1.52 with 3 — a sidecar leading one of 4 partitions pays
    #: per event-loop wake-up); counted up to ``cluster_growth_measured_up_to`` sidecars and
    #: assumed flat beyond (not measured)
    cluster_record_cost_growth: float = 0.22
    cluster_growth_measured_up_to: int = 3
    #: CPU per ShareGroupHeartbeat answered (steady state: nothing changed)
    cpu_us_per_heartbeat: float = 185.0
    #: CPU of a sidecar doing nothing (timers, its backend probe, a cluster's membership and tail)
    idle_cpu_share: float = 0.005
    #: more CPU of a sidecar once it answers requests at all, and more again once they include
    #: ShareFetches: a floor that does not grow with the request rate. Measured from 50 to 600
    #: heartbeats/s, a sidecar's CPU rose by a constant plus a cost per request, not in proportion;
    #: on a host that otherwise idles, a request that finds the event loop asleep pays for waking it
    #: and the requests of a light load pay most of it (docs/capacity.md, "The light-load floor")
    serving_cpu_share: float = 0.007
    fetching_cpu_share: float = 0.0145
    #: resident memory of a sidecar holding nothing
    rss_base_mb: float = 63.0
    #: per share-partition with state (initialized), held by every sidecar owning its state partition
    bytes_per_share_partition: float = 622.0
    #: more per share-partition loaded in memory (fetched from in the last share.partition.idle.eviction.ms)
    bytes_per_loaded_share_partition: float = 1400.0
    #: per group member (coordinator state, its record, its connection)
    kb_per_member: float = 11.4
    #: the read cache's bound (ShareLogReader): counted in full
    read_cache_mb: float = 64.0
    #: state-topic records written per share-partition acknowledged in one request, and their size
    state_records_per_ack: float = 1.03
    state_bytes_per_record: float = 117.0
    #: start-up of a sidecar before its replay, and the replay per 10,000 share-partitions (their
    #: records in the state topic: an initialization and a claim each before compaction), wall
    #: seconds after a kill -9 on a core of its own (a clean restart is about a third faster)
    startup_s: float = 0.9
    replay_s_per_10k_share_partitions: float = 0.48
    #: where these figures come from
    source: str = ("benchmarks/share_fetch_cost.py, throughput.py, scale.py and cluster.py on a quiet 2-vCPU host, "
                   "2026-11-30 (docs/capacity.md)")

    def cluster_factor(self, sidecars: int) -> float:
        """What a record costs in a cluster of ``sidecars`` over what it costs on one."""
        beyond = min(max(sidecars, 1), self.cluster_growth_measured_up_to) - 1
        return 1.0 + self.cluster_record_cost_growth * max(0, beyond)

    def cpu_s_per_1m_records(self, record_bytes: float) -> float:
        slope = (self.cpu_s_per_1m_records_1kib - self.cpu_s_per_1m_records_100b) / (1024 - 100)
        return max(0.0, self.cpu_s_per_1m_records_100b + slope * (record_bytes - 100))


@dataclass(frozen=True)
class Workload:
    records_per_s: float
    record_bytes: float = 1024
    share_partitions: int = 0  #: with state: groups × their subscribed partitions
    active_share_partitions: int | None = None  #: fetched from recently (None: all of them)
    members: int = 0
    heartbeat_interval_ms: int = 5000
    records_per_fetch: float = 500  #: records a ShareFetch delivers (and the next one acknowledges)
    partitions_per_fetch: float = 1.0  #: share-partitions those records come from


@dataclass(frozen=True)
class Plan:
    sidecars: int
    cores: float  #: CPU the workload needs, summed over the sidecars
    cpu_share_per_sidecar: float  #: of one core, with every sidecar up
    cpu_share_after_failure: float  #: of one core, with ``spare`` sidecars down
    memory_mb_per_sidecar: float
    memory_mb_total: float
    state_records_per_s: float
    state_bytes_per_s: float
    heartbeats_per_s: float
    recovery_s_restart: float  #: one sidecar killed and restarted: its state replayed
    recovery_s_takeover: float  #: a failed sidecar's share taken over by the others, replay only
    breakdown: dict = field(default_factory=dict)


def plan(w: Workload, costs: UnitCosts | None = None, *, target_utilization: float = 0.6, spare: int = 1,
         memory_limit_mb: float | None = None) -> Plan:
    """How many sidecars ``w`` needs so that each stays under ``target_utilization`` of a core with
    ``spare`` of them down, and under ``memory_limit_mb`` (when given); what each then uses."""
    if not 0 < target_utilization <= 1:
        raise ValueError("target_utilization must be in (0, 1]")
    if spare < 0:
        raise ValueError("spare must be >= 0")
    c = costs or UnitCosts()
    active = w.share_partitions if w.active_share_partitions is None else min(w.active_share_partitions,
                                                                               w.share_partitions)
    heartbeats = w.members * 1000 / w.heartbeat_interval_ms if w.heartbeat_interval_ms > 0 else 0.0
    fetches = w.records_per_s / w.records_per_fetch if w.records_per_fetch > 0 else 0.0
    records_cpu = (w.records_per_s * c.cpu_s_per_1m_records(w.record_bytes) / 1e6
                   + fetches * c.cpu_us_per_share_fetch / 1e6)
    heartbeat_cpu = heartbeats * c.cpu_us_per_heartbeat / 1e6

    floor = ((c.serving_cpu_share if heartbeats or fetches else 0.0)
             + (c.fetching_cpu_share if fetches else 0.0))  # per sidecar serving the workload

    def work(sidecars: int) -> float:  # cores, summed over ``sidecars`` serving the workload
        return records_cpu * c.cluster_factor(sidecars) + heartbeat_cpu + sidecars * floor

    shared_mb = (w.share_partitions * c.bytes_per_share_partition + active * c.bytes_per_loaded_share_partition
                 + w.members * c.kb_per_member * 1024) / 2**20

    def memory(up: int) -> float:
        return c.rss_base_mb + c.read_cache_mb + shared_mb / up

    n = 1
    while True:
        up = max(1, n - spare)
        per_up = work(up) / up + c.idle_cpu_share
        fits_cpu = per_up <= target_utilization
        fits_mem = memory_limit_mb is None or memory(up) <= memory_limit_mb
        if (fits_cpu and fits_mem and n > spare) or n >= 10_000:
            break
        n += 1
    state_records = fetches * w.partitions_per_fetch * c.state_records_per_ack
    replay_total = c.replay_s_per_10k_share_partitions * w.share_partitions / 10_000
    return Plan(
        sidecars=n, cores=round(work(n) + n * c.idle_cpu_share, 3),
        cpu_share_per_sidecar=round(work(n) / n + c.idle_cpu_share, 3),
        cpu_share_after_failure=round(work(max(1, n - spare)) / max(1, n - spare) + c.idle_cpu_share, 3),
        memory_mb_per_sidecar=round(memory(n), 1), memory_mb_total=round(memory(n) * n, 1),
        state_records_per_s=round(state_records, 1), state_bytes_per_s=round(state_records * c.state_bytes_per_record),
        heartbeats_per_s=round(heartbeats, 1),
        recovery_s_restart=round(c.startup_s + replay_total / n, 2),
        recovery_s_takeover=round(replay_total / n, 2),
        breakdown={"records_cpu_cores": round(records_cpu * c.cluster_factor(n), 3),
                   "share_fetches_per_s": round(fetches, 1), "heartbeat_cpu_cores": round(heartbeat_cpu, 3),
                   "light_load_floor_cores": round(n * floor, 3),
                   "idle_cpu_cores": round(n * c.idle_cpu_share, 3),
                   "share_partition_and_member_mb": round(shared_mb, 1), "costs": asdict(c)})


__all__ = ["Plan", "UnitCosts", "Workload", "plan"]


def fmt(p: Plan) -> list[str]:
    """The plan as lines for a terminal."""
    return [
        f"sidecars:            {p.sidecars} (each {p.cpu_share_per_sidecar:.0%} of a core; "
        f"{p.cpu_share_after_failure:.0%} with the spare down)",
        f"CPU:                 {p.cores} cores in all ({p.breakdown['records_cpu_cores']} records in "
        f"{p.breakdown['share_fetches_per_s']} ShareFetches/s, "
        f"{p.breakdown['heartbeat_cpu_cores']} heartbeats, {p.breakdown['light_load_floor_cores']} serving at all, "
        f"{p.breakdown['idle_cpu_cores']} idle)",
        f"memory:              {p.memory_mb_per_sidecar} MB per sidecar, {p.memory_mb_total} MB in all "
        f"(read cache included)",
        f"state topic writes:  {p.state_records_per_s} records/s, {p.state_bytes_per_s} B/s",
        f"heartbeats:          {p.heartbeats_per_s}/s",
        f"recovery:            {p.recovery_s_restart} s after a kill -9 and restart; "
        f"{p.recovery_s_takeover} s of replay for a takeover (after cluster.session.timeout.ms)",
    ]
