"""Prometheus metrics under a ``kshare_`` prefix, named after Kafka's KIP-932 / KIP-1103 metrics.

Hot-path cost is kept to a few integer additions per request or per acknowledgement batch:
the service code bumps plain attributes on the process-wide `STATS` object (no locks, no label
lookups); everything is turned into Prometheus families only when ``/metrics`` is scraped, by
`KshareCollector`, which also computes the gauges (groups by state, in-flight records, lag)
from the live service objects. Only the two latency histograms use prometheus-client objects
(one ``observe`` per state write / per share-partition load).

Kafka name                                                          -> kshare name
group-coordinator-metrics group-count{protocol=share}               -> kshare_group_count{protocol="share"}
group-coordinator-metrics share-group-count{state}                  -> kshare_share_group_count{state}
share-group-metrics group-rebalance-count (group epoch bumps)       -> kshare_share_group_rebalance_total
share-group-metrics record-acknowledgement-count{ack-type}          -> kshare_record_acknowledgement_total{ack_type}
BrokerTopicMetrics TotalShareFetchRequestsPerSec                    -> kshare_total_share_fetch_requests_total
BrokerTopicMetrics FailedShareFetchRequestsPerSec                   -> kshare_failed_share_fetch_requests_total
BrokerTopicMetrics TotalShareAcknowledgementRequestsPerSec          -> kshare_total_share_acknowledgement_requests_total
BrokerTopicMetrics FailedShareAcknowledgementRequestsPerSec         -> kshare_failed_share_acknowledgement_requests_total
share-group-metrics partition-load-time-avg/max                     -> kshare_partition_load_time_seconds (histogram)
share-coordinator-metrics write-latency-avg/max, write-rate         -> kshare_share_coordinator_write_latency_seconds
                                                                       (histogram; _count is the write count)
SharePartitionMetrics InFlightMessageCount{group,topic,partition}   -> kshare_share_partition_in_flight_message_count
SharePartitionMetrics InFlightBatchCount (not kept; see docs)       -> (none)
KIP-1226 share-partition lag                                        -> kshare_share_partition_lag
RequestMetrics TotalTimeMs{request=ShareFetch|ShareAcknowledge}         -> kshare_request_total_time_seconds{request}
socket-server-metrics successful-authentication-total{listener}     -> kshare_successful_authentication_total{listener}
socket-server-metrics failed-authentication-total{listener}         -> kshare_failed_authentication_total{listener}
ShareGroupMetrics DeadLetterQueueRecordCount{group}                 -> kshare_dead_letter_queue_record_count_total{group}
ShareGroupMetrics DeadLetterQueueTotalProduceRequestsPerSec{group}  -> kshare_dead_letter_queue_total_produce_requests_total{group}
ShareGroupMetrics DeadLetterQueueFailedProduceRequestsPerSec{group} -> kshare_dead_letter_queue_failed_produce_requests_total{group}

kshare's own (no Kafka counterpart; the console's figures and the shipped alert rules use them):
kshare_share_group_delivered_records_total{group}, kshare_share_group_redelivered_records_total{group},
kshare_share_group_dead_lettered_records_total{group}, kshare_dead_letter_queue_unwritten_records_total{group},
kshare_state_write_failures_total,
kshare_share_partition_oldest_in_flight_age_seconds{group,topic,partition}, kshare_cluster_members.
"""

from __future__ import annotations

import gc
import logging
import resource
import threading
import time
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from kshare_sidecar.states import AcknowledgeType

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

log = logging.getLogger("kshare.metrics")

# ack-type label values by AcknowledgeType number ("Accept", "Release", "Reject", "Renew"); GAP is not
# an acknowledgement of a delivered record and is not counted.
ACK_TYPE_NAMES = {t.value: t.name.capitalize() for t in AcknowledgeType if t is not AcknowledgeType.GAP}


