"""Fencing: a stale sidecar can never move share state backwards (Kafka 3.9, real processes).

* frozen owner: A serves ShareConsumer processes, is frozen (SIGSTOP) under ack load, B takes
  over, the consumers move to B, A is resumed (SIGCONT) while records keep coming;
* killed and restarted owner: A is SIGKILLed, B takes over, A is restarted while B serves;
* lone owner frozen longer than the state writers' transaction timeout, then resumed.

Every verdict comes from the state topic itself (read_committed, decoded with persist/codec.py)
and from what the consumers saw. Each scenario gets its own state topic, so the session's other
sidecars are not involved. ``KSHARE_FENCING_REPEAT=5`` runs each scenario that many times.

Each scenario runs per state write mode in ``KSHARE_FENCING_MODES`` (default: ``fenced``, the
default mode; ``make test-fencing`` adds ``transactional``). In ``transactional`` mode A is frozen
inside an open state transaction and the backend must abort it; in ``fenced`` mode (no
transactions) A is frozen while its writes are held (the test hook) and the partition leader must
refuse every write A attempts after B's owner record — checked as "no share-partition record of an
older owner after a newer owner record" on the state topic.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import defaultdict
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from confluent_kafka import Consumer

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_OWNER, KIND_PARTITION
from kshare_sidecar.persist.replay import replay_sink
from kshare_sidecar.persist.records import RecoveryStats
from kshare_sidecar.testing.probe import broker_ready
from tests.e2e.conftest import SidecarProcess, Target, Worker, wait_until
from tests.support import create_topic, produce, unique

pytestmark = pytest.mark.kafka

REPEAT = int(os.environ.get("KSHARE_FENCING_REPEAT", "1"))
MODES = os.environ.get("KSHARE_FENCING_MODES", "fenced").split(",")
#: Every scenario runs under ``make test-fencing`` (``--run fencing``), with the repeats and modes;
#: the default suite has the writers' fencing in tests/unit/persist (a minute each here).
FULL = pytest.mark.optin("fencing")
PARTITIONS = 3
SUPERSEDED = "this sidecar stops serving share groups"


@dataclass
class StateLog:
    """The state topic as committed: (partition, offset, kind, ident, entity), offset order per partition."""

    records: list[tuple[int, int, str, object, object]]
    uncommitted: int  # records visible read_uncommitted (includes aborted transactions' records)

    def snapshots(self) -> dict:
        by_key: dict = defaultdict(list)
        for _p, offset, kind, ident, entity in self.records:
            if kind == KIND_PARTITION and entity is not None:
                by_key[ident].append((offset, entity.state))
        return by_key

    def owner_records(self) -> list[tuple[int, int, int]]:
        return [(p, off, e) for p, off, kind, _i, e in self.records if kind == KIND_OWNER]


async def _read(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, int, bytes, bytes | None]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                isolation_level=isolation, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(4)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # last stable offsets under read_committed
        out = []
        pending = {tp for tp in tps if ends[tp] > 0}
        deadline = time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            for tp, msgs in (await consumer.getmany(*pending, timeout_ms=500)).items():
                out += [(tp.partition, m.offset, m.key, m.value) for m in msgs]
            pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
        return out
    finally:
        await consumer.stop()


async def _open_transactions(bootstrap: str, topic: str) -> int:
    """State partitions whose last stable offset is below the high watermark: an open transaction."""
    ends = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, isolation_level=isolation)
        await consumer.start()
        try:
            ends[isolation] = await consumer.end_offsets([TopicPartition(topic, p) for p in range(4)])
        finally:
            await consumer.stop()
    return sum(1 for tp, lso in ends["read_committed"].items() if lso < ends["read_uncommitted"][tp])


def freeze_inside_a_transaction(sc: SidecarProcess, state_topic: str, attempts: int = 50) -> None:
    """SIGSTOP the sidecar at a moment when one of its state transactions is open (checked on the
    backend: LSO < high watermark); otherwise resume it briefly and try again."""
    for _ in range(attempts):
        os.kill(sc.proc.pid, signal.SIGSTOP)
        if asyncio.run(_open_transactions(sc.backend, state_topic)):
            return
        os.kill(sc.proc.pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError("never caught a state transaction open")


def read_state(bootstrap: str, topic: str) -> StateLog:
    committed = asyncio.run(_read(bootstrap, topic, "read_committed"))
    everything = asyncio.run(_read(bootstrap, topic, "read_uncommitted"))
    records = []
    for p, offset, key, value in sorted(committed):
        kind, ident, entity = codec.decode(key, value)
        records.append((p, offset, kind, ident, entity))
    return StateLog(records, len(everything))


def replay_like_a_fresh_sidecar(bootstrap: str, topic: str) -> tuple[dict, RecoveryStats]:
    """What a fresh sidecar C recovers: the persister's own replay sink over the committed records."""
    entities: dict = {}
    stats = RecoveryStats()
    sink = replay_sink(entities, stats, {})
    for p, offset, key, value in sorted(asyncio.run(_read(bootstrap, topic, "read_committed"))):
        sink(p, offset, key, value)
    return {ident: ent.state for (kind, ident), ent in entities.items() if kind == KIND_PARTITION}, stats


