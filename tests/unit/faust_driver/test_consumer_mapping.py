"""The Faust driver's consumer against Faust's own message/event objects and a fake
ShareConsumer: which acknowledgement each outcome sends. No broker, no worker."""

from __future__ import annotations

import weakref

import pytest

faust = pytest.importorskip("faust", reason="faust-streaming is not installed")

from aiokafka.structs import TopicPartition
from faust.events import Event
from faust.streams import _current_event, current_event
from faust.types import TP

from kshare_sidecar.client import AcknowledgeType, AckStateError, ShareRecord
from kshare_sidecar.faust import Consumer, ShareMessage, Transport, release_on_error

TOPIC = "orders"


class FakeShare:
    """Records what the driver acknowledges; hands out scripted getmany batches."""

    def __init__(self, batches=()):
        self.acks: list[tuple[int, AcknowledgeType]] = []
        self.batches = list(batches)
        self.held: set[int] = set()

    def acknowledge(self, record, ack_type):
        if record.offset not in self.held:
            raise AckStateError("not acquired")
        self.held.discard(record.offset)
        self.acks.append((record.offset, ack_type))

    async def getmany(self, timeout_ms=0, max_records=None):
        if not self.batches:
            return {}
        batch = self.batches.pop(0)
        out = {}
        for r in batch:
            self.held.add(r.offset)
            out.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
        return out

    def partitions_for_topic(self, topic):
        return {0, 1}


def rec(offset: int, count: int = 1, partition: int = 0) -> ShareRecord:
    return ShareRecord(topic=TOPIC, partition=partition, offset=offset, timestamp=1_700_000_000_123,
                       timestamp_type=0, key=b"k", value=b"v%d" % offset, headers=[("h", b"1")],
                       delivery_count=count)


@pytest.fixture
def app():
    app = faust.App("unit-app", broker="kshare://127.0.0.1:9?reject_after=3")
    app.topics._acking_topics.add(TOPIC)
    return app


@pytest.fixture
def consumer(app) -> Consumer:
    c = app.consumer
    assert isinstance(c, Consumer) and isinstance(app.transport, Transport)
    c._share = FakeShare()
    return c


def deliver(consumer: Consumer, offset: int, count: int = 1, partition: int = 0) -> ShareMessage:
    record = rec(offset, count, partition)
    consumer._share.held.add(offset)
    message = consumer._to_message(TP(TOPIC, partition), record)
    message.incref()  # one stream subscribed (the Conductor does this)
    return message


def event_for(app, message) -> Event:
    return Event(app, message.key, message.value, message.headers, message)


def stream_done(consumer: Consumer, app, message) -> None:
    """What Faust's stream iterator does for an event an agent took and finished with."""
    event = event_for(app, message)
    consumer.sensor.on_stream_event_in(message.tp, message.offset, None, event)
    if event.ack():  # Message.ack -> Consumer.ack (Faust's own bookkeeping)
        app.sensors.on_message_out(message.tp, message.offset, message)


def test_url_options_reach_the_consumer(consumer):
    assert consumer.reject_after == 3
    assert consumer.app.transport.default_port == 9192


def test_message_carries_the_record(consumer):
    m = deliver(consumer, 7, count=2)
    assert (m.topic, m.partition, m.offset, m.delivery_count) == (TOPIC, 0, 7, 2)
    assert m.timestamp == pytest.approx(1_700_000_000.123)
    assert m.headers == [("h", b"1")] and m.value == b"v7"


def test_processed_event_is_accepted(consumer, app):
    app.sensors.add(consumer.sensor)
    m = deliver(consumer, 1)
    stream_done(consumer, app, m)
    assert consumer._share.acks == [(1, AcknowledgeType.ACCEPT)]
    assert consumer.stats["ACCEPT"] == 1


def test_agent_raising_releases_the_current_event(consumer, app):
    app.sensors.add(consumer.sensor)
    m = deliver(consumer, 2)
    event = event_for(app, m)
    consumer.sensor.on_stream_event_in(m.tp, m.offset, None, event)
    token = _current_event.set(weakref.ref(event))
    try:
        assert current_event() is event
        consumer.on_agent_error(RuntimeError("boom"))
    finally:
        _current_event.reset(token)
    assert consumer._share.acks == [(2, AcknowledgeType.RELEASE)]
    # the crashed iterator's late ack (when it is finalised) sends nothing more
    if event.ack():
        app.sensors.on_message_out(m.tp, m.offset, m)
    assert consumer._share.acks == [(2, AcknowledgeType.RELEASE)]


def test_reject_after_the_limit(consumer, app):
    m = deliver(consumer, 3, count=3)  # reject_after=3 in the URL
    token = _current_event.set(weakref.ref(event := event_for(app, m)))
    try:
        consumer.on_agent_error(RuntimeError("poison"))
    finally:
        _current_event.reset(token)
    assert event.message is m
    assert consumer._share.acks == [(3, AcknowledgeType.REJECT)]


def test_error_outside_an_event_acknowledges_nothing(consumer):
    consumer.on_agent_error(RuntimeError("at start-up"))
    assert consumer._share.acks == []


def test_skipped_unseen_event_is_released(consumer, app):
    app.sensors.add(consumer.sensor)
    m = deliver(consumer, 4)
    if event_for(app, m).ack():  # acked without entering a stream (flow control suspended)
        app.sensors.on_message_out(m.tp, m.offset, m)
    assert consumer._share.acks == [(4, AcknowledgeType.RELEASE)]


