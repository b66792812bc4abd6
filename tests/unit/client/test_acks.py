"""Acknowledgement bookkeeping and AcknowledgementBatch packing of the asyncio client."""

from __future__ import annotations

import pytest

from kshare_sidecar.client.acks import AckBatch, PartitionInFlight, ack_batches
from kshare_sidecar.client.acks import AcknowledgeType as T
from kshare_sidecar.client.errors import AckStateError


def test_contiguous_uniform_run_is_one_batch_with_one_type():
    assert ack_batches({5: T.ACCEPT, 6: T.ACCEPT, 7: T.ACCEPT}) == [AckBatch(5, 7, (1,))]


def test_a_missing_offset_splits_batches():
    assert ack_batches({1: 1, 2: 1, 4: 1, 5: 1}) == [AckBatch(1, 2, (1,)), AckBatch(4, 5, (1,))]


def test_mixed_types_in_a_run_get_one_type_per_offset():
    assert ack_batches({10: T.ACCEPT, 11: T.RELEASE, 12: T.GAP, 13: T.REJECT}) == [AckBatch(10, 13, (1, 2, 0, 3))]


def test_unsorted_input_and_empty():
    assert ack_batches({3: 2, 1: 2, 2: 2}) == [AckBatch(1, 3, (2,))]
    assert ack_batches({}) == []


def test_acquired_offsets_without_a_record_are_gap_acked():
    inf = PartitionInFlight(node=1)
    kept = inf.add_acquired([(0, 4, 1)], record_offsets=[0, 1, 3, 9])  # 2 and 4: control/compacted
    assert kept == [0, 1, 3]  # 9 is outside every acquired range: someone else's
    assert inf.acquired == {0: 1, 1: 1, 3: 1}
    assert inf.pending == {2: T.GAP, 4: T.GAP}
    inf.acknowledge(0, T.ACCEPT)
    inf.acknowledge(1, T.ACCEPT)
    inf.acknowledge(3, T.RELEASE)
    assert inf.take_pending() == [AckBatch(0, 4, (1, 1, 0, 2, 0))]
    assert inf.empty


def test_delivery_count_per_range():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 1, 1), (2, 3, 3)], record_offsets=range(4))
    assert inf.acquired == {0: 1, 1: 1, 2: 3, 3: 3}


def test_implicit_mode_accepts_delivered_records_but_keeps_explicit_acks():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 3, 1)], record_offsets=range(4))
    for o in (0, 1, 2):
        inf.deliver(o)
    inf.acknowledge(1, T.REJECT)
    inf.accept_delivered()
    assert inf.pending == {0: T.ACCEPT, 1: T.REJECT, 2: T.ACCEPT}
    assert inf.take_pending() == [AckBatch(0, 2, (1, 3, 1))]
    assert inf.acquired == {3: 1} and not inf.empty  # 3 was never handed out


def test_only_acquired_records_can_be_acknowledged_and_only_with_final_types():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 0, 1)], record_offsets=[0])
    with pytest.raises(AckStateError):
        inf.acknowledge(7, T.ACCEPT)
    with pytest.raises(ValueError):
        inf.acknowledge(0, T.GAP)
    with pytest.raises(ValueError):
        inf.acknowledge(0, T.RENEW)
    inf.acknowledge(0, T.RELEASE)
    inf.acknowledge(0, T.ACCEPT)  # the later ack before sending wins
    assert inf.take_pending() == [AckBatch(0, 0, (1,))]
    with pytest.raises(AckStateError):
        inf.acknowledge(0, T.ACCEPT)  # sent: settled


def test_drop_forgets_everything_and_counts_lost_acks():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 2, 1)], record_offsets=[0, 1, 2])
    inf.acknowledge(0, T.ACCEPT)
    assert inf.drop() == 1 and inf.empty


def test_reacquired_offset_clears_stale_state():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 0, 1)], record_offsets=[0])
    inf.deliver(0)
    inf.add_acquired([(0, 0, 2)], record_offsets=[0])
    assert inf.acquired == {0: 2} and not inf.delivered


def test_implicit_accept_skips_records_not_seen_yet():
    inf = PartitionInFlight(node=1)
    inf.add_acquired([(0, 2, 1)], record_offsets=range(3))
    for o in range(3):
        inf.deliver(o)
    inf.accept_delivered(skip={2})
    assert inf.pending == {0: T.ACCEPT, 1: T.ACCEPT} and inf.delivered == {2}
