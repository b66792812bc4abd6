"""Every acknowledgement error answers with Kafka's code and leaves the partition untouched."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.share.engine import AckBatch, AcquiredRecords, ShareConfig, SharePartition

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
REQ = ErrorCode.invalid_request
STATE = ErrorCode.invalid_record_state


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def fingerprint(sp: SharePartition) -> tuple:
    return (
        sp.snapshot(),
        list(sp.ranges()),
        sp.spso,
        sp.end_offset,
        sp.version,
        sp.delivery_complete_count,
        sp.next_fetch_offset(),
        sp.next_lock_deadline(),
    )


@pytest.fixture
def sp() -> SharePartition:
    """Window 10..39: a holds 10-19, b holds 20-22 and 24, 23 rejected (archived, count 1),
    25 acknowledged, 26-27 available (count 2), 28 a log hole (archived, never delivered), 29-39 held by a."""
    clock = Clock()
    sp = SharePartition(ShareConfig(record_lock_duration_ms=1000), clock, start_offset=10)
    log = [(10, 19, -1, False, False), (20, 27, -1, False, False), (29, 39, -1, False, False)]
    assert sp.acquire("a", log[:1], 5) == [AcquiredRecords(10, 19, 1)]
    assert sp.acquire("b", log[1:2], 5) == [AcquiredRecords(20, 27, 1)]
    assert sp.acknowledge("b", [(25, 27, [ACCEPT, RELEASE, RELEASE])]) == ErrorCode.none
    assert sp.acquire("a", log[2:], 5) == [AcquiredRecords(29, 39, 1)]
    assert sp.acknowledge("b", [(24, 24, [RELEASE])]) == ErrorCode.none
    assert sp.acquire("b", log[1:2], 5) == [AcquiredRecords(24, 24, 2), AcquiredRecords(26, 27, 2)]
    assert sp.acknowledge("b", [(26, 27, [RELEASE]), (23, 23, [REJECT])]) == REQ  # not ascending
    assert sp.acknowledge("b", [(23, 23, [REJECT]), (26, 27, [RELEASE])]) == ErrorCode.none
    return sp


CASES = [
    # malformed -> INVALID_REQUEST
    ("first > last", "a", [(15, 12, [ACCEPT])], REQ),
    ("negative offset", "a", [(-1, 12, [ACCEPT])], REQ),
    ("empty types", "a", [(10, 12, [])], REQ),
    ("types length neither 1 nor n", "a", [(10, 12, [ACCEPT, ACCEPT])], REQ),
    ("type out of range", "a", [(10, 12, [5])], REQ),
    ("negative type", "a", [(10, 12, [-1])], REQ),
    ("bad type inside per-offset list", "a", [(10, 12, [ACCEPT, 9, ACCEPT])], REQ),
    ("overlapping batches", "a", [(10, 12, [ACCEPT]), (12, 14, [ACCEPT])], REQ),
    ("descending batches", "a", [(13, 14, [ACCEPT]), (10, 12, [ACCEPT])], REQ),
    ("valid batch then malformed", "a", [(10, 11, [ACCEPT]), (12, 11, [ACCEPT])], REQ),
    ("not a batch", "a", [(10, 11)], REQ),
    # wrong state or member -> INVALID_RECORD_STATE
    ("other member's records", "b", [(10, 12, [ACCEPT])], STATE),
    ("unknown member", "zz", [(10, 10, [RELEASE])], STATE),
    ("spans two members", "a", [(18, 21, [ACCEPT])], STATE),
    ("acknowledged record", "b", [(25, 25, [ACCEPT])], STATE),
    ("available record", "b", [(26, 26, [REJECT])], STATE),
    ("renew of available record", "b", [(26, 26, [RENEW])], STATE),
    ("accept of a log hole", "a", [(28, 28, [ACCEPT])], STATE),
    ("below SPSO", "a", [(5, 10, [ACCEPT])], STATE),
    # past the last in-flight offset -> INVALID_REQUEST, as Kafka 4.3.1 answers (found by the
    # differential harness, tests/e2e/parity)
    ("beyond the window", "a", [(38, 40, [ACCEPT])], REQ),
    ("far beyond the window", "a", [(100, 100, [GAP])], REQ),
    ("valid first batch, bad second (atomic)", "a", [(10, 11, [ACCEPT]), (20, 20, [ACCEPT])], STATE),
    ("per-offset types, one bad offset", "b", [(23, 25, [ACCEPT, ACCEPT, ACCEPT])], STATE),
    ("gap over available", "b", [(26, 27, [GAP])], STATE),
    ("gap over a rejected record", "b", [(23, 23, [GAP])], STATE),
    ("gap over hole and acknowledged record", "b", [(25, 28, [GAP])], STATE),
]


@pytest.mark.parametrize(("what", "member", "batches", "code"), CASES, ids=[c[0] for c in CASES])
def test_error_leaves_state_untouched(sp: SharePartition, what, member, batches, code) -> None:
    before = fingerprint(sp)
    plan = sp.prepare_acknowledge(member, batches)
    assert plan.error == code, what
    assert not plan.ok
    assert sp.commit(plan) == code
    assert sp.acknowledge(member, batches) == code
    assert fingerprint(sp) == before
    with pytest.raises(ValueError):
        _ = plan.state


def test_renew_needs_permission(sp: SharePartition) -> None:
    before = fingerprint(sp)
    assert sp.acknowledge("a", [(10, 12, [RENEW])], allow_renew=False) == REQ
    assert fingerprint(sp) == before


def test_gap_may_name_offsets_without_records(sp: SharePartition) -> None:
    # 28 never held a record (compaction hole): Gap may cover it together with a's record 29
    assert sp.acknowledge("a", [(28, 29, [GAP])]) == ErrorCode.none
    ranges = [(f, l, s.name, c, m) for f, l, s, c, m, _ in sp.ranges()]
    assert ranges[-3:] == [
        (28, 28, "ARCHIVED", 0, None),
        (29, 29, "ARCHIVED", 1, None),
        (30, 39, "ACQUIRED", 1, "a"),
    ]


def test_kio_like_objects_are_accepted(sp: SharePartition) -> None:
    class Batch:
        def __init__(self, first, last, types):
            self.first_offset, self.last_offset, self.acknowledge_types = first, last, types

    assert sp.acknowledge("a", [Batch(10, 19, (ACCEPT,))]) == ErrorCode.none
    assert sp.acknowledge("b", [AckBatch(20, 22, (ACCEPT,))]) == ErrorCode.none
    assert sp.spso == 24


def test_failed_write_means_no_commit(sp: SharePartition) -> None:
    before = fingerprint(sp)
    plan = sp.prepare_acknowledge("a", [(10, 19, [ACCEPT])])
    assert plan.ok and plan.state.start_offset == 20
    del plan  # the persister failed: the caller drops the plan
    assert fingerprint(sp) == before


def test_stale_plan_is_revalidated_and_rejected(sp: SharePartition) -> None:
    clock = sp._clock
    plan = sp.prepare_acknowledge("a", [(10, 19, [ACCEPT])])
    assert plan.ok
    clock.now = 1000  # a's locks expire while the state write is in flight
    assert sp.expire() > 0
    assert plan.stale
    before = fingerprint(sp)
    assert sp.commit(plan) == STATE
    assert fingerprint(sp) == before


def test_stale_plan_still_valid_is_applied(sp: SharePartition) -> None:
    plan = sp.prepare_acknowledge("a", [(10, 19, [ACCEPT])])
    persisted = plan.state
    assert sp.acknowledge("b", [(20, 22, [ACCEPT])]) == ErrorCode.none  # unrelated change meanwhile
    assert plan.stale
    assert sp.commit(plan) == ErrorCode.none
    assert sp.spso == 24
    assert persisted.start_offset == 20  # what was written before the other ack landed
    assert sp.snapshot().start_offset == 24


def test_plan_from_other_partition_is_refused(sp: SharePartition) -> None:
    other = SharePartition(ShareConfig(), lambda: 0)
    plan = other.prepare_acknowledge("a", [(0, 0, [ACCEPT])])
    with pytest.raises(ValueError):
        sp.commit(plan)


def test_plan_is_atomic_on_success(sp: SharePartition) -> None:
    plan = sp.prepare_acknowledge("a", [(10, 12, [ACCEPT, RELEASE, REJECT]), (30, 31, [RENEW])])
    assert plan.ok
    expected = plan.state
    assert plan.record_count(ACCEPT) == 1 and plan.record_count(RENEW) == 2
    assert sp.commit(plan) == ErrorCode.none
    assert sp.snapshot() == expected