def test_redelivered_offset_is_acknowledged_again(consumer, app):
    """Faust's ack skips an offset already in its index; share groups redeliver offsets."""
    app.sensors.add(consumer.sensor)
    stream_done(consumer, app, deliver(consumer, 5))
    stream_done(consumer, app, deliver(consumer, 5, count=2))
    assert consumer._share.acks == [(5, AcknowledgeType.ACCEPT), (5, AcknowledgeType.ACCEPT)]
    assert not consumer._acked_index.get(TP(TOPIC, 0)) and not consumer._acked.get(TP(TOPIC, 0))
    assert not consumer.unacked


def test_lower_offsets_are_not_dropped_as_already_read(consumer):
    consumer._read_offset[TP(TOPIC, 0)] = 100
    assert consumer._read_offset[TP(TOPIC, 0)] is None  # _drain_messages' guard never fires


def test_acks_disabled_topic_accepts_on_delivery(consumer):
    """An ``acks=False`` topic: Faust never acks its messages, so delivery is the acknowledgement."""
    record = rec(6)._replace(topic="noacks")
    consumer._share.held.add(6)
    message = consumer._to_message(TP("noacks", 0), record)
    assert consumer._share.acks == [(6, AcknowledgeType.ACCEPT)] and message.settled


async def test_leftovers_are_held_or_released(consumer):
    share = consumer._share
    share.batches = [[rec(10), rec(11, partition=1)]]
    tp0, tp1 = TP(TOPIC, 0), TP(TOPIC, 1)
    first = await consumer._getmany({tp0, tp1}, 0.01)
    assert {tp: [r.offset for r in rs] for tp, rs in first.items()} == {tp0: [10], tp1: [11]}
    # Faust took neither (flow stopped); tp0 is still active, tp1 is not: 11 goes back, 10 waits
    again = await consumer._getmany({tp0}, 0.01)
    assert share.acks == [(11, AcknowledgeType.RELEASE)]
    assert {tp: [r.offset for r in rs] for tp, rs in again.items()} == {tp0: [10]}


async def test_commit_sends_pending_acks(consumer):
    calls = []

    async def commit():
        calls.append(1)
        return {TopicPartition(TOPIC, 0): None}

    consumer._share.commit = commit
    assert await consumer.commit() is True
    assert calls == [1]


def test_tables_are_refused(app, consumer):
    app.Table("counts", default=int)
    with pytest.raises(faust.exceptions.ImproperlyConfigured, match="stateless agents only"):
        consumer._check_no_tables()


def test_release_on_error_marks_the_event_without_raising(consumer, app):
    app.sensors.add(consumer.sensor)
    m = deliver(consumer, 8)
    event = event_for(app, m)
    consumer.sensor.on_stream_event_in(m.tp, m.offset, None, event)
    token = _current_event.set(weakref.ref(event))
    try:
        with release_on_error():
            raise ValueError("handled: the agent keeps running")
    finally:
        _current_event.reset(token)
    assert consumer._share.acks == []  # sent when the stream moves on
    if event.ack():
        app.sensors.on_message_out(m.tp, m.offset, m)
    assert consumer._share.acks == [(8, AcknowledgeType.RELEASE)]


def test_release_on_error_outside_a_share_event_propagates():
    with pytest.raises(KeyError), release_on_error():
        raise KeyError("no event")


async def test_no_fetch_while_faust_holds_max_in_flight(consumer, app):
    """Records handed to Faust stay acquired: past max_in_flight the driver stops fetching (a
    worker must not hoard what the others could process before the locks expire)."""
    app.sensors.add(consumer.sensor)
    consumer.max_in_flight = 2
    share = consumer._share
    share.batches = [[rec(20), rec(21)], [rec(22)]]
    tp = TP(TOPIC, 0)
    first = await consumer._getmany({tp}, 0.01)
    messages = [consumer._to_message(tp, r) for r in first[tp]]
    for m in messages:
        m.incref()
    assert await consumer._getmany({tp}, 0.01) == {}  # 2 in flight: no fetch
    assert share.batches == [[rec(22)]]
    stream_done(consumer, app, messages[0])
    again = await consumer._getmany({tp}, 0.01)
    assert [r.offset for r in again[tp]] == [22]


async def test_later_subscription_change_widens_the_assignment_without_a_rebalance(consumer, app, monkeypatch):
    """After the one synthetic rebalance, new partitions are added to Faust's routing silently (a
    second rebalance would suspend flow and clear the agents' buffers)."""

    async def refresh():
        return None

    consumer._share.refresh_metadata = refresh
    routed = []

    async def on_partitions_assigned(assigned):
        routed.append(set(assigned))

    monkeypatch.setattr(app.topics, "on_partitions_assigned", on_partitions_assigned)
    monkeypatch.setattr(app, "on_rebalance_start", lambda: pytest.fail("no second rebalance"))
    consumer._rebalanced = True
    consumer._topics = {TOPIC}
    consumer._assignment = {TP(TOPIC, 0)}
    consumer._active_partitions = {TP(TOPIC, 0)}
    assert await consumer._apply_subscription() is True
    assert consumer.assignment() == {TP(TOPIC, 0), TP(TOPIC, 1)}  # FakeShare: partitions {0, 1}
    assert consumer._active_partitions == {TP(TOPIC, 0), TP(TOPIC, 1)}
    assert routed == [{TP(TOPIC, 0), TP(TOPIC, 1)}]
