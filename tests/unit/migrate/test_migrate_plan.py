"""What a move carries and what it cannot (migrate/plan.py): the window counted from kshare's
snapshots against a naive reading of every offset, native Kafka's from its lag, and which configs go."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.migrate.plan import (
    GroupPlan,
    PartitionPlan,
    configs_from_native,
    configs_to_native,
    kshare_partition,
    native_partition,
)
from kshare_sidecar.persist.model import DeliveryState, PartitionState, StateBatch

ACK, ARCH, AVAIL = DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED, DeliveryState.AVAILABLE


def _batches(records: list[tuple[int, DeliveryState, int]]) -> tuple[StateBatch, ...]:
    """Consecutive offsets with one state and count as one batch (how snapshots store them)."""
    out: list[StateBatch] = []
    for offset, state, count in records:
        last = out[-1] if out else None
        if last and last.last_offset + 1 == offset and (last.delivery_state, last.delivery_count) == (state, count):
            out[-1] = StateBatch(last.first_offset, offset, state, count)
        else:
            out.append(StateBatch(offset, offset, state, count))
    return tuple(out)


@st.composite
def windows(draw):
    spso = draw(st.integers(0, 50))
    records, offset = [], spso
    for _ in range(draw(st.integers(0, 40))):
        offset += draw(st.integers(0, 3))
        state = draw(st.sampled_from([ACK, ARCH, AVAIL]))
        count = draw(st.integers(1, 4)) if state == AVAIL else draw(st.integers(0, 4))
        records.append((offset, state, count))
        offset += 1
    return spso, records


@given(windows())
def test_the_window_counts_match_every_offset_read_one_by_one(window):
    spso, records = window
    plan = kshare_partition("t", 3, PartitionState(state_epoch=1, leader_epoch=2, start_offset=spso,
                                                   state_batches=_batches(records)))
    assert (plan.topic, plan.partition, plan.start_offset) == ("t", 3, spso)
    assert plan.redelivered == sum(1 for o, s, _ in records if s in (ACK, ARCH) and o >= spso)
    assert plan.counts_reset == sum(1 for o, s, c in records if s == AVAIL and c > 0 and o >= spso)


def test_native_window_is_the_end_minus_the_start_minus_the_lag():
    assert native_partition("t", 0, 100, 30, 150).redelivered == 20  # 150 - 100 - 30
    assert native_partition("t", 0, 150, 0, 150).redelivered == 0
    unset = native_partition("t", 1, -1, -1, 150)
    assert (unset.start_offset, unset.redelivered, unset.error) == (-1, 0, None)
    assert native_partition("t", 2, 100, -1, 150).error is not None  # lag unknown: not counted


def test_a_native_start_offset_behind_records_all_done_moves_to_the_end_read_before():
    # Kafka 4.3.1 kept start 10, lag 0, after 10..19 were accepted: all done up to its end
    plan = native_partition("t", 0, 10, 0, 25, end_before=20)
    assert (plan.start_offset, plan.redelivered) == (20, 0)  # 20..24 came after Kafka counted: not skipped
    assert native_partition("t", 0, 10, 3, 25, end_before=20).start_offset == 10


def test_offsets_leave_unset_start_offsets_to_the_target():
    plan = GroupPlan("g", "to-native", "a", "b", [PartitionPlan("t", 0, 10, 3), PartitionPlan("t", 1, -1),
                                                   PartitionPlan("u", 0, 0, 1, 2)])
    assert plan.offsets() == {"t": {0: 10}, "u": {0: 0}}
    out = plan.as_json()
    assert (out["redelivered"], out["counts_reset"], len(out["partitions"])) == (4, 2, 3)


NATIVE = {"share.auto.offset.reset": "latest", "share.record.lock.duration.ms": "30000",
          "share.isolation.level": "read_uncommitted", "errors.deadletterqueue.copy.record.enable": "false",
          "consumer.session.timeout.ms": "45000"}


def test_to_native_carries_overrides_and_defaults_that_differ():
    kshare = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": 30000,
              "share.isolation.level": "read_uncommitted", "errors.deadletterqueue.copy.record.enable": True,
              "share.key.ordering": False, "consumer.session.timeout.ms": 50000}
    own = {"share.isolation.level": "read_uncommitted", "share.key.ordering": True, "share.assignor": "uniform",
           "share.coordinator": "sidecar"}
    carried, not_carried = configs_to_native(own, kshare, NATIVE)
    assert carried == {"share.auto.offset.reset": "earliest",  # the sidecar's default differs: kept
                       "share.isolation.level": "read_uncommitted",  # an override, even if equal
                       "errors.deadletterqueue.copy.record.enable": "true"}  # booleans as Kafka writes them
    assert set(not_carried) == {"share.key.ordering", "share.assignor"}  # kshare's own overrides
    assert "consumer.session.timeout.ms" not in carried  # not a share group's behaviour


def test_from_native_carries_what_kshare_knows():
    own = {"share.record.lock.duration.ms": "45000", "share.assignor.offload.enable": "true"}
    kshare = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": 30000,
              "share.isolation.level": "read_uncommitted", "errors.deadletterqueue.copy.record.enable": False}
    carried, not_carried = configs_from_native(own, {**NATIVE, **own}, kshare)
    assert carried == {"share.record.lock.duration.ms": "45000", "share.auto.offset.reset": "latest"}
    assert list(not_carried) == ["share.assignor.offload.enable"]
