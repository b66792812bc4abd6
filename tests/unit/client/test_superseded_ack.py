"""An acknowledgement the application queued for a record whose lock had run out, replaced by a
new acquisition of that record before it was sent (kshare_sidecar/client/acks.py, fetcher.py), is
reported failed by the next commit — not left out of its results, which callers read as accepted.

Seen in the nemesis: a consumer whose commit waited ~27 s on an unreachable sidecar acknowledged
records buffered meanwhile; their locks had run out and the same member acquired them again with
delivery count 2; the queued ACCEPT was dropped unsent and its partition had no result, so the
application took the record as accepted twice."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from kshare_sidecar.client.errors import AcknowledgementError
from kshare_sidecar.client.fetcher import FetchConfig, ShareConsumeRequestManager
from kshare_sidecar.client.records import ShareRecord
from kshare_sidecar.client.acks import AcknowledgeType
from aiokafka.structs import TopicPartition

TID = uuid.uuid4()


def _part(first: int, last: int, count: int):
    return SimpleNamespace(acquired_records=[SimpleNamespace(first_offset=first, last_offset=last,
                                                             delivery_count=count)], records=b"x")


def _manager() -> ShareConsumeRequestManager:
    """The consumer's request manager alone, its records made from the acquired ranges."""
    config = FetchConfig(max_poll_records=100, min_bytes=1, max_bytes=1 << 20, acquire_mode=1, timeout_s=30,
                         backoff_s=0.1, check_crcs=False, key_deserializer=None, value_deserializer=None)
    mgr = ShareConsumeRequestManager("g", membership=None, cluster=SimpleNamespace(names={TID: "t"}, ids={}),  # type: ignore[arg-type]
                                     config=config)
    def records(topic, p, data, ranges):
        out = [ShareRecord(topic, p, o, 0, 0, None, None, [], c) for f, last, c in ranges for o in range(f, last + 1)]
        return out, [r.offset for r in out]

    mgr._records = records  # type: ignore[method-assign]
    return mgr


def test_a_superseded_ack_is_reported_failed_by_the_next_commit():
    mgr = _manager()
    mgr._take_records(1, (TID, 0), _part(0, 1, 1))
    mgr.inflight[(TID, 0)].acknowledge(0, AcknowledgeType.ACCEPT)
    assert mgr.results == {}
    mgr._take_records(1, (TID, 0), _part(0, 0, 2))  # offset 0 came back before its ack was sent
    error = mgr.results[TopicPartition("t", 0)]
    assert isinstance(error, AcknowledgementError) and error.code == ErrorCode.invalid_record_state
    assert mgr.inflight[(TID, 0)].pending == {} and mgr.inflight[(TID, 0)].superseded == 0


def test_acknowledging_a_record_whose_session_ended_fails_at_commit_instead_of_raising():
    """Seen in the nemesis (a backend broker isolated): the application was working on records
    when their partition's leader moved; the next fetch, from the new leader, replaced the books,
    and acknowledging a record it had been handed raised AckStateError and killed the consumer.
    As Kafka's clients: the acknowledgement is taken and fails at the next commit."""
    mgr = _manager()
    mgr._take_records(1, (TID, 0), _part(0, 4, 1))
    assert sorted(r.offset for rs in mgr.drain(100).values() for r in rs) == [0, 1, 2, 3, 4]
    mgr._take_records(2, (TID, 0), _part(5, 6, 1))  # the partition moved to node 2 meanwhile
    assert mgr.released_ack((TID, 0), 3) and not mgr.released_ack((TID, 0), 9)  # 9: never handed out
    error = mgr.results[TopicPartition("t", 0)]
    assert isinstance(error, AcknowledgementError) and error.code == ErrorCode.not_leader_or_follower
    assert 3 not in mgr.inflight[(TID, 0)].acquired  # nothing sent for it to the new leader
    assert sorted(r.offset for rs in mgr.drain(100).values() for r in rs) == [5, 6]
    mgr._take_records(1, (TID, 0), _part(7, 7, 1))  # ... and back to node 1 before the batch was done
    assert mgr.released_ack((TID, 0), 3) and mgr.released_ack((TID, 0), 6)


def test_an_ack_of_a_copy_whose_lock_ran_out_does_not_settle_the_newer_copy():
    """Seen in the nemesis (a backend broker isolated): records the application was handed after
    their locks had run out came back to the same consumer, count 2, while it worked on them; its
    ACCEPT of the old copy was applied to the new acquisition, and acknowledging the new copy then
    raised AckStateError. The old copy's ack fails at the next commit; the new copy is acknowledged
    normally, and copies of the old acquisition still buffered are not handed out at all."""
    mgr = _manager()
    mgr._take_records(1, (TID, 0), _part(0, 4, 1))
    old = {r.offset: r for rs in mgr.drain(3).values() for r in rs}  # 0..2 handed out, 3..4 still buffered
    mgr._take_records(1, (TID, 0), _part(0, 4, 2))  # the locks ran out: all five again, count 2
    tp = (TID, 0)
    inf = mgr.inflight[tp]
    assert mgr.stale_ack(tp, inf, 1, old[1].delivery_count)  # the application acknowledges its old copy
    error = mgr.results.pop(TopicPartition("t", 0))
    assert isinstance(error, AcknowledgementError) and error.code == ErrorCode.invalid_record_state
    assert inf.pending == {}
    new = [r for rs in mgr.drain(100).values() for r in rs]
    assert [(r.offset, r.delivery_count) for r in new] == [(o, 2) for o in range(5)]  # no old 3, 4 twice
    assert not mgr.stale_ack(tp, inf, 1, new[1].delivery_count)
    inf.acknowledge(1, AcknowledgeType.ACCEPT)
    assert inf.pending == {1: AcknowledgeType.ACCEPT}
