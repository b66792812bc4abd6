"""Durable-state cost of kshare under batch-acknowledgement load (sidecar on Kafka 3.9).

Measures (1) acknowledgements per durable state write and (2) the bytes kshare's compacted state
topic (``__kshare_state``) holds per acknowledged record, before and after the broker's log cleaner
has compacted it.

Load: N records (100 B; --quick 200k, full 1M) on a 4-partition topic, consumed to the end by 4
confluent-kafka ``ShareConsumer`` processes with implicit acknowledgement (every poll's records are
acknowledged as a batch, piggybacked on the next ShareFetch or on close). The sidecar runs with
``KSHARE_METRICS_PORT``; the figures come from the deltas of ``kshare_record_acknowledgement_total``
(all ack types) and ``kshare_share_coordinator_write_latency_seconds_count`` (one per durable state
write: a transactional batch to the state topic) around the load.

State-topic size: the ``*.log`` segment bytes of the state topic's partition directories in the
test broker's data directory, plus a read of the topic with aiokafka (records, key+value bytes,
distinct keys = the lower bound any compaction can reach). kshare creates the topic with
``segment.ms=600000`` and never compacts the active segment, so to force compaction within the run
the benchmark then lowers the topic's ``segment.ms`` to 1 s through the admin API (the sidecar does
not expose the persister's topic configs), acknowledges a trickle of extra records so every used
state partition appends and rolls its segment, and waits for the cleaner. The last (active)
segments are not compacted, and transaction markers and tombstones stay for the topic's
``delete.retention.ms`` (1 h), so "after compaction" is what the broker really holds a minute
later, not the ideal. Per-1M figures are linear extrapolations from N records (said in the JSON).

Prints progress lines, then one JSON object as the LAST line; writes state.json and state.png into
--out (default: $TMPDIR/kshare-bench).
Usage: python benchmarks/state.py [--quick] [--records N] [--out DIR]
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    CpuMeter,
    SidecarProcess,
    base_parser,
    finish,
    free_port,
    loadavg,
    machine,
    metric_sum,
    parse_prometheus,
    produce_records,
    pyplot,
)
from throughput import consume  # noqa: E402  (4 ShareConsumer processes, implicit acks, until N received)

STATE_TOPIC = "__kshare_state"
PARTITIONS = 4
RECORD_BYTES = 100
ACKS = "kshare_record_acknowledgement_total"
WRITES = "kshare_share_coordinator_write_latency_seconds"


def disk_bytes(data_dir: Path, topic: str) -> int:
    return sum(f.stat().st_size for d in data_dir.glob(f"{topic}-*") if d.is_dir() for f in d.glob("*.log"))


def partition_count(data_dir: Path, topic: str) -> int:
    return sum(1 for d in data_dir.glob(f"{topic}-*") if d.is_dir() and d.name.rpartition("-")[2].isdigit())


def read_topic(bootstrap: str, topic: str, partitions: int) -> dict:
    """Read the whole topic (read_uncommitted): records, key+value bytes, distinct keys and the
    key+value bytes of the latest record per key (what perfect compaction would keep)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go() -> dict:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", max_partition_fetch_bytes=16 << 20)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            records = nbytes = 0
            latest: dict[bytes, int] = {}
            deadline = time.monotonic() + 120
            pending = {tp for tp in tps if await consumer.position(tp) < ends[tp]}
            while pending and time.monotonic() < deadline:
                batches = await consumer.getmany(*pending, timeout_ms=500, max_records=100_000)
                for msgs in batches.values():
                    for m in msgs:
                        size = len(m.key or b"") + len(m.value or b"")
                        records += 1
                        nbytes += size
                        latest[m.key or b""] = 0 if m.value is None else size
                for tp in list(pending):
                    if await consumer.position(tp) >= ends[tp]:
                        pending.discard(tp)
            return {"records": records, "key_value_bytes": nbytes, "distinct_keys": len(latest),
                    "latest_per_key_bytes": sum(latest.values()), "log_end_offsets": sum(ends.values()),
                    "complete": not pending}
        finally:
            await consumer.stop()

    return asyncio.run(go())


def set_topic_config(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                             incremental_configs=entries)]).values():
        f.result(timeout=30)


def _trickle_consumer(bootstrap: str, group: str, topic: str, stop) -> None:
    from confluent_kafka import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.subscribe([topic])
    try:
        while not stop.is_set():
            c.poll(0.2)
    finally:
        c.close()


def trickle(bootstrap_backend: str, bootstrap_sidecar: str, group: str, topic: str, seconds: float) -> None:
    """Produce one record per partition every 0.5 s while one share consumer of ``group`` acks them,
    so every state partition this group uses appends after ``segment.ms`` and rolls."""
    from confluent_kafka import Producer

    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    p = ctx.Process(target=_trickle_consumer, args=(bootstrap_sidecar, group, topic, stop), daemon=True)
    p.start()
    producer = Producer({"bootstrap.servers": bootstrap_backend, "linger.ms": 0})
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for part in range(PARTITIONS):
            producer.produce(topic, value=b"trickle", partition=part)
        producer.flush(10)
        time.sleep(0.5)
    time.sleep(3)
    stop.set()
    p.join(20)
    if p.is_alive():
        p.kill()