class Stats:
    """Plain counters bumped on the hot path (single event-loop thread: no locking needed)."""

    def __init__(self) -> None:
        self.share_fetch_requests = 0
        self.share_fetch_failed = 0
        self.share_ack_requests = 0
        self.share_ack_failed = 0
        self.acks = {name: 0 for name in ACK_TYPE_NAMES.values()}
        # last high watermark seen per share-partition key (set once per backend fetch, for lag)
        self.high_watermarks: dict[Any, int] = {}
        # read path: read amplification = backend_fetch_bytes / delivered_bytes
        self.backend_fetch_requests = 0
        self.backend_fetch_bytes = 0  # record bytes received from backend Fetches (incl. cut-off tails)
        self.backend_fetch_cut_bytes = 0  # of those, trailing batches cut at a read's size limit
        self.delivered_bytes = 0  # record bytes sent to clients in ShareFetch responses
        self.delivered_records = 0
        self.record_bytes_copied = 0  # copies of record bytes in user space (sockets not counted)
        self.cache_hits = 0
        self.cache_misses = 0
        self.cache_bytes = 0  # gauge: bytes held by the read-ahead cache
        # listener name -> SASL authentications that succeeded / failed
        self.authentications: dict[str, int] = {}
        self.authentication_failures: dict[str, int] = {}
        # per share group (the console's rates and the alert rules): records delivered, of those
        # redelivered (delivery count > 1), and records archived after their dead-letter write
        self.group_delivered: dict[str, int] = {}
        self.group_redelivered: dict[str, int] = {}
        self.group_dead_lettered: dict[str, int] = {}
        self.state_write_failures = 0  # share-state writes that failed (the change was rolled back)
        # group -> dead-letter records written / produce requests sent / failed (Kafka 4.4's
        # ShareGroupMetrics), and kshare's: records archived without a write
        self.dlq: dict[str, dict[str, int]] = {"records": {}, "produce": {}, "failed": {}, "unwritten": {}}

    def count_delivered(self, group: str, acquired) -> None:
        """Count one acquisition's records for ``group``; ``acquired`` are AcquiredRecords."""
        n = redelivered = 0
        for a in acquired:
            size = a.last_offset - a.first_offset + 1
            n += size
            if a.delivery_count > 1:
                redelivered += size
        self.group_delivered[group] = self.group_delivered.get(group, 0) + n
        if redelivered:
            self.group_redelivered[group] = self.group_redelivered.get(group, 0) + redelivered

    def count_dlq(self, group: str, what: str, n: int) -> None:
        """Count dead-letter ``records`` written, ``produce`` requests sent, ``failed`` writes or
        records archived ``unwritten``."""
        counts = self.dlq[what]
        counts[group] = counts.get(group, 0) + n

    def count_acks(self, runs) -> None:
        """Count one acknowledgement plan's records by type; ``runs`` are (first, last, type)."""
        acks = self.acks
        for first, last, t in runs:
            name = ACK_TYPE_NAMES.get(t)
            if name is not None:
                acks[name] += last - first + 1


STATS = Stats()


class InFlightAge:
    """How long each share-partition's start offset (SPSO) has stayed on a record that is not done:
    the age of its oldest in-flight record as far as the sidecar can tell without a timestamp per
    record (SQS's ApproximateAgeOfOldestMessage). Observed whenever /metrics is scraped or the
    console samples: the age is exact to one observation interval."""

    def __init__(self) -> None:
        self._since: dict[Any, tuple[int, float]] = {}

    def observe(self, key: Any, spso: int, busy: bool, now: float) -> float:
        """Seconds the SPSO has stayed at ``spso`` while the window held records (``busy``)."""
        if not busy:
            self._since.pop(key, None)
            return 0.0
        seen = self._since.get(key)
        if seen is None or seen[0] != spso:
            self._since[key] = (spso, now)
            return 0.0
        return now - seen[1]

    def forget(self, keep: set[Any]) -> None:
        for key in [k for k in self._since if k not in keep]:
            del self._since[key]


IN_FLIGHT_AGE = InFlightAge()


