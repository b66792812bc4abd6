"""The ``kshare://`` Faust transport: stateless ``@app.agent`` streams consume a share group.

Why it looks like this. Faust's consumer model is Kafka's: partitions assigned by a rebalance,
offsets committed in order, positions and seeks. A share group has none of that — the broker
hands out records, the member ACCEPTs, RELEASEs or REJECTs each one. The driver keeps Faust's
machinery running and swaps what it means:

- **Assignment**: Faust routes a message only for a partition it believes assigned (the
  Conductor's index), so the driver presents *every partition of the subscribed topics* as
  assigned, in one synthetic rebalance with a fixed generation (a generation change would make
  Faust skip queued events). Which records this member really gets is the broker's business.
- **Acks**: Faust's final ack of a message (``Sensor.on_message_out``, reported by both its
  Python and Cython stream iterators) becomes a share acknowledgement, through
  :func:`~.acking.decide`: ACCEPT when an agent processed the event, RELEASE when the agent raised
  on it (its ``on_error`` hook, wrapped by the driver, sees the current event) or when Faust
  skipped it unseen; REJECT instead of RELEASE from the ``reject_after``-th delivery if set.
  Acks ride on the next ShareFetch or go by ShareAcknowledge at Faust's commit interval.
- **Offsets**: Faust's read-offset guard drops a record below the last offset read from its
  partition; share groups redeliver lower offsets, so the guard is disabled. Nothing is committed.

Built on :class:`kshare_sidecar.client.ShareConsumer` (explicit acknowledgement mode), on the app's
own event loop (no consumer thread). The producer side is Faust's aiokafka producer, pointed at the
same URL (the sidecar passes Produce through) or at ``broker_producer``. See docs/faust.md.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from faust.exceptions import ImproperlyConfigured
from faust.sensors import Sensor
from faust.streams import current_event
from faust.transport.consumer import Consumer as _FaustConsumer
from faust.transport.drivers import aiokafka as _aiokafka
from faust.types import TP, ConsumerMessage
from faust.types.tuples import ack_lock
from mode import Service, get_logger

from kshare_sidecar.client import AcknowledgeType, ConsumerStoppedError, ShareConsumer, ShareConsumerError
from kshare_sidecar.client.cluster import TRANSPORT_ERRORS

from .acking import EventOutcome, decide, parse_options

logger = get_logger("kshare.faust")

#: the one consumer generation the driver reports to Faust (it never changes: see the module doc)
GENERATION = 1


class ShareMessage(ConsumerMessage):
    """A Faust message for a share-group record. ``delivery_count`` is 1 on first delivery
    (``faust.current_event().message.delivery_count`` inside an agent)."""

    def __init__(self, *args: Any, record: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.share_record = record
        self.delivery_count: int = record.delivery_count if record is not None else 1
        self.outcome = EventOutcome(self.delivery_count)
        self.settled = False


class _NoReadOffsets(dict):
    """Faust drops a fetched record whose offset is below the last one read from its partition
    (a Kafka consumer never goes back). Share groups redeliver lower offsets all the time."""

    def __getitem__(self, key: Any) -> None:
        return None

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def update(self, *args: Any, **kwargs: Any) -> None:
        pass


class OutcomeSensor(Sensor):
    """Learns from Faust's sensor calls whether an event entered a stream and when it is done."""

    def __init__(self, consumer: Consumer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.consumer = consumer

    def on_stream_event_in(self, tp: TP, offset: int, stream: Any, event: Any) -> None:
        message = event.message
        if isinstance(message, ShareMessage):
            message.outcome.entered = True

    def on_message_out(self, tp: TP, offset: int, message: Any) -> None:
        if isinstance(message, ShareMessage):
            self.consumer.settle(message)


class Consumer(_FaustConsumer):
    """Faust consumer over :class:`ShareConsumer`. Created by Faust through :class:`Transport`."""

    logger = logger
    consumer_stopped_errors = (ConsumerStoppedError,)
    transport: Transport  # always the kshare Transport below (its default_port and options)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_offset = _NoReadOffsets()
        options = dict(getattr(self.transport, "options", {}))
        self.reject_after = int(options.pop("reject_after", 0))
        #: records handed to Faust and not yet acknowledged, at most (see _getmany)
        self.max_in_flight = int(options.pop("max_in_flight", 0)) or (self.app.conf.broker_max_poll_records or 500)
        self._in_flight = 0
        self._room = asyncio.Event()
        self._share_options = options
        self._share: ShareConsumer | None = None
        self._topics: set[str] = set()
        self._assignment: set[TP] = set()
        self._rebalanced = False
        self._subscription_changed = asyncio.Event()
        #: records the last _getmany returned that Faust has not turned into messages yet
        self._batch: dict[tuple[TP, int], Any] = {}
        #: such records kept for the next _getmany (their partition was paused, not revoked)
        self._held: list[tuple[TP, Any]] = []
        self.sensor = OutcomeSensor(self)
        #: acknowledgements sent, by type name (ACCEPT / RELEASE / REJECT)
        self.stats: collections.Counter[str] = collections.Counter()

    # -- lifecycle -------------------------------------------------------------------------------
    async def on_start(self) -> None:
        self._check_no_tables()
        conf = self.app.conf
        self._share = ShareConsumer(
            *sorted(self._topics),
            bootstrap_servers=_aiokafka.server_list(self.transport.url, self.transport.default_port),
            group_id=conf.id, client_id=conf.broker_client_id, acknowledgement_mode="explicit",
            max_poll_records=conf.broker_max_poll_records or 500,
            request_timeout_ms=int(conf.broker_request_timeout * 1000), check_crcs=conf.broker_check_crcs,
            **self._share_options)
        await self._share.start()
        self.app.sensors.add(self.sensor)
        self._hook_agents()

    async def on_stop(self) -> None:
        await super().on_stop()  # waits for started events (stream_wait_empty), then commit()
        share, self._share = self._share, None
        if share is not None:
            # what Faust never processed is released by close() (the final ShareAcknowledge)
            await share.close()
        self._batch.clear()
        self._held.clear()
        try:
            self.app.sensors.remove(self.sensor)
        except KeyError:
            pass

    def close(self) -> None:
        """Faust calls this on rebalance-while-stopping; ``on_stop`` closes the share consumer."""

    # -- subscription and the synthetic assignment -------------------------------------------------
    async def subscribe(self, topics: Iterable[str]) -> None:
        self._check_no_tables()
        self._hook_agents()
        self._topics = set(topics)
        if self._share is not None:
            self._share.subscribe(sorted(self._topics))
        self._subscription_changed.set()

    @Service.task
    async def _rebalancer(self) -> None:
        """Turns subscription changes into Faust's assignment (in its own task: Faust's
        on_partitions_assigned waits for ``subscribe`` to have returned)."""
        while not self.should_stop:
            try:
                await asyncio.wait_for(self._subscription_changed.wait(), 1.0)
            except TimeoutError:
                continue
            self._subscription_changed.clear()
            if not await self._apply_subscription():
                await self.sleep(1.0)
                self._subscription_changed.set()  # a topic without metadata yet: try again

    async def _apply_subscription(self) -> bool:
        share = self._share
        if share is None or not self._topics:
            return not self._topics
        try:
            await share.refresh_metadata()
        except (*TRANSPORT_ERRORS, ShareConsumerError) as exc:
            logger.warning("kshare: metadata refresh failed: %s", exc)
            return False
        known = {t: share.partitions_for_topic(t) for t in self._topics}
        missing = sorted(t for t, parts in known.items() if not parts)
        if missing:
            logger.info("kshare: waiting for topic(s) %s to exist", ", ".join(missing))
        assigned = {TP(t, p) for t, parts in known.items() for p in (parts or ())}
        if not self._rebalanced:
            if not assigned:
                return False
            self._rebalanced = True
            self._assignment = assigned
            self.app.on_rebalance_start()
            await self.on_partitions_revoked(set())
            self.app.consumer_generation_id = GENERATION
            await self.on_partitions_assigned(assigned, generation_id=GENERATION)
        elif assigned != self._assignment:
            added, removed = assigned - self._assignment, self._assignment - assigned
            self._assignment = assigned
            active = self._get_active_partitions()
            active.update(added - self._paused_partitions)
            active.difference_update(removed)
            await self.app.topics.on_partitions_assigned(assigned)  # the Conductor's routing index
        return not missing

    def assignment(self) -> set[TP]:
        return set(self._assignment)

    # -- fetching --------------------------------------------------------------------------------
    async def _getmany(self, active_partitions: set[TP] | None, timeout: float) -> Mapping[TP, list]:
        share = self._share
        if share is None:
            await asyncio.sleep(timeout)
            return {}
        allowed = set(active_partitions or ()) | self._buffered_partitions
        self._take_leftovers(allowed)
        out: dict[TP, list] = {}
        if not self._held and self._in_flight >= self.max_in_flight:
            # Faust would buffer thousands of records per partition (stream_buffer_maxsize); every
            # one is acquired, its lock ticking, and denied to the other workers. Fetch again only
            # when what Faust holds has been processed.
            self._room.clear()
            try:
                await asyncio.wait_for(self._room.wait(), timeout)
            except TimeoutError:
                return {}
        if self._held:
            for tp, record in self._held:
                out.setdefault(tp, []).append(record)
            self._held = []
        else:
            for ktp, records in (await share.getmany(timeout_ms=int(timeout * 1000))).items():
                tp = TP(ktp.topic, ktp.partition)
                out[tp] = records
                if tp not in self._assignment and tp.topic in self._topics:
                    self._subscription_changed.set()  # new partitions: widen the assignment
        for tp, records in out.items():
            for record in records:
                self._batch[(tp, record.offset)] = record
        return out

    def _take_leftovers(self, allowed: set[TP]) -> None:
        """Records of the previous batch Faust did not take (flow stopped, partition paused or
        not routed): keep those it may take later, release the rest for another consumer."""
        for (tp, _), record in self._batch.items():
            if tp in allowed:
                self._held.append((tp, record))
            else:
                self._acknowledge(record, AcknowledgeType.RELEASE)
        self._batch.clear()

    def _to_message(self, tp: TP, record: Any) -> ConsumerMessage:
        self._batch.pop((tp, record.offset), None)
        key, value = record.key, record.value
        message = ShareMessage(
            record.topic, record.partition, record.offset,
            record.timestamp / 1000.0 if record.timestamp is not None else None, record.timestamp_type,
            record.headers, key, value, None,
            len(key) if isinstance(key, bytes | bytearray) else 0,
            len(value) if isinstance(value, bytes | bytearray) else 0,
            tp, generation_id=self.app.consumer_generation_id, record=record)
        if not self.app.topics.acks_enabled_for(record.topic):
            # an acks=False topic: Faust never acks its messages, so they are accepted as delivered
            message.settled = True
            self._acknowledge(record, AcknowledgeType.ACCEPT)
        else:
            self._in_flight += 1
        return message

    # -- acknowledging ---------------------------------------------------------------------------
    def settle(self, message: ShareMessage) -> None:
        """Faust is done with ``message`` (or its agent raised): acknowledge its record once."""
        if message.settled:
            return
        message.settled = True
        self._in_flight -= 1
        if self._in_flight < self.max_in_flight:
            self._room.set()
        self._acknowledge(message.share_record, decide(message.outcome, self.reject_after))
        # Faust's offset bookkeeping means nothing here; forget the offset so that a redelivery
        # of the same offset is acked again (Faust's ack skips offsets already in the index)
        tp, offset = message.tp, message.offset
        index = self._acked_index.get(tp)
        if index is not None:
            index.discard(offset)
        acked = self._acked.get(tp)
        if acked and offset in acked:
            acked.remove(offset)
        self._unacked_messages.discard(message)

    def on_agent_error(self, exc: BaseException) -> None:
        """An agent raised: release the event it was processing (``current_event()`` is still set
        in the crashed actor's task). Settled at once: the crashed actor's stream iterator is
        abandoned, and Faust would ack the event only when that is finalised."""
        event = current_event()
        message = getattr(event, "message", None)
        if isinstance(message, ShareMessage) and not message.settled:
            message.outcome.failed = True
            with ack_lock:
                message.acked = True  # later acks of this message (other streams, finalisers) do nothing
            self.settle(message)

    def _acknowledge(self, record: Any, ack_type: AcknowledgeType) -> None:
        if self._share is None:
            return  # closed: the final ShareAcknowledge released it
        try:
            self._share.acknowledge(record, ack_type)
        except ShareConsumerError as exc:
            # e.g. the share session ended and the broker released the record already
            logger.info("kshare: %s of %s-%s@%s not sent: %s", ack_type.name, record.topic,
                        record.partition, record.offset, exc)
            return
        self.stats[ack_type.name] += 1

    def _hook_agents(self) -> None:
        for agent in list(self.app.agents.values()):
            if getattr(agent, "_kshare_hooked", False):
                continue
            original = agent._on_error

            async def on_error(agent_: Any, exc: BaseException, _original: Any = original) -> None:
                self.on_agent_error(exc)
                if _original is not None:
                    await _original(agent_, exc)
                _nudge_supervisor(agent_)

            agent._on_error = on_error
            agent._kshare_hooked = True

    async def commit(self, topics: Any = None, start_new_transaction: bool = True) -> bool:
        """Send the queued acknowledgements now (Faust calls this at its commit interval)."""
        share = self._share
        if share is None:
            return False
        try:
            results = await share.commit()
        except ConsumerStoppedError:
            return False
        for tp, error in results.items():
            if error is not None:
                logger.warning("kshare: acknowledgement for %s failed: %s", tp, error)
        return True

    async def force_commit(self, topics: Any = None, start_new_transaction: bool = True) -> bool:
        return await self.commit(topics)

    async def _commit(self, offsets: Mapping[TP, int]) -> bool:
        return True  # share groups have no offsets to commit

    # -- what share groups do not have -----------------------------------------------------------
    def _check_no_tables(self) -> None:
        if len(self.app.tables):
            raise ImproperlyConfigured(
                "the kshare transport serves stateless agents only: tables (changelogs, "
                "partition-local state) need Kafka consumer-group assignment; use a kafka:// "
                "consumer for apps with tables")

    async def seek_to_committed(self) -> Mapping[TP, int]:
        return {}

    async def _seek(self, partition: TP, offset: int) -> None:
        logger.warning("kshare: share groups have no positions; seek(%s, %s) ignored", partition, offset)

    async def seek_wait(self, partitions: Mapping[TP, int]) -> None:
        return None

    async def position(self, tp: TP) -> int | None:
        return None

    def _new_topicpartition(self, topic: str, partition: int) -> TP:
        return TP(topic, partition)

    def highwater(self, tp: TP) -> int:
        return -1  # unknown: a share consumer does not track the log end

    async def highwaters(self, *partitions: TP) -> Mapping[TP, int]:
        return {tp: -1 for tp in partitions}

    async def earliest_offsets(self, *partitions: TP) -> Mapping[TP, int]:
        return {tp: -1 for tp in partitions}

    def topic_partitions(self, topic: str) -> int | None:
        parts = self._share.partitions_for_topic(topic) if self._share is not None else None
        return len(parts) if parts else None

    def key_partition(self, topic: str, key: bytes | None, partition: int | None = None) -> int | None:
        return partition

    async def create_topic(self, topic: str, partitions: int, replication: int, **kwargs: Any) -> None:
        await self.app.producer.create_topic(topic, partitions, replication, **kwargs)


@contextlib.contextmanager
def release_on_error() -> Any:
    """RELEASE the current event if the block raises, *without* crashing the agent::

        async for order in stream:
            with release_on_error():
                await process(order)

    Why: an exception leaving the agent crashes its actor and Faust's supervisor restarts it —
    at most 100 restarts a second (mode's limit, fixed by Faust), beyond which the worker gives
    up. Where failures can come in bursts, catch them here: the exception is logged, the event is
    marked failed and is RELEASEd (or REJECTed, ``reject_after``) when the stream moves on.
    Outside a share-group event the exception propagates unchanged."""
    try:
        yield
    except Exception as exc:
        message = getattr(current_event(), "message", None)
        if not isinstance(message, ShareMessage) or message.settled:
            raise
        message.outcome.failed = True
        logger.warning("kshare: %s-%s@%s (delivery %s) failed, released: %r", message.topic, message.partition,
                       message.offset, message.delivery_count, exc)


def _nudge_supervisor(agent: Any) -> None:
    """Wake the agent's supervisor again shortly after a crash. mode's supervisor loses a wakeup
    that arrives while it is restarting another actor and then restarts only at its 5 s poll;
    an agent raising on records in quick succession (what redelivery tests and poison records do)
    would stall 5 s each time, long enough for acquisition locks to expire."""
    supervisor = getattr(agent, "supervisor", None)
    if supervisor is None:
        return
    loop = asyncio.get_running_loop()
    for delay in (0.05, 0.25, 1.0):
        loop.call_later(delay, supervisor.wakeup)


class Transport(_aiokafka.Transport):
    """``kshare://host:port[?reject_after=N&max_share_version=1|2&share_acquire_mode=...]``.

    The consumer joins the share group named by the app id; the producer is Faust's aiokafka
    producer on the same URL (kshare passes Produce and CreateTopics through to the backend)."""

    Consumer = Consumer
    default_port = 9192
    driver_version = "kshare"

    def __init__(self, url: list, app: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(url, app, loop=loop)
        self.options = parse_options(dict(url[0].query)) if url else {}
