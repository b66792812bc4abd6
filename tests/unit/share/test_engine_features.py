"""Targeted behaviour: batch acquisition, caps, locks, throttling, transactions, log start, reset, lag."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kshare_sidecar.persist.model import DeliveryState as DS
from kshare_sidecar.persist.model import PartitionState, StateBatch
from kshare_sidecar.share.engine import AcquiredRecords as AR
from kshare_sidecar.share.engine import AcquireMode, ShareConfig, SharePartition

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def data(*spans: tuple[int, int]) -> list[tuple]:
    return [(a, b, -1, False, False) for a, b in spans]


def rows(sp: SharePartition) -> list[tuple]:
    return [(f, l, s.name, c, m) for f, l, s, c, m, _ in sp.ranges()]


def make(**cfg) -> tuple[SharePartition, Clock]:
    clock = Clock()
    return SharePartition(ShareConfig(**cfg), clock), clock


def test_whole_batches_soft_max_records_and_batch_size_pieces() -> None:
    sp, _ = make()
    log = data((0, 3), (4, 7), (8, 11), (12, 15))
    # MaxRecords 5 rounds up to the end of the batch holding the 5th record; BatchSize 4 cuts at batch starts
    assert sp.acquire("a", log, 5, 4) == [AR(0, 3, 1), AR(4, 7, 1)]
    assert rows(sp) == [(0, 3, "ACQUIRED", 1, "a"), (4, 7, "ACQUIRED", 1, "a")]
    # without a batch-size cut the contiguous result is one piece and one range
    assert sp.acquire("b", log[2:], 8, 100) == [AR(8, 15, 1)]
    assert sp.in_flight == 16


def test_record_limit_mode_is_strict() -> None:
    sp, _ = make()
    log = data((0, 9), (10, 19))
    assert sp.acquire("a", log, 3, mode=AcquireMode.RECORD_LIMIT) == [AR(0, 2, 1)]
    assert sp.end_offset == 3 and sp.next_fetch_offset() == 3
    assert sp.acquire("b", log, 12, mode=AcquireMode.RECORD_LIMIT) == [AR(3, 14, 1)]


def test_cap_counts_the_window_and_only_reavailable_records_are_acquirable_when_full() -> None:
    sp, _ = make(max_record_locks=10)
    log = data((0, 5), (6, 11), (12, 20))
    # Kafka counts the records still allowed (10) from the fetch offset and rounds up to the end of
    # the log batch holding the last of them: the batch crossing the cap is acquired whole
    # (SharePartition.lastOffsetAndMaxRecordsToAcquire + acquireNewBatchRecords; a native 4.3 broker
    # acquired 17,428 records of two 8.7k-record log batches on a partition capped at 10,000)
    assert sp.acquire("a", log, 100) == [AR(0, 11, 1)]
    assert sp.in_flight == 12 and sp.next_fetch_offset() is None and not sp.can_acquire()
    # acknowledged records above SPSO still count against the cap (Kafka's SPEO - SPSO + 1)
    assert sp.acknowledge("a", [(6, 9, [ACCEPT])]) == ErrorCode.none
    assert sp.next_fetch_offset() is None
    assert sp.acknowledge("a", [(2, 2, [RELEASE])]) == ErrorCode.none
    assert sp.next_fetch_offset() == 2
    # the window is full: only the re-available record inside it, never new ones
    assert sp.acquire("b", log, 100, fetch_offset=2) == [AR(2, 2, 2)]
    assert sp.next_fetch_offset() is None
    assert sp.acknowledge("a", [(0, 1, [ACCEPT])]) == ErrorCode.none
    assert sp.spso == 2 and sp.next_fetch_offset() is None  # 2..11: still 10 in flight
    assert sp.acknowledge("b", [(2, 2, [ACCEPT])]) == ErrorCode.none
    assert sp.spso == 3 and sp.next_fetch_offset() == 12
    assert sp.acquire("b", log[2:], 100, fetch_offset=12) == [AR(12, 20, 1)]  # crosses the cap at 12: whole


def test_record_limit_mode_stops_exactly_at_the_cap() -> None:
    sp, _ = make(max_record_locks=10)
    log = data((0, 5), (6, 11), (12, 20))
    assert sp.acquire("a", log, 100, mode=AcquireMode.RECORD_LIMIT) == [AR(0, 9, 1)]
    assert sp.in_flight == 10 and not sp.can_acquire()


def test_control_batches_holes_and_aborted_transactions_are_archived() -> None:
    sp, _ = make()
    log = [
        (0, 4, 7, True, False),  # aborted transaction of producer 7
        (5, 9, -1, False, False),
        (10, 10, 7, True, True),  # abort marker
        (11, 14, 8, True, False),  # committed transaction of producer 8
        (15, 15, 8, True, True),  # commit marker
        (18, 20, -1, False, False),  # 16-17 removed by compaction
    ]
    got = sp.acquire("a", log, 100, aborted_transactions=[(7, 0)], fetch_offset=0)
    assert got == [AR(5, 9, 1), AR(11, 14, 1), AR(18, 20, 1)]
    assert rows(sp) == [
        (0, 4, "ARCHIVED", 0, None),
        (5, 9, "ACQUIRED", 1, "a"),
        (10, 10, "ARCHIVED", 0, None),
        (11, 14, "ACQUIRED", 1, "a"),
        (15, 17, "ARCHIVED", 0, None),
        (18, 20, "ACQUIRED", 1, "a"),
    ][1:]  # the archived head is already behind SPSO
    assert sp.spso == 5
    assert sp.delivery_complete_count == 4
    assert sp.lag(21) == 21 - 5 - 4
    # read_uncommitted: the same transactional data is delivered
    sp2, _ = make()
    assert sp2.acquire("a", log[:1], 100) == [AR(0, 4, 1)]


def test_lock_expiry_heap_renew_and_deadlines() -> None:
    sp, clock = make(record_lock_duration_ms=1000)
    log = data((0, 9), (10, 19))
    assert sp.acquire("a", log[:1], 1) == [AR(0, 9, 1)]
    clock.now = 500
    assert sp.acquire("b", log[1:], 1) == [AR(10, 19, 1)]
    assert sp.next_lock_deadline() == 1000
    clock.now = 900
    assert sp.acknowledge("a", [(5, 9, [RENEW])]) == ErrorCode.none  # restarts 5-9 for the full duration
    assert sp.expire(999) == 0
    assert sp.expire(1000) == 5  # only 0-4 still on the first lock
    assert rows(sp)[:2] == [(0, 4, "AVAILABLE", 1, None), (5, 9, "ACQUIRED", 1, "a")]
    assert sp.next_lock_deadline() == 1500
    assert sp.expire(1900) == 15
    assert sp.next_lock_deadline() is None
    assert rows(sp) == [(0, 19, "AVAILABLE", 1, None)]


def test_expired_and_released_records_at_the_limit_are_archived() -> None:
    sp, clock = make(delivery_count_limit=2, record_lock_duration_ms=10, throttle_redelivery=False)
    log = data((0, 4))
    for attempt in (1, 2):
        assert sp.acquire("a", log, 10, fetch_offset=sp.next_fetch_offset()) == [AR(0, 4, attempt)]
        clock.now += 10
        assert sp.expire() == 5
    assert sp.spso == 5 and rows(sp) == []
    sp, clock = make(delivery_count_limit=2)
    sp.acquire("a", log, 10)
    sp.acknowledge("a", [(0, 4, [RELEASE])])
    sp.acquire("a", log, 10, fetch_offset=0)
    assert sp.acknowledge("a", [(0, 4, [RELEASE])]) == ErrorCode.none
    assert sp.spso == 5


def test_release_member_keeps_counts() -> None:
    sp, _ = make(delivery_count_limit=3)
    sp.acquire("a", data((0, 4)), 10)
    sp.acquire("b", data((5, 9)), 10)
    assert sp.release_member("a") == 5
    assert sp.release_member("a") == 0
    assert rows(sp) == [(0, 4, "AVAILABLE", 1, None), (5, 9, "ACQUIRED", 1, "b")]
    assert sp.members() == ["b"]


def test_throttled_redelivery_shrinks_and_ends_alone() -> None:
    # limit 5 -> throttling from count 3: the 4th attempt in chunks of max_records >> 1, the 5th alone
    sp, clock = make(delivery_count_limit=5, record_lock_duration_ms=10)
    log = data((0, 15))
    expected = [[AR(0, 15, 1)], [AR(0, 15, 2)], [AR(0, 15, 3)], [AR(0, 7, 4)], [AR(0, 0, 5)]]
    for want in expected:
        assert sp.acquire("a", log, 16, fetch_offset=sp.next_fetch_offset()) == want
        clock.now += 10
        sp.expire()
    assert sp.spso == 1  # offset 0 used its last attempt and was archived
    sp.release_member("a")


def test_throttled_records_are_not_mixed_with_normal_ones() -> None:
    sp, clock = make(delivery_count_limit=5, record_lock_duration_ms=10)
    log = data((0, 0), (1, 1), (2, 2))
    sp.acquire("a", log, 3)  # count 1 everywhere
    sp.acknowledge("a", [(0, 0, [RELEASE]), (1, 1, [RELEASE]), (2, 2, [RELEASE])])
    for count in (2, 3):
        assert sp.acquire("a", log[1:2], 1, fetch_offset=1) == [AR(1, 1, count)]
        sp.acknowledge("a", [(1, 1, [RELEASE])])
    # 0 (count 1) is normal; 1 (count 3 >= threshold 3) is throttled and waits for a fetch of its own
    assert sp.acquire("b", log, 10, fetch_offset=0) == [AR(0, 0, 2)]
    assert sp.acquire("b", log, 10, fetch_offset=sp.next_fetch_offset()) == [AR(1, 1, 4)]
    assert sp.acquire("b", log, 10, fetch_offset=sp.next_fetch_offset()) == [AR(2, 2, 2)]


def test_throttling_can_be_switched_off() -> None:
    sp, clock = make(delivery_count_limit=3, record_lock_duration_ms=10, throttle_redelivery=False)
    log = data((0, 9))
    for attempt in (1, 2, 3):
        assert sp.acquire("a", log, 10, fetch_offset=sp.next_fetch_offset()) == [AR(0, 9, attempt)]
        clock.now += 10
        sp.expire()
    assert sp.spso == 10


def test_restored_records_beyond_a_lowered_limit_are_archived_not_delivered() -> None:
    state = PartitionState(1, 0, 0, (StateBatch(0, 4, DS.AVAILABLE, 3), StateBatch(5, 9, DS.AVAILABLE, 1)))
    sp = SharePartition.restore(state, Clock(), ShareConfig(delivery_count_limit=3))
    assert sp.acquire("a", data((0, 9)), 100, fetch_offset=0) == [AR(5, 9, 2)]
    assert sp.spso == 5


def test_move_log_start_archives_available_and_lets_acquired_finish() -> None:
    sp, clock = make(record_lock_duration_ms=100)
    sp.acquire("a", data((0, 4)), 10)
    sp.acquire("b", data((5, 9)), 10)
    sp.acknowledge("b", [(5, 9, [RELEASE])])
    assert sp.move_log_start(8) == 3  # 5-7 archived; 0-4 still with a
    assert sp.spso == 0 and sp.next_fetch_offset() == 8
    assert sp.acknowledge("a", [(0, 4, [RELEASE])]) == ErrorCode.none  # below log start: archived
    assert sp.spso == 8 and rows(sp) == [(8, 9, "AVAILABLE", 1, None)]
    assert sp.move_log_start(20) == 12  # past the window: all archived, window restarts at 20
    assert (sp.spso, sp.end_offset, sp.next_fetch_offset()) == (20, 20, 20)
    assert sp.move_log_start(15) == 0  # the log start never moves back


def test_reset_discards_everything_and_bumps_the_epoch() -> None:
    sp, _ = make()
    sp.acquire("a", data((0, 9)), 10)
    sp.reset(100, state_epoch=7)
    assert (sp.spso, sp.end_offset, sp.state_epoch) == (100, 100, 7)
    assert rows(sp) == [] and sp.next_lock_deadline() is None and sp.members() == []
    assert sp.acknowledge("a", [(0, 9, [ACCEPT])]) == ErrorCode.invalid_record_state
    assert sp.snapshot() == PartitionState(7, 0, 100, ())


def test_lock_heap_stays_proportional_to_live_locks() -> None:
    sp, _ = make()
    for i in range(2000):
        sp.acquire("a", data((i * 10, i * 10 + 9)), 10)
        sp.acknowledge("a", [(i * 10, i * 10 + 9, [ACCEPT])])
    assert sp._locks.heap_size <= 64
    assert sp.spso == 20000 and sp.delivery_complete_count == 0


def test_restore_rejects_bad_states() -> None:
    import pytest

    with pytest.raises(ValueError):
        SharePartition.restore(PartitionState(0, 0, -1, ()), Clock(), ShareConfig())
    overlapping = (StateBatch(5, 9, DS.ARCHIVED, 1), StateBatch(8, 12, DS.ARCHIVED, 1))
    with pytest.raises(ValueError):
        SharePartition.restore(PartitionState(0, 0, 0, overlapping), Clock(), ShareConfig())