class GcPauses:
    """CPython's garbage-collector pauses, per generation: the event loop stands still during
    each, so a full collection over a large heap shows as latency on every connection. Kept as
    plain numbers: a gc callback runs inside whatever allocation triggered it, and taking a
    lock there (a prometheus_client metric's) could deadlock with the code it interrupted."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        g = info["generation"]
        took = time.perf_counter() - self._started
        self.count[g] += 1
        self.seconds[g] += took
        if took > self.longest[g]:
            self.longest[g] = took

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)


GC_PAUSES = GcPauses()

# One registry for the process (not prometheus-client's global one, so importing kshare never
# changes what other code exports).
REGISTRY = CollectorRegistry(auto_describe=True)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

WRITE_LATENCY = Histogram(
    "kshare_share_coordinator_write_latency_seconds",
    "Durable share-state write latency as the share-partition sees it (KIP-932 share-coordinator "
    "write-latency; _count is the number of writes).", buckets=_LATENCY_BUCKETS, registry=REGISTRY)
#: Kafka's RequestMetrics TotalTimeMs{request}: from the request's decoding to its answer, including
#: the time a ShareFetch waits (up to MaxWaitMs) for records — as Kafka's figure does
REQUEST_TIME = Histogram(
    "kshare_request_total_time_seconds",
    "Time from a share request's arrival to its answer, including a ShareFetch's wait for records "
    "(Kafka's RequestMetrics TotalTimeMs), by request.", ["request"], buckets=_LATENCY_BUCKETS, registry=REGISTRY)
LOAD_TIME = Histogram(
    "kshare_partition_load_time_seconds",
    "Time to load a share-partition's state from the persister (KIP-932 partition-load-time).",
    buckets=_LATENCY_BUCKETS, registry=REGISTRY)


class KshareCollector:
    """Builds counter and gauge families at scrape time from `STATS` and the live sidecars."""

    def __init__(self) -> None:
        self.sidecars: list[Any] = []

    def collect(self):
        s = STATS
        for name, doc, value in (
            ("kshare_total_share_fetch_requests", "ShareFetch requests received.", s.share_fetch_requests),
            ("kshare_failed_share_fetch_requests", "ShareFetch requests answered with a top-level error.",
             s.share_fetch_failed),
            ("kshare_total_share_acknowledgement_requests", "ShareAcknowledge requests received.",
             s.share_ack_requests),
            ("kshare_failed_share_acknowledgement_requests", "ShareAcknowledge requests answered with a "
             "top-level error.", s.share_ack_failed),
            ("kshare_backend_fetch_requests", "Fetch requests sent to the backend for share-partitions.",
             s.backend_fetch_requests),
            ("kshare_backend_fetch_bytes", "Record bytes received from backend Fetches (including cut-off "
             "trailing batches).", s.backend_fetch_bytes),
            ("kshare_backend_fetch_cut_bytes", "Of those, bytes of trailing batches the backend cut at a read's "
             "size limit (read again by the next read).", s.backend_fetch_cut_bytes),
            ("kshare_share_fetch_delivered_bytes", "Record bytes delivered to clients in ShareFetch responses.",
             s.delivered_bytes),
            ("kshare_share_fetch_delivered_records", "Records delivered (acquired) to clients in ShareFetch "
             "responses.", s.delivered_records),
            ("kshare_record_bytes_copied", ("Record bytes copied in user space on the ShareFetch path (each "
                                            "copy counted; receiving from and sending to sockets not)."),
             s.record_bytes_copied),
            ("kshare_read_cache_hits", "Acquisitions served from the read-ahead cache.", s.cache_hits),
            ("kshare_read_cache_misses", "Acquisitions that needed a backend Fetch.", s.cache_misses),
            ("kshare_process_cpu_seconds", "CPU seconds (user + system) used by the sidecar process.",
             time.process_time()),
        ):
            c = CounterMetricFamily(name, doc)
            c.add_metric([], value)
            yield c
        for name, doc, counts in (
                ("kshare_successful_authentication", "SASL authentications that succeeded, per listener.",
                 s.authentications),
                ("kshare_failed_authentication", "SASL authentications that failed (wrong or unverifiable "
                 "credentials), per listener.", s.authentication_failures)):
            c = CounterMetricFamily(name, doc, labels=["listener"])
            for listener, n in sorted(counts.items()):
                c.add_metric([listener], n)
            yield c
        for name, doc, counts in (
                ("kshare_share_group_delivered_records", "Records delivered (acquired) to consumers, per share "
                 "group.", s.group_delivered),
                ("kshare_share_group_redelivered_records", "Records delivered again (delivery count above 1), "
                 "per share group.", s.group_redelivered),
                ("kshare_share_group_dead_lettered_records", "Records archived after their dead-letter write, per "
                 "share group.", s.group_dead_lettered)):
            c = CounterMetricFamily(name, doc, labels=["group"])
            for group, n in sorted(counts.items()):
                c.add_metric([group], n)
            yield c
        # the counters the Persister protocol declares (persist/protocol.py; this module stands
        # below persist/, so it reads them without importing the type)
        persisters = [sc.persister for sc in list(self.sidecars)]
        for name, doc, written in (
                ("kshare_state_records_written", ("Records committed to the state topic (snapshots, group and "
                                                  "member records, tombstones)."),
                 sum(p.records_written for p in persisters)),
                ("kshare_state_bytes_written", "Key and value bytes of the records committed to the state topic.",
                 sum(p.bytes_written for p in persisters))):
            c = CounterMetricFamily(name, doc)
            c.add_metric([], written)
            yield c
        pauses = GC_PAUSES
        for name, doc, values, family in (
                ("kshare_gc_collections", "CPython garbage collections, per generation (2: a full one, "
                 "which walks every object not frozen).", pauses.count, CounterMetricFamily),
                ("kshare_gc_pause_seconds", "Seconds the process stood still in garbage collections, per "
                 "generation.", pauses.seconds, CounterMetricFamily),
                ("kshare_gc_pause_max_seconds", "The longest garbage-collection pause so far, per generation.",
                 pauses.longest, GaugeMetricFamily)):
            fam: Any = family(name, doc, labels=["generation"])
            for gen, value in enumerate(values):
                fam.add_metric([str(gen)], value)
            yield fam
        c = CounterMetricFamily("kshare_state_write_failures", "Share-state writes that failed (the change they "
                                "carried was rolled back; clients retry).")
        c.add_metric([], s.state_write_failures)
        yield c
        for what, name, doc in (
                ("records", "kshare_dead_letter_queue_record_count", ("Records written to dead-letter topics "
                 "(Kafka 4.4's DeadLetterQueueRecordCount), per share group.")),
                ("produce", "kshare_dead_letter_queue_total_produce_requests", ("Produce requests sent to "
                 "dead-letter topics (DeadLetterQueueTotalProduceRequestsPerSec), per share group.")),
                ("failed", "kshare_dead_letter_queue_failed_produce_requests", ("Dead-letter writes that failed "
                 "(DeadLetterQueueFailedProduceRequestsPerSec), per share group.")),
                ("unwritten", "kshare_dead_letter_queue_unwritten_records", ("Records archived without reaching "
                 "their dead-letter topic (missing, not opted in, a name refused, writes that kept failing), "
                 "per share group: kshare's."))):
            c = CounterMetricFamily(name, doc, labels=["group"])
            for group, n in sorted(s.dlq[what].items()):
                c.add_metric([group], n)
            yield c
        c = CounterMetricFamily("kshare_record_acknowledgement", "Records acknowledged (durably), by type "
                                "(ShareFetch piggybacked and ShareAcknowledge).", labels=["ack_type"])
        for name, n in s.acks.items():
            c.add_metric([name], n)
        yield c

        by_state: dict[str, int] = {"Empty": 0, "Stable": 0, "Dead": 0}
        rebalances = 0
        in_flight = GaugeMetricFamily("kshare_share_partition_in_flight_message_count",
                                      "In-flight records (SPEO - SPSO + 1) per loaded share-partition.",
                                      labels=["group", "topic", "partition"])
        lag = GaugeMetricFamily("kshare_share_partition_lag", "Share-partition lag (HWM - SPSO - delivery "
                                "complete count) from the last high watermark seen.",
                                labels=["group", "topic", "partition"])
        age = GaugeMetricFamily("kshare_share_partition_oldest_in_flight_age_seconds", "How long the share-partition "
                                "start offset has stayed on a record not yet done (0 when nothing is in flight).",
                                labels=["group", "topic", "partition"])
        members = GaugeMetricFamily("kshare_cluster_members", "Live sidecars of the cluster as this sidecar sees "
                                    "them (a cluster of sidecars only).", labels=["cluster"])
        loaded = 0
        now = time.monotonic()
        seen: set[Any] = set()
        for sc in list(self.sidecars):
            view = getattr(sc, "cluster_view", None)
            if view is not None:
                members.add_metric([sc.config.cluster.name], len(view.map.nodes))
            coordinator = getattr(sc, "coordinator", None)
            if coordinator is not None:
                for group in list(coordinator.groups.values()):
                    state = group.state.value
                    by_state[state] = by_state.get(state, 0) + 1
                    rebalances += max(0, group.group_epoch - 1)  # groups start at epoch 1, as Kafka's
            partitions = getattr(sc, "partitions", None)
            if partitions is not None:
                hwms = s.high_watermarks
                loaded += len(partitions.slots)
                idle: list[tuple[Any, int]] = []
                # Only the share-partitions requests asked for since they were last found idle
                # (share/watch.py): walking all of them held the GIL for a second at 100,000.
                for i, (key, slot, mark) in enumerate(partitions.watched_slots()):
                    if not i % 256 and i:
                        # After a mass load (a restart, a takeover) every share-partition is marked
                        # once: let the event loop's thread take the GIL between slices instead of
                        # queueing behind this one for the whole walk.
                        time.sleep(0)
                    if slot is None:
                        idle.append((key, mark))
                        continue
                    sp = slot.partition
                    n = sp.in_flight
                    hwm = hwms.get(key)
                    behind = sp.lag(hwm) if hwm is not None else 0
                    if not n and not behind:
                        idle.append((key, mark))  # no series: every value would be 0
                        continue
                    labels = [key.group_id, slot.topic, str(key.partition)]
                    in_flight.add_metric(labels, n)
                    seen.add(key)
                    age.add_metric(labels, IN_FLIGHT_AGE.observe(key, sp.spso, n > 0, now))
                    if hwm is not None:
                        lag.add_metric(labels, behind)
                partitions.forget_idle(idle)
        g = GaugeMetricFamily("kshare_group_count", "Groups served, by protocol.", labels=["protocol"])
        g.add_metric(["share"], sum(by_state.values()))
        yield g
        g = GaugeMetricFamily("kshare_share_group_count", "Share groups by state.", labels=["state"])
        for state, n in by_state.items():
            g.add_metric([state], n)
        yield g
        c = CounterMetricFamily("kshare_share_group_rebalance", "Share-group rebalances: the sum of the "
                                "group epochs of the groups this sidecar knows (each bump is a rebalance).")
        c.add_metric([], rebalances)
        yield c
        g = GaugeMetricFamily("kshare_share_partitions_loaded", "Share-partitions loaded in memory.")
        g.add_metric([], loaded)
        yield g
        IN_FLIGHT_AGE.forget(seen)
        yield in_flight
        yield lag
        yield age
        yield members
        up = GaugeMetricFamily("kshare_backend_up", "1 while the backend cluster answers the sidecar's "
                               "probe (a Metadata request every 1-2 s), 0 during an outage.")
        outages = CounterMetricFamily("kshare_backend_outages", "Backend outages seen (up -> down transitions).")
        for sc in list(self.sidecars):
            health = getattr(getattr(sc, "backend", None), "health", None)
            if health is not None:
                up.add_metric([], 1 if health.up else 0)
                outages.add_metric([], health.outages)
                break
        yield up
        yield outages
        g = GaugeMetricFamily("kshare_read_cache_bytes", "Record bytes held by the read-ahead cache.")
        g.add_metric([], s.cache_bytes)
        yield g
        g = GaugeMetricFamily("kshare_process_max_resident_memory_bytes", "Peak resident set size of the "
                              "sidecar process (getrusage ru_maxrss).")
        g.add_metric([], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        yield g


COLLECTOR = KshareCollector()
REGISTRY.register(COLLECTOR)


class MetricsServer:
    """The ``/metrics`` HTTP endpoint for one sidecar (a daemon thread, as prometheus-client does)."""

    def __init__(self, sidecar, port: int, host: str) -> None:
        self.sidecar = sidecar
        self.port = port
        self.host = host
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        from prometheus_client import start_http_server

        COLLECTOR.sidecars.append(self.sidecar)
        self._server, self._thread = start_http_server(self.port, addr=self.host, registry=REGISTRY)
        self.port = self._server.server_port
        log.info("Prometheus metrics on http://%s:%d/metrics", self.host, self.port)

    def stop(self) -> None:
        if self.sidecar in COLLECTOR.sidecars:
            COLLECTOR.sidecars.remove(self.sidecar)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
