"""The worked examples of KIP-932 (seed 002) and its earlier revision (seed 000), step by step.

After every step the in-memory window (per offset: state, delivery count, holder) and the persisted
snapshot are compared exactly with the tables of the seeds. Seed 002 shows deltas with
StartOffset -1; kshare persists complete snapshots, so the expected values are the cumulative
state, as seed 000's SHARE_CHECKPOINT tables show it (ACQUIRED written as AVAILABLE with the count
before the current attempt; AVAILABLE with count 0 left implicit; equal neighbours merged).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kshare_sidecar.persist.model import DeliveryState as DS
from kshare_sidecar.persist.model import PartitionState, StateBatch
from kshare_sidecar.share.engine import AcquiredRecords, ShareConfig, SharePartition

ACCEPT, RELEASE, REJECT = 1, 2, 3


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def per_offset(sp: SharePartition) -> dict[int, tuple]:
    out = {}
    for first, last, state, count, member, _ in sp.ranges():
        for o in range(first, last + 1):
            out[o] = (state.name, count, member) if member else (state.name, count)
    return out


def expand(table: list[tuple]) -> dict[int, tuple]:
    out = {}
    for first, last, *rest in table:
        for o in range(first, last + 1):
            out[o] = tuple(rest)
    return out


def log_batches(*spans: tuple[int, int]) -> list[tuple]:
    return [(a, b, -1, False, False) for a, b in spans]


# The log of the example: producer batches 100-109, 110-112, 113-118, 119, 120, 121-129.
LOG = log_batches((100, 109), (110, 112), (113, 118), (119, 119), (120, 120), (121, 129))


def read_log(offset: int) -> list[tuple]:
    return [b for b in LOG if b[1] >= offset]


def fetch(sp: SharePartition, member: str, max_records: int) -> list[AcquiredRecords]:
    return sp.acquire(member, read_log(sp.next_fetch_offset()), max_records)


def state(spso: int, *batches: tuple[int, int, DS, int]) -> PartitionState:
    return PartitionState(0, 0, spso, tuple(StateBatch(*b) for b in batches))


def test_seed_002_cumulative_state_example() -> None:
    clock = Clock()
    sp = SharePartition(ShareConfig(), clock, start_offset=100)

    # Starting state of topic-partition with latest offset 100: SPSO=100, SPEO=100
    assert (sp.spso, sp.end_offset) == (100, 100)
    assert sp.snapshot() == state(100)

    # Fetch records 100-109: SPEO=110, records 100-109 (acquired, delivery count 1)
    assert fetch(sp, "c1", 10) == [AcquiredRecords(100, 109, 1)]
    assert (sp.spso, sp.end_offset) == (100, 110)
    assert per_offset(sp) == expand([(100, 109, "ACQUIRED", 1, "c1")])
    assert sp.snapshot() == state(100)

    # Acknowledge 100-109: SPSO=110, SPEO=110; written {StartOffset 110, StateBatches []}
    plan = sp.prepare_acknowledge("c1", [(100, 109, [ACCEPT])])
    assert plan.ok and plan.state == state(110)
    assert sp.commit(plan) == ErrorCode.none
    assert (sp.spso, sp.end_offset) == (110, 110)
    assert per_offset(sp) == {}
    assert sp.snapshot() == state(110)

    # Fetch records 110-119: consumer 1 gets 110-112, consumer 2 gets 113-118, consumer 3 gets 119
    clock.now = 0
    assert fetch(sp, "c1", 1) == [AcquiredRecords(110, 112, 1)]
    clock.now = 1_000
    assert fetch(sp, "c2", 1) == [AcquiredRecords(113, 118, 1)]
    clock.now = 2_000
    assert fetch(sp, "c3", 1) == [AcquiredRecords(119, 119, 1)]
    assert (sp.spso, sp.end_offset) == (110, 120)
    assert per_offset(sp) == expand(
        [(110, 112, "ACQUIRED", 1, "c1"), (113, 118, "ACQUIRED", 1, "c2"), (119, 119, "ACQUIRED", 1, "c3")]
    )
    assert sp.snapshot() == state(110)

    # Release 110 (consumer 1): record 110 (available, delivery count 1)
    plan = sp.prepare_acknowledge("c1", [(110, 110, [RELEASE])])
    assert plan.state == state(110, (110, 110, DS.AVAILABLE, 1))
    assert sp.commit(plan) == ErrorCode.none
    assert (sp.spso, sp.end_offset) == (110, 120)
    assert per_offset(sp) == expand(
        [
            (110, 110, "AVAILABLE", 1),
            (111, 112, "ACQUIRED", 1, "c1"),
            (113, 118, "ACQUIRED", 1, "c2"),
            (119, 119, "ACQUIRED", 1, "c3"),
        ]
    )
    assert sp.snapshot() == state(110, (110, 110, DS.AVAILABLE, 1))

    # Acknowledge 119 (consumer 3): record 119 acknowledged (DeliveryCount 1)
    assert sp.acknowledge("c3", [(119, 119, [ACCEPT])]) == ErrorCode.none
    assert (sp.spso, sp.end_offset) == (110, 120)
    assert sp.snapshot() == state(110, (110, 110, DS.AVAILABLE, 1), (119, 119, DS.ACKNOWLEDGED, 1))

    # Fetch records 110, 120 (consumer 1): SPEO=121, 110 (acquired, count 2), 120 (acquired, count 1)
    clock.now = 3_000
    assert sp.next_fetch_offset() == 110
    assert fetch(sp, "c1", 2) == [AcquiredRecords(110, 110, 2), AcquiredRecords(120, 120, 1)]
    assert (sp.spso, sp.end_offset) == (110, 121)
    assert per_offset(sp) == expand(
        [
            (110, 110, "ACQUIRED", 2, "c1"),
            (111, 112, "ACQUIRED", 1, "c1"),
            (113, 118, "ACQUIRED", 1, "c2"),
            (119, 119, "ACKNOWLEDGED", 1),
            (120, 120, "ACQUIRED", 1, "c1"),
        ]
    )
    # 110 is written as AVAILABLE with its count before this attempt (1)
    assert sp.snapshot() == state(110, (110, 110, DS.AVAILABLE, 1), (119, 119, DS.ACKNOWLEDGED, 1))

    # Lock timeout elapsed 111, 112 (consumer 1's first lock): 111-112 (available, delivery count 1)
    assert sp.next_lock_deadline() == 30_000
    assert sp.expire(30_000) == 2
    assert sp.next_lock_deadline() == 31_000
    assert (sp.spso, sp.end_offset) == (110, 121)
    assert per_offset(sp) == expand(
        [
            (110, 110, "ACQUIRED", 2, "c1"),
            (111, 112, "AVAILABLE", 1),
            (113, 118, "ACQUIRED", 1, "c2"),
            (119, 119, "ACKNOWLEDGED", 1),
            (120, 120, "ACQUIRED", 1, "c1"),
        ]
    )
    # seed 000's SHARE_CHECKPOINT of exactly this state, with the implicit count-0 entries dropped
    # and the equal neighbours 110 and 111-112 (Available, count 1) merged:
    assert sp.snapshot() == state(110, (110, 112, DS.AVAILABLE, 1), (119, 119, DS.ACKNOWLEDGED, 1))

    # Acknowledge 113-118 (consumer 2): records 113-119 acknowledged
    clock.now = 30_500
    assert sp.acknowledge("c2", [(113, 118, [ACCEPT])]) == ErrorCode.none
    assert per_offset(sp) == expand(
        [
            (110, 110, "ACQUIRED", 2, "c1"),
            (111, 112, "AVAILABLE", 1),
            (113, 119, "ACKNOWLEDGED", 1),
            (120, 120, "ACQUIRED", 1, "c1"),
        ]
    )
    assert sp.snapshot() == state(110, (110, 112, DS.AVAILABLE, 1), (113, 119, DS.ACKNOWLEDGED, 1))

    # Fetch records 111, 112 (consumer 3): 111-112 (acquired, delivery count 2)
    assert sp.next_fetch_offset() == 111
    assert fetch(sp, "c3", 2) == [AcquiredRecords(111, 112, 2)]
    assert per_offset(sp) == expand(
        [
            (110, 110, "ACQUIRED", 2, "c1"),
            (111, 112, "ACQUIRED", 2, "c3"),
            (113, 119, "ACKNOWLEDGED", 1),
            (120, 120, "ACQUIRED", 1, "c1"),
        ]
    )
    assert sp.snapshot() == state(110, (110, 112, DS.AVAILABLE, 1), (113, 119, DS.ACKNOWLEDGED, 1))

    # Acknowledge 110 (consumer 1): SPSO=111
    plan = sp.prepare_acknowledge("c1", [(110, 110, [ACCEPT])])
    assert plan.state == state(111, (111, 112, DS.AVAILABLE, 1), (113, 119, DS.ACKNOWLEDGED, 1))
    assert sp.commit(plan) == ErrorCode.none
    assert (sp.spso, sp.end_offset) == (111, 121)
    assert sp.snapshot() == plan.state

    # Acknowledge 111, 112 (consumer 3): SPSO=120; written {StartOffset 120, StateBatches []}
    assert sp.acknowledge("c3", [(111, 112, [ACCEPT])]) == ErrorCode.none
    assert (sp.spso, sp.end_offset) == (120, 121)
    assert per_offset(sp) == expand([(120, 120, "ACQUIRED", 1, "c1")])
    assert sp.snapshot() == state(120)
    assert sp.delivery_complete_count == 0


def test_seed_000_checkpoint_restores_to_same_window() -> None:
    """Seed 000's SHARE_CHECKPOINT (SPSO=110, SPEO=121) read back: ACQUIRED records come back as
    AVAILABLE with the pre-attempt count and the window is redelivered from 110."""
    checkpoint = state(
        110,
        (110, 110, DS.AVAILABLE, 1),
        (111, 112, DS.AVAILABLE, 1),
        (113, 118, DS.AVAILABLE, 0),
        (119, 119, DS.ACKNOWLEDGED, 1),
        (120, 120, DS.AVAILABLE, 0),
    )
    clock = Clock()
    sp = SharePartition.restore(checkpoint, clock, ShareConfig())
    assert (sp.spso, sp.end_offset) == (110, 121)
    assert per_offset(sp) == expand(
        [
            (110, 112, "AVAILABLE", 1),
            (113, 118, "AVAILABLE", 0),
            (119, 119, "ACKNOWLEDGED", 1),
            (120, 120, "AVAILABLE", 0),
        ]
    )
    # canonical form: count-0 entries implicit, equal neighbours merged
    assert sp.snapshot() == state(110, (110, 112, DS.AVAILABLE, 1), (119, 119, DS.ACKNOWLEDGED, 1))
    assert sp.delivery_complete_count == 1
    assert sp.lag(130) == 130 - 110 - 1

    # redelivery: 110-112 come back with count 2, 113-118 with count 1, 119 is skipped
    got = sp.acquire("c9", read_log(sp.next_fetch_offset()), 100)
    assert got == [AcquiredRecords(110, 112, 2), AcquiredRecords(113, 118, 1), AcquiredRecords(120, 129, 1)]


def test_seed_000_delta_chain_cumulative_states() -> None:
    """Seed 000's SHARE_DELTA chain: after each operation the cumulative state equals the
    checkpoint replayed with the deltas so far (here: our complete snapshot after each step)."""
    clock = Clock()
    sp = SharePartition(ShareConfig(), clock, start_offset=100)
    fetch(sp, "c", 10)
    sp.acknowledge("c", [(100, 109, [ACCEPT])])  # delta 131: 100-109 Acknowledged -> SPSO 110
    assert sp.snapshot() == state(110)
    fetch(sp, "c1", 1)
    clock.now = 1
    fetch(sp, "c2", 1)
    clock.now = 2
    fetch(sp, "c3", 1)
    sp.acknowledge("c1", [(110, 110, [RELEASE])])  # delta 132: 110 Available count 1
    assert sp.snapshot() == state(110, (110, 110, DS.AVAILABLE, 1))
    sp.acknowledge("c3", [(119, 119, [ACCEPT])])  # delta 133: 111-118 Available 0, 119 Acknowledged 1
    assert sp.snapshot() == state(110, (110, 110, DS.AVAILABLE, 1), (119, 119, DS.ACKNOWLEDGED, 1))
    clock.now = 5
    fetch(sp, "c1", 2)  # 110 (count 2) and 120 (count 1): nothing new to persist
    assert sp.snapshot() == state(110, (110, 110, DS.AVAILABLE, 1), (119, 119, DS.ACKNOWLEDGED, 1))
    sp.expire(30_000)  # delta 134: 111-112 Available count 1
    assert sp.snapshot() == state(110, (110, 112, DS.AVAILABLE, 1), (119, 119, DS.ACKNOWLEDGED, 1))
    sp.acknowledge("c2", [(113, 118, [ACCEPT])])  # delta 135
    assert sp.snapshot() == state(110, (110, 112, DS.AVAILABLE, 1), (113, 119, DS.ACKNOWLEDGED, 1))
    fetch(sp, "c3", 2)  # 111-112 count 2
    sp.acknowledge("c1", [(110, 110, [ACCEPT])])  # delta 136 -> SPSO 111
    assert sp.snapshot() == state(111, (111, 112, DS.AVAILABLE, 1), (113, 119, DS.ACKNOWLEDGED, 1))
    sp.acknowledge("c3", [(111, 112, [ACCEPT])])  # delta 137 / checkpoint epoch 2: SPSO 120, no states
    assert sp.snapshot() == state(120)
    # "the delivery of 120 has not been recorded yet": restoring replays it as a first attempt
    sp2 = SharePartition.restore(sp.snapshot(), clock, ShareConfig())
    assert (sp2.spso, sp2.end_offset) == (120, 120)
    assert sp2.acquire("c", read_log(120), 1) == [AcquiredRecords(120, 120, 1)]


def test_kip_in_flight_records_example() -> None:
    """KIP-932 "In-flight records example": durable state = SPSO 2, count 2 of offset 3,
    Acknowledged 5, Archived 6 (2 and 4 are acquired with count 1 and not persisted)."""
    clock = Clock()
    sp = SharePartition(ShareConfig(), clock, start_offset=0)
    log = [(o, o, -1, False, False) for o in range(0, 20)]
    assert sp.acquire("a", log, 2) == [AcquiredRecords(0, 1, 1)]
    sp.acknowledge("a", [(0, 1, [REJECT])])  # 0 and 1 archived -> SPSO 2
    assert sp.acquire("a", log[2:], 5) == [AcquiredRecords(2, 6, 1)]
    sp.acknowledge("a", [(3, 3, [RELEASE]), (5, 5, [ACCEPT]), (6, 6, [REJECT])])
    assert sp.acquire("b", log[3:], 1) == [AcquiredRecords(3, 3, 2)]
    sp.acknowledge("b", [(3, 3, [RELEASE])])
    assert per_offset(sp) == expand(
        [
            (2, 2, "ACQUIRED", 1, "a"),
            (3, 3, "AVAILABLE", 2),
            (4, 4, "ACQUIRED", 1, "a"),
            (5, 5, "ACKNOWLEDGED", 1),
            (6, 6, "ARCHIVED", 1),
        ]
    )
    assert sp.spso == 2
    assert sp.snapshot() == state(
        2, (3, 3, DS.AVAILABLE, 2), (5, 5, DS.ACKNOWLEDGED, 1), (6, 6, DS.ARCHIVED, 1)
    )