def assert_never_backwards(state: StateLog) -> None:
    """Per share-partition, in commit order: within one state epoch the SPSO never decreases and the
    owner epoch never decreases (a record of an older owner after a newer one)."""
    for key, snaps in state.snapshots().items():
        for (o1, s1), (o2, s2) in zip(snaps, snaps[1:], strict=False):
            if s2.state_epoch != s1.state_epoch:
                assert s2.state_epoch > s1.state_epoch, f"{key}: state epoch went back at offset {o2}"
                continue
            assert s2.start_offset >= s1.start_offset, \
                f"{key}: SPSO went back {s1.start_offset} -> {s2.start_offset} (offsets {o1} -> {o2})"
            assert s2.leader_epoch >= s1.leader_epoch, \
                f"{key}: owner epoch {s2.leader_epoch} committed after {s1.leader_epoch} (offset {o2})"


def assert_all_accepted(state: StateLog, group: str, ends: dict[int, int]) -> None:
    """Every share-partition's final SPSO is the end of its partition: every record is done."""
    final = {k.partition: snaps[-1][1] for k, snaps in state.snapshots().items() if k.group_id == group}
    assert {p: s.start_offset for p, s in final.items()} == ends, "records left unfinished"


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("probe")})
    try:
        from confluent_kafka import TopicPartition as CTP
        return {p: c.get_watermark_offsets(CTP(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def start_workers(sc: SidecarProcess, group: str, topic: str, tmp, tag: str, n: int = 2, **opts) -> list[Worker]:
    target = Target("kshare", sc.bootstrap, sc.backend)
    base = dict(mode="explicit", max_poll_records=100, work_ms=0.2, idle_s=8, max_s=200)
    return [Worker(target, group, topic, tmp / f"{tag}{i}.jsonl", **(base | opts)) for i in range(n)]


def delivered(workers: list[Worker]) -> set[tuple[int, int]]:
    return {(r["p"], r["o"]) for w in workers for r in w.records()}


def kill(workers: list[Worker]) -> None:
    for w in workers:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait(10)


def sidecar(kafka, tmp, name: str, state_topic: str, mode: str, **env) -> SidecarProcess:
    """Every state write is held 200 ms (tests/e2e/faulty_sidecar.py: a transaction open, or a batch
    not yet sent), so a SIGSTOP lands inside one."""
    return SidecarProcess(kafka.bootstrap, tmp / f"{name}.log", faults=["--hold-state-writes-ms", "200"],
                          env={"KSHARE_STATE_TOPIC": state_topic, "KSHARE_STATE_WRITE_MODE": mode, **env})


def freeze(sc: SidecarProcess, state_topic: str, mode: str) -> None:
    if mode == "transactional":
        freeze_inside_a_transaction(sc, state_topic)
    else:  # writes are held 200 ms of every write cycle: most moments are inside one
        os.kill(sc.proc.pid, signal.SIGSTOP)


def assert_one_writer_at_a_time(state: StateLog) -> None:
    """Once a newer owner record is committed on a partition, no share-partition record of an
    older owner follows it there."""
    newest: dict[int, int] = {}
    for p, offset, kind, _ident, entity in state.records:
        if kind == KIND_OWNER:
            newest[p] = max(newest.get(p, -1), entity)
        elif kind == KIND_PARTITION and entity is not None and entity.state.leader_epoch >= 0:
            assert entity.state.leader_epoch >= newest.get(p, -1), \
                f"partition {p} offset {offset}: owner {entity.state.leader_epoch} wrote after owner {newest[p]}"


@FULL
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("run", range(REPEAT))
def test_frozen_owner_resumed_after_takeover_never_moves_state_backwards(kafka_39, tmp_path, run, mode):
    first, more = 20_000, 5_000
    topic, group, state_topic = unique("fence"), unique("g"), unique("__kshare_state_fence")
    create_topic(kafka_39.bootstrap, topic, PARTITIONS)
    produce(kafka_39.bootstrap, topic, first, partitions=PARTITIONS)
    # A's consumers are SIGKILLed while A is frozen: B restores their memberships from the state
    # topic (as Kafka's coordinator keeps them) and they hold their partitions until their session
    # expires — 6 s here rather than Kafka's 45 s, within B's consumers' idle time.
    session = {"KSHARE_GROUP_SHARE_SESSION_TIMEOUT_MS": "6000"}
    a = sidecar(kafka_39, tmp_path, "a", state_topic, mode, **session).start()
    b = sidecar(kafka_39, tmp_path, "b", state_topic, mode, **session)
    workers_a: list[Worker] = []
    workers_b: list[Worker] = []
    try:
        workers_a = start_workers(a, group, topic, tmp_path, "a")
        assert wait_until(lambda: len(delivered(workers_a)) > first // 4, 90), a.log_tail()
        freeze(a, state_topic, mode)
        frozen_at = len(delivered(workers_a))
        kill(workers_a)  # their sockets hang on the frozen A; the consumers move to B
        b.start()
        workers_b = start_workers(b, group, topic, tmp_path, "b", idle_s=12)
        assert wait_until(lambda: len(delivered(workers_b)) > first // 4, 90), b.log_tail()
        os.kill(a.proc.pid, signal.SIGCONT)
        produce(kafka_39.bootstrap, topic, more, partitions=PARTITIONS, prefix="more")
        # A wakes up holding locks of records it handed out; its first state write meets the fencing
        assert wait_until(lambda: SUPERSEDED in a.log_path.read_text(errors="replace"), 60), a.log_tail()
        for w in workers_b:
            assert w.wait(240) == 0, w.stderr()
        assert frozen_at < first, "A was frozen after everything was consumed: the test proves nothing"
        assert not broker_ready("127.0.0.1", a.port, timeout=2), "the superseded sidecar still serves"
    finally:
        kill(workers_a + workers_b)
        a.stop(signal.SIGKILL)
        b.stop()
    total = first + more
    assert len(delivered(workers_a) | delivered(workers_b)) == total, "a record was never delivered"
    state = read_state(kafka_39.bootstrap, state_topic)
    assert_never_backwards(state)
    assert_all_accepted(state, group, end_offsets(kafka_39.bootstrap, topic))
    if mode == "transactional":
        assert state.uncommitted > len(state.records), "no open state transaction was aborted: A froze outside one"
    else:
        assert state.uncommitted == len(state.records)  # no transactions at all
        assert_one_writer_at_a_time(state)  # A's writes after B's owner record were refused
    owners = [e for _p, _o, e in state.owner_records()]
    assert len(set(owners)) == 2 and min(owners) < max(owners), owners  # A's epoch, then B's, larger
    recovered, stats = replay_like_a_fresh_sidecar(kafka_39.bootstrap, state_topic)
    last = {k: snaps[-1][1] for k, snaps in state.snapshots().items()}
    assert recovered == last  # a fresh sidecar recovers B's final state
    c = sidecar(kafka_39, tmp_path, "c", state_topic, mode).start()  # and really starts on it
    c.stop()
    print(f"\n[fencing {mode}] frozen A after {frozen_at}/{first}: {len(state.records)} committed state records, "
          f"{state.uncommitted - len(state.records)} aborted, owner epochs {sorted(set(owners))}, "
          f"{stats.stale_ignored} stale ignored on replay")


@FULL
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("run", range(REPEAT))
def test_killed_owner_restarted_while_successor_serves_leaves_one_writer(kafka_39, tmp_path, run, mode):
    first = 20_000
    topic, group, state_topic = unique("fence"), unique("g"), unique("__kshare_state_fence")
    create_topic(kafka_39.bootstrap, topic, PARTITIONS)
    produce(kafka_39.bootstrap, topic, first, partitions=PARTITIONS)
    # The consumers are SIGKILLed with their sidecar: their memberships outlive them (persisted, as
    # Kafka's coordinator keeps them) and hold their partitions until their session expires — 6 s
    # here rather than Kafka's 45 s, so the next consumers get everything within their idle time.
    session = {"KSHARE_GROUP_SHARE_SESSION_TIMEOUT_MS": "6000"}
    a = sidecar(kafka_39, tmp_path, "a", state_topic, mode, **session).start()
    b = sidecar(kafka_39, tmp_path, "b", state_topic, mode, **session)
    workers: list[Worker] = []
    try:
        workers += start_workers(a, group, topic, tmp_path, "a")
        assert wait_until(lambda: len(delivered(workers)) > first // 5, 90), a.log_tail()
        a.stop(signal.SIGKILL)
        kill(workers)
        b.start()
        workers += start_workers(b, group, topic, tmp_path, "b")
        assert wait_until(lambda: len(delivered(workers)) > first // 2, 90), b.log_tail()
        a.start()  # A again, while B serves: the newest starter takes over, B must stop
        assert wait_until(lambda: SUPERSEDED in b.log_path.read_text(errors="replace"), 60), b.log_tail()
        assert not broker_ready("127.0.0.1", b.port, timeout=2), "the superseded sidecar still serves"
        kill(workers)
        rest = start_workers(a, group, topic, tmp_path, "a2", idle_s=15)
        workers += rest
        for w in rest:
            assert w.wait(240) == 0, w.stderr()
    finally:
        kill(workers)
        a.stop()
        b.stop(signal.SIGKILL)
    assert len(delivered(workers)) == first
    state = read_state(kafka_39.bootstrap, state_topic)
    assert_never_backwards(state)
    assert_all_accepted(state, group, end_offsets(kafka_39.bootstrap, topic))
    assert_one_writer_at_a_time(state)  # exactly one writer per state partition at any time
    assert len({e for _p, _o, e in state.owner_records()}) == 3  # A, B, A restarted


@FULL
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("run", range(REPEAT))
def test_lone_owner_frozen_past_the_transaction_timeout_does_not_regress(kafka_39, tmp_path, run, mode):
    """Kafka 3.9's default transaction.abort.timed.out.transaction.cleanup.interval.ms is 10 s: with
    a 3 s state transaction timeout, a 16 s freeze outlives the transaction for certain."""
    first = 20_000
    topic, group, state_topic = unique("fence"), unique("g"), unique("__kshare_state_fence")
    create_topic(kafka_39.bootstrap, topic, PARTITIONS)
    produce(kafka_39.bootstrap, topic, first, partitions=PARTITIONS)
    a = sidecar(kafka_39, tmp_path, "a", state_topic, mode, KSHARE_STATE_TRANSACTION_TIMEOUT_MS="3000").start()
    workers: list[Worker] = []
    try:
        workers = start_workers(a, group, topic, tmp_path, "a", idle_s=15)
        assert wait_until(lambda: len(delivered(workers)) > first // 4, 90), a.log_tail()
        freeze(a, state_topic, mode)
        frozen_at = len(delivered(workers))
        time.sleep(16)
        os.kill(a.proc.pid, signal.SIGCONT)
        for w in workers:
            assert w.wait(240) == 0, w.stderr()
        log_text = a.log_path.read_text(errors="replace")
        assert SUPERSEDED not in log_text, "the only sidecar must keep serving"
        if mode == "transactional":
            # its open transaction was aborted by the backend (epoch bumped): it re-read ownership,
            # found itself still the newest owner and took the partition over again
            assert "took it over again" in log_text, a.log_tail()
        assert frozen_at < first
    finally:
        kill(workers)
        a.stop()
    assert len(delivered(workers)) == first
    state = read_state(kafka_39.bootstrap, state_topic)
    assert_never_backwards(state)
    assert_all_accepted(state, group, end_offsets(kafka_39.bootstrap, topic))
    if mode == "transactional":
        assert state.uncommitted > len(state.records), "no transaction was aborted: the freeze proves nothing"
    else:  # nothing to abort without transactions: the writer just goes on at its epoch
        assert_one_writer_at_a_time(state)
    print(f"\n[fencing {mode}] lone A frozen 16 s after {frozen_at}/{first}: {state.uncommitted - len(state.records)} "
          f"aborted records; took over again: {log_text.count('took it over again')}, "
          f"re-read after unconfirmed commits: {log_text.count('serving again')}")
