"""Share-session epochs and the member state machine of the asyncio client (no sockets)."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.client.membership import Membership, Outcome
from kshare_sidecar.client.session import MAX_EPOCH, ShareSession, next_epoch

A, B, C = (uuid.uuid4(), 0), (uuid.uuid4(), 0), (uuid.uuid4(), 1)


def test_epoch_zero_opens_with_every_partition_and_then_counts_up():
    s = ShareSession()
    plan = s.fetch_plan({A, B})
    assert (plan.epoch, plan.listed, plan.forgotten) == (0, {A, B}, set())
    s.fetched(plan, ErrorCode.none)
    assert s.epoch == 1 and s.open
    plan = s.fetch_plan({A, B})
    assert (plan.epoch, plan.listed, plan.forgotten) == (1, set(), set())
    s.fetched(plan, ErrorCode.none)
    assert s.epoch == 2


def test_later_fetches_list_added_and_acking_partitions_and_forget_removed_ones():
    s = ShareSession()
    s.fetched(s.fetch_plan({A, B}), ErrorCode.none)
    plan = s.fetch_plan({B, C}, acking={B})
    assert plan.listed == {B, C} and plan.forgotten == {A}
    s.fetched(plan, ErrorCode.none)
    assert s.partitions == {B, C}


def test_acks_cannot_open_a_session_nor_be_piggybacked_for_unfetched_partitions():
    s = ShareSession()
    with pytest.raises(ValueError):
        s.fetch_plan({A}, acking={A})
    with pytest.raises(ValueError):
        s.ack_epoch()
    s.fetched(s.fetch_plan({A}), ErrorCode.none)
    with pytest.raises(ValueError):
        s.fetch_plan({A}, acking={B})


def test_epoch_wraps_to_one():
    assert next_epoch(0) == 1 and next_epoch(MAX_EPOCH) == 1 and next_epoch(7) == 8
    s = ShareSession()
    s.epoch = MAX_EPOCH
    s.acknowledged(ErrorCode.none)
    assert s.epoch == 1


@pytest.mark.parametrize("code", [ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch,
                                  ErrorCode.share_session_limit_reached])
def test_session_errors_reset_to_zero(code):
    s = ShareSession()
    s.fetched(s.fetch_plan({A}), ErrorCode.none)
    s.fetched(s.fetch_plan({A}), code)
    assert s.epoch == 0 and not s.partitions
    s.fetched(s.fetch_plan({A}), ErrorCode.none)
    s.acknowledged(code)
    assert s.epoch == 0


def test_other_errors_still_advance_the_epoch():
    s = ShareSession()
    s.fetched(s.fetch_plan({A}), ErrorCode.none)
    s.fetched(s.fetch_plan({A}), ErrorCode.group_authorization_failed)
    assert s.epoch == 2
    s.acknowledged(ErrorCode.invalid_request)
    assert s.epoch == 3


def test_transport_failure_reset():
    s = ShareSession()
    s.fetched(s.fetch_plan({A}), ErrorCode.none)
    s.generation = 4
    s.reset()
    assert s.epoch == 0 and s.generation == -1 and s.fetch_plan({A}).listed == {A}


def _ok(m: Membership, epoch: int, assignment=None, interval=1000):
    sent = m.request()
    return sent, m.on_response(sent, ErrorCode.none, None, epoch, interval, assignment)


def test_join_sends_the_subscription_then_only_when_it_changes():
    m = Membership()
    m.subscribe(["b", "a", "a"])
    sent, outcome = _ok(m, 3, {A[0]: frozenset({0})}, interval=2500)
    assert sent.member_epoch == 0 and sent.subscribed_topic_names == ("a", "b")
    assert outcome is Outcome.OK and m.epoch == 3 and m.interval_ms == 2500 and m.assignment == {A[0]: {0}}
    sent, _ = _ok(m, 3)
    assert sent.member_epoch == 3 and sent.subscribed_topic_names is None
    assert m.assignment == {A[0]: {0}}  # a heartbeat without an assignment keeps it
    m.subscribe(["a"])
    assert m.request().subscribed_topic_names == ("a",)
    assert len(m.member_id) == 36 and uuid.UUID(m.member_id)


@pytest.mark.parametrize("code", [ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch])
def test_fenced_member_rejoins_with_epoch_zero_and_the_same_id(code):
    m = Membership()
    m.subscribe(["a"])
    _ok(m, 5, {A[0]: frozenset({0})})
    member = m.member_id
    sent = m.request()
    assert m.on_response(sent, code, None, -1, 0, None) is Outcome.REJOIN
    again = m.request()
    assert (again.member_id, again.member_epoch, again.subscribed_topic_names) == (member, 0, ("a",))
    assert m.assignment == {}


def test_coordinator_errors_and_fatal_errors():
    m = Membership()
    m.subscribe(["a"])
    for code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                 ErrorCode.coordinator_load_in_progress):
        assert m.on_response(m.request(), code, None, -1, 0, None) is Outcome.COORDINATOR
    assert m.epoch == 0
    assert m.on_response(m.request(), ErrorCode.group_authorization_failed, "no", -1, 0, None) is Outcome.FATAL
    assert m.error == (ErrorCode.group_authorization_failed, "no")


def test_leave_uses_epoch_minus_one():
    m = Membership("fixed")
    assert m.leave_request().member_epoch == -1 and m.leave_request().member_id == "fixed"


async def test_metadata_requests_rotate_over_the_known_brokers():
    """A broker that answers but knows less (a sidecar cut off from its backend names no leader
    for its partitions) must not be the only one ever asked."""
    from kshare_sidecar.client.cluster import Cluster

    cluster = Cluster([("boot", 1)], "c", 5.0, None)
    for n in (1, 2, 3):
        cluster.learn_node(n, f"h{n}", 9000 + n)
    asked = []

    class Conn:
        def __init__(self, node):
            self.node, self.host, self.port = node, "h", 1

        async def call(self, request):
            asked.append(self.node)
            return "answer"

    cluster.conn = Conn  # type: ignore[method-assign]
    for _ in range(3):
        assert await cluster.any_call(object()) == "answer"
    assert sorted(asked) == [1, 2, 3]