def plot(summary: dict, png: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1, 2]})
    b = ax1.bar(["acks per\nstate write"], [summary["acks_per_state_write"] or 0], color="#1f77b4")
    ax1.bar_label(b, labels=[f"{summary['acks_per_state_write']}"])
    ax1.set_title(f"{summary['acknowledged_records']:,} acks, {summary['state_writes']:,} writes")
    per = summary["per_1m_acknowledged_records"]
    labels = ["written\n(before compaction)", "on disk after\ncompaction", "latest record\nper key (ideal)"]
    values = [per["state_topic_bytes_written"], per["state_topic_bytes_after_compaction"],
              per["latest_per_key_bytes"]]
    bars = ax2.bar(labels, [v / 1e6 if v else 0 for v in values], color=["#7f7f7f", "#ff7f0e", "#2ca02c"])
    ax2.bar_label(bars, labels=[f"{(v or 0) / 1e6:.2f} MB" for v in values])
    ax2.set_ylabel("MB per 1M acknowledged records")
    ax2.set_title("state topic size (extrapolated from %s records)" % f"{summary['records']:,}")
    fig.tight_layout()
    fig.savefig(png)
    return True


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--records", type=int)
    ap.add_argument("--compaction-timeout", type=float, default=90.0)
    args = ap.parse_args()
    n = args.records or (200_000 if args.quick else 1_000_000)
    args.out.mkdir(parents=True, exist_ok=True)

    from kshare_sidecar.testing import KafkaBroker
    from tests.support import unique

    load_start = loadavg()
    with KafkaBroker("3.9") as b39:
        data_dir = b39.workdir / "data"
        topic = unique("state")
        produce_records(b39.bootstrap, topic, n, partitions=PARTITIONS, record_bytes=RECORD_BYTES)
        with SidecarProcess(b39.bootstrap, metrics_port=free_port()) as sc:
            group = unique("kshare-state")
            m0 = parse_prometheus(sc.metrics_text())
            t = time.monotonic()
            load = consume("share", sc.bootstrap, group, topic, n, 600 if not args.quick else 180, RECORD_BYTES,
                           CpuMeter())
            # Acks of the last polls are committed on close; wait until the counter stops moving.
            last, stable_since = -1.0, time.monotonic()
            while time.monotonic() - stable_since < 2 and time.monotonic() - t < 700:
                acks_now = metric_sum(parse_prometheus(sc.metrics_text()), ACKS)
                if acks_now != last:
                    last, stable_since = acks_now, time.monotonic()
                time.sleep(0.5)
            m1 = parse_prometheus(sc.metrics_text())
            acks = metric_sum(m1, ACKS) - metric_sum(m0, ACKS)
            writes = metric_sum(m1, WRITES + "_count") - metric_sum(m0, WRITES + "_count")
            write_s = metric_sum(m1, WRITES + "_sum") - metric_sum(m0, WRITES + "_sum")
            print(f"load: {load['records']} records received in {load['seconds']} s; {acks:.0f} acks, "
                  f"{writes:.0f} state writes ({acks / writes if writes else float('nan'):.1f} acks/write, "
                  f"mean write {1000 * write_s / writes if writes else float('nan'):.1f} ms)", flush=True)
            (args.out / "state_metrics.txt").write_text(sc.metrics_text())

            before_disk = disk_bytes(data_dir, STATE_TOPIC)
            before = read_topic(b39.bootstrap, STATE_TOPIC, partition_count(data_dir, STATE_TOPIC))
            print(f"state topic before compaction: {before_disk:,} B on disk, {before}", flush=True)

            set_topic_config(b39.bootstrap, STATE_TOPIC, {"segment.ms": "1000"})
            time.sleep(1.5)
            trickle(b39.bootstrap, sc.bootstrap, group, topic, 4.0)
            m2 = parse_prometheus(sc.metrics_text())
        # The sidecar is stopped: no more state writes while the cleaner works.
        t = time.monotonic()
        sizes = [disk_bytes(data_dir, STATE_TOPIC)]
        while time.monotonic() - t < args.compaction_timeout:
            time.sleep(3)
            sizes.append(disk_bytes(data_dir, STATE_TOPIC))
            if sizes[-1] < 0.5 * before_disk and sizes[-1] == sizes[-2]:
                break
        after_disk = sizes[-1]
        after = read_topic(b39.bootstrap, STATE_TOPIC, partition_count(data_dir, STATE_TOPIC))
        compaction_wait = round(time.monotonic() - t, 1)
        print(f"state topic after compaction ({compaction_wait} s): {after_disk:,} B on disk, {after}", flush=True)

    total_acks = metric_sum(m2, ACKS) - metric_sum(m0, ACKS)  # including the trickle's

    def per_million(x: float | None) -> int | None:
        return round(x * 1e6 / total_acks) if x is not None and total_acks else None

    summary = {
        "scenario": "state", "backend": "kafka 3.9", "records": n, "record_bytes": RECORD_BYTES,
        "partitions": PARTITIONS, "consumers": 4, "acknowledgement": "implicit (batched per poll)",
        "machine": machine(), "loadavg_start": load_start, "loadavg_end": loadavg(),
        "load": load, "acknowledged_records": int(acks), "state_writes": int(writes),
        "acks_per_state_write": round(acks / writes, 1) if writes else None,
        "mean_state_write_ms": round(1000 * write_s / writes, 2) if writes else None,
        "state_topic": {"before_compaction": {"disk_log_bytes": before_disk, **before},
                        "after_compaction": {"disk_log_bytes": after_disk, **after},
                        "compaction_wait_s": compaction_wait, "disk_samples": sizes,
                        "acknowledged_records_incl_trickle": int(total_acks)},
        "per_1m_acknowledged_records": {
            "extrapolated_from_records": int(total_acks),
            "state_topic_bytes_written": per_million(before_disk),
            "state_topic_bytes_after_compaction": per_million(after_disk),
            "latest_per_key_bytes": per_million(after["latest_per_key_bytes"]),
            "note": "linear extrapolation; the compacted size is per share-partition state, which does not "
                    "grow with the record count, so the after-compaction figure overstates a real 1M run",
        },
    }
    finish(summary, args.out, "state", lambda png: plot(summary, png))


if __name__ == "__main__":
    main()
