"""Dead-letter writes as Kafka 4.4 makes them (KIP-1191; docs/extensions.md), on any backend.

A share-partition of a group with ``errors.deadletterqueue.topic.name`` holds every record that
was rejected or reached the delivery count limit (share/engine/extended.py): kshare's form of Kafka's
ARCHIVING state. This service drains those holds: it checks the topic as Kafka's
``ShareGroupDLQStateManager`` does (not ``__``-prefixed, the broker prefix, the topic exists or
may be created, the topic opted in with ``errors.deadletterqueue.group.enable=true``), produces
one dead-letter record per offset — key and value only with ``errors.deadletterqueue.copy.record.enable``
(else null), never the original headers, plus the six ``__dlq.errors.*`` headers — to partition
``source partition % DLQ partitions`` with an idempotent ``acks=all`` producer, and then archives
the records with an ordinary state write (the holder acknowledges them as REJECT).

What a failed write does follows Kafka: a topic that may not be written (missing, no opt-in, a
name outside the prefix) archives the records at once, unwritten; a backend error is retried
(1 s doubling, 5 attempts, as Kafka's DLQ manager) and then the records are archived, logged.
A write that can never succeed never holds records. ``deadletter.hold.until.written`` (kshare's
opt-in) keeps records held instead, retrying without end, while the topic is missing, lacks the
opt-in or the backend fails. Delivery to the topic is at least once (a crash between the write
and the archiving state write repeats it), as natively.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from ..backend.clients import BackendClients
from ..client.records import RecordDecodeError, decode_batches
from ..config.sections import GroupConfig
from ..metrics import STATS
from ..ratelog import RateLimitedLog
from .engine.holds import CAUSE_LIMIT, DEAD_LETTER
from .dead_letter_topics import GROUP_ENABLE, DeadLetterTopics, parse_bool
from .state_writes import PendingAcks

log = logging.getLogger("kshare.deadletter")
_failures = RateLimitedLog(log)

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
#: Kafka 4.4's cause messages (ShareGroupDLQManager), so tooling written for native DLQ records matches.
MESSAGE_REJECTED = "Offset rejected by client."
MESSAGE_LIMIT = "Offset delivery count exceeded the threshold."

#: What a failed write means (DeadLetterError.kind).
INVALID = "invalid"  # the group's topic name may never be written to: archive (both modes)
UNAVAILABLE = "unavailable"  # topic missing or not opted in: archive (native) or hold (hold mode)
TRANSIENT = "transient"  # a backend error worth retrying: a few attempts (native) or for ever (hold mode)
PERMANENT = "permanent"  # anything else (a bug, a record the topic refuses): a few attempts, then archive

#: Kafka's DLQ manager: 5 attempts, backoff 1 s doubling up to 30 s, 20 % jitter.
MAX_ATTEMPTS = 5
BACKOFF_MS, BACKOFF_MAX_MS, JITTER = 1000, 30000, 0.2

_READ_BYTES = 1024 * 1024


class DeadLetterError(Exception):
    """The dead-letter write failed; ``kind`` says whether it is worth retrying (see above)."""

    def __init__(self, message: str, kind: str = TRANSIENT) -> None:
        super().__init__(message)
        self.kind = kind


def dlq_headers(topic: str, partition: int, offset: int, group: str, delivery_count: int,
                cause: str) -> list[tuple[str, bytes]]:
    """The context headers, as Kafka 4.4 writes them (UTF-8 decimal text)."""
    return [(HEADER_TOPIC, topic.encode()), (HEADER_PARTITION, str(partition).encode()),
            (HEADER_OFFSET, str(offset).encode()), (HEADER_GROUP, group.encode()),
            (HEADER_DELIVERY_COUNT, str(delivery_count).encode()),
            (HEADER_MESSAGE, (MESSAGE_LIMIT if cause == CAUSE_LIMIT else MESSAGE_REJECTED).encode())]


def name_problem(group: str, name: str, prefix: str) -> str | None:
    """Kafka 4.4's checks of the configured name at write time (ShareGroupDLQStateManager)."""
    if not name:
        return f"Configured DLQ topic name in share group: {group} is empty."
    if name.startswith("__"):
        return f"Configured DLQ topic name in share group: {group} cannot start with __, topic: {name}."
    if prefix and not name.startswith(prefix):
        return (f"Configured DLQ topic name does not comply with the DLQ topic prefix in share group: {group}, "
                f"topic: {name}, prefix: {prefix}.")
    return None


def backoff_s(attempt: int) -> float:
    """Seconds before retry ``attempt`` (1-based), Kafka's exponential backoff with jitter."""
    ms = min(BACKOFF_MS * 2 ** (attempt - 1), BACKOFF_MAX_MS)
    return ms * random.uniform(1 - JITTER, 1 + JITTER) / 1000


class DeadLetterWriter:
    """Produces dead-letter records to the backend (one idempotent producer, started on first use)."""

    def __init__(self, backend, *, clients: BackendClients, auto_create: bool,
                 prefix: str, topics: DeadLetterTopics | None = None) -> None:
        self.backend = backend
        self.clients = clients
        self.auto_create = auto_create
        self.prefix = prefix
        self.topics = topics if topics is not None else DeadLetterTopics()
        self._producer: AIOKafkaProducer | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._lock = asyncio.Lock()

    async def _get_producer(self) -> AIOKafkaProducer:
        async with self._lock:
            if self._producer is None:
                producer = self.clients.producer(enable_idempotence=True, acks="all", linger_ms=5,
                                                 client_id="kshare-dead-letter")
                await producer.start()
                self._producer = producer
            return self._producer

    async def _get_admin(self) -> AIOKafkaAdminClient:
        async with self._lock:
            if self._admin is None:
                admin = self.clients.admin(client_id="kshare-dead-letter")
                await admin.start()
                self._admin = admin
            return self._admin

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        if self._admin is not None:
            await self._admin.close()
            self._admin = None

    async def opted_in(self, topic: str) -> bool:
        """``errors.deadletterqueue.group.enable`` of an existing topic: the backend's value where its
        topic configs hold the key (Kafka 4.4), else the one kshare keeps (share/dead_letter_topics.py)."""
        if self.topics.backend_holds_key is False:
            return self.topics.enabled(topic)
        admin = await self._get_admin()
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=None)])
        for response in responses:
            for resource in response.resources:
                error_code, error_message, _type, _name, entries = resource[:5]
                if error_code:
                    raise DeadLetterError(f"cannot read the configs of dead-letter topic {topic!r}: error "
                                          f"{error_code} {error_message or ''}")
                for entry in entries:
                    if entry[0] == GROUP_ENABLE:
                        self.topics.backend_holds_key = True
                        return parse_bool(entry[1]) is True
        self.topics.backend_holds_key = False
        return self.topics.enabled(topic)

    async def _default_partitions(self, admin: AIOKafkaAdminClient) -> int:
        """The backend's ``num.partitions`` (what Kafka's CreateTopics with -1 partitions uses)."""
        brokers = sorted(b.nodeId for b in admin._client.cluster.brokers())
        if brokers:
            responses = await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(brokers[0]),
                                                                     configs={"num.partitions": None})])
            for response in responses:
                for resource in response.resources:
                    for entry in resource[4]:
                        if entry[0] == "num.partitions" and str(entry[1]).isdigit():
                            return int(entry[1])
        return 1

    async def _create(self, topic: str) -> None:
        """Create a missing dead-letter topic as Kafka 4.4 does: the broker's default partitions and
        replication, CreateTime timestamps, and the opt-in (kept by kshare where the backend cannot)."""
        admin = await self._get_admin()
        configs = {"message.timestamp.type": "CreateTime"}
        if self.topics.backend_holds_key:
            configs[GROUP_ENABLE] = "true"
        await admin.create_topics([NewTopic(name=topic, num_partitions=await self._default_partitions(admin),
                                            replication_factor=-1, replica_assignments={}, topic_configs=configs)])
        if not self.topics.backend_holds_key:
            self.topics.record(topic, True)
        log.info("created dead-letter topic %r", topic)

    async def _partitions(self, group: str, topic: str, source: str) -> int:
        """Partitions of a dead-letter topic that may be written to; DeadLetterError otherwise.
        ``source``: the records' topic, which exists (asked whether the backend holds the opt-in)."""
        await self.backend.refresh([topic])
        info = self.backend.topic_by_name(topic)
        if info is None:
            if not self.auto_create:
                raise DeadLetterError(f"DLQ topic does not exist and auto create is disabled on cluster for share "
                                      f"group: {group}, topic: {topic}.", UNAVAILABLE)
            if self.topics.backend_holds_key is None:
                await self.opted_in(source)  # learn whether the backend's topic configs hold the key
            await self._create(topic)
            await self.backend.refresh([topic])
            info = self.backend.topic_by_name(topic)
            if info is None:
                raise DeadLetterError(f"dead-letter topic {topic!r} not visible yet after creation")
        if not await self.opted_in(topic):
            raise DeadLetterError(f"DLQ is not enabled on configured DLQ topic for share group: {group}, topic: "
                                  f"{topic} (set {GROUP_ENABLE}=true on the topic).", UNAVAILABLE)
        return info.partitions

    async def _read(self, topic: str, partition: int, first: int, last: int) -> dict:
        """offset -> RawRecord for [first, last] as far as the log still has them."""
        out: dict = {}
        offset = first
        while offset <= last:
            result = await self.backend.fetch(topic, partition, offset, max_bytes=_READ_BYTES, max_wait_ms=0,
                                              isolation_level=0)
            if result.error_code or not result.batches:
                if result.log_start_offset > offset:  # gone from the log: headers only
                    offset = result.log_start_offset
                    continue
                break
            try:
                for rec in decode_batches(result.records):
                    if first <= rec.offset <= last:
                        out[rec.offset] = rec
            except RecordDecodeError as exc:
                raise DeadLetterError(f"cannot decode {topic}-{partition} at {offset}: {exc}", PERMANENT) from exc
            offset = result.batches[-1].last_offset + 1
        return out

    async def write(self, *, group: str, topic: str, partition: int, pending: list[tuple[int, int, int, str]],
                    dlq_topic: str, copy_record: bool) -> int:
        """Write one dead-letter record per pending offset; returns how many. Raises DeadLetterError."""
        if problem := name_problem(group, dlq_topic, self.prefix):
            raise DeadLetterError(problem, INVALID)
        try:
            n_partitions = await self._partitions(group, dlq_topic, topic)
            records: dict = {}  # offset -> RawRecord, as _read returns
            if copy_record:
                for first, last, _count, _cause in pending:
                    records |= await self._read(topic, partition, first, last)
            producer = await self._get_producer()
            target = partition % n_partitions  # Kafka 4.4: source partition modulo DLQ partitions
            futures = []
            batch = producer.create_batch()
            # A batch, not send(): aiokafka's send() refuses a record whose key and value are both
            # null, which is what Kafka writes when the record is not copied.
            for first, last, count, cause in pending:
                for offset in range(first, last + 1):
                    rec = records.get(offset)
                    key, value = (rec.key, rec.value) if rec is not None else (None, None)
                    headers = dlq_headers(topic, partition, offset, group, count, cause)
                    if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                        futures.append(await producer.send_batch(batch, dlq_topic, partition=target))
                        batch = producer.create_batch()
                        if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                            raise DeadLetterError(f"a dead-letter record for offset {offset} does not fit in a "
                                                  "batch", PERMANENT)
            if batch.record_count():
                futures.append(await producer.send_batch(batch, dlq_topic, partition=target))
            STATS.count_dlq(group, "produce", len(futures))
            await asyncio.gather(*futures)
            return sum(last - first + 1 for first, last, _c, _cause in pending)
        except DeadLetterError:
            raise
        except (TimeoutError, KafkaConnectionError, KafkaTimeoutError, OSError) as exc:
            raise DeadLetterError(f"{type(exc).__name__}: {exc}") from exc
        except KafkaError as exc:
            raise DeadLetterError(f"{type(exc).__name__}: {exc}", TRANSIENT if exc.retriable else PERMANENT) from exc
        except Exception as exc:  # a bug or a record the backend refuses: never retried for ever
            raise DeadLetterError(f"{type(exc).__name__}: {exc}", PERMANENT) from exc


class DeadLetterService:
    """Drains each share-partition's dead-letter holds, one task per share-partition at a time."""

    def __init__(self, *, partitions, writer: DeadLetterWriter, group_config: Callable[[str], dict],
                 hold_until_written: bool = False) -> None:
        self.partitions = partitions
        self.writer = writer
        self.group_config = group_config
        self.hold_until_written = hold_until_written
        self._tasks: dict = {}
        self.written = 0  # dead-letter records produced (metrics, tests)
        self.archived_unwritten = 0  # dead-lettered records archived without a write (tests)

    def kick(self, slot) -> None:
        """A share-partition changed: start draining its dead-letter holds if it has any."""
        pending = getattr(slot.partition, "dead_letter_pending", None)
        if pending is None or slot.key in self._tasks or not pending():
            return
        key = slot.key
        task = asyncio.create_task(self._drain(slot), name=f"kshare-dead-letter-{key.group_id}")
        self._tasks[key] = task
        task.add_done_callback(lambda _t: self._tasks.pop(key, None))

    def _gives_up(self, exc: DeadLetterError, attempt: int) -> bool:
        """Whether records whose write failed so are archived unwritten now (else retried)."""
        if exc.kind == INVALID:
            return True
        if self.hold_until_written and exc.kind in (UNAVAILABLE, TRANSIENT):
            return False
        if exc.kind == UNAVAILABLE:
            return True
        return attempt >= MAX_ATTEMPTS

    async def _drain(self, slot) -> None:
        attempt = 0
        while not slot.dead and self.partitions.slots.get(slot.key) is slot:
            pending = slot.partition.dead_letter_pending()
            if not pending:
                return
            group = slot.key.group_id
            config = GroupConfig.of(self.group_config(group))
            dlq_topic = config.deadletter_topic_name
            held = sum(last - first + 1 for first, last, _c, _cause in pending)
            try:
                try:
                    if not dlq_topic:  # the group dropped its topic: archive, as without one
                        raise DeadLetterError(f"group {group} has no dead-letter topic any more", INVALID)
                    attempt += 1
                    n = await self.writer.write(group=group, topic=slot.topic, partition=slot.key.partition,
                                                pending=pending, dlq_topic=dlq_topic,
                                                copy_record=config.deadletter_copy_record_enable)
                except DeadLetterError as exc:
                    if exc.kind in (TRANSIENT, PERMANENT):
                        STATS.count_dlq(group, "failed", 1)
                    if not self._gives_up(exc, attempt):
                        _failures.log("write", logging.WARNING, "dead-letter write for group=%s partition=%s-%d "
                                      "failed (attempt %d; records stay held, retrying): %s", group, slot.topic,
                                      slot.key.partition, attempt, exc)
                        await asyncio.sleep(backoff_s(attempt))
                        continue
                    # once per batch of rejects while the cause lasts (a DLQ topic not enabled): rate
                    # limited per group; every record counted (kshare_dead_letter_queue_unwritten_records)
                    _failures.log(f"archived {group}", logging.ERROR, "dead-letter write for group=%s "
                                  "partition=%s-%d failed, archiving %d record(s) without writing them: %s",
                                  group, slot.topic, slot.key.partition, held, exc)
                    STATS.count_dlq(group, "unwritten", held)
                    n = -held
                await self._archive(slot, pending)
                if n >= 0:
                    self.written += n
                    STATS.count_dlq(group, "records", n)
                    log.debug("group=%s partition=%s-%d: %d record(s) dead-lettered to %s", group, slot.topic,
                              slot.key.partition, n, dlq_topic)
                else:
                    self.archived_unwritten += -n
                attempt = 0
            except Exception:  # a failed archiving state write (or a bug): the records stay held, retried
                log.exception("archiving dead-lettered records of group=%s partition=%s-%d failed; retrying",
                              group, slot.topic, slot.key.partition)
                await asyncio.sleep(backoff_s(min(attempt + 1, MAX_ATTEMPTS)))

    async def _archive(self, slot, pending) -> None:
        """The state write that ends the hold: the records become ARCHIVED (Kafka's ARCHIVING -> ARCHIVED)."""
        batches = [(first, last, [3]) for first, last, _c, _cause in pending]
        codes = await self.partitions.persist_plans([(slot, PendingAcks(DEAD_LETTER, batches))])
        code = codes[slot.key]
        if code:
            raise RuntimeError(f"archiving after the dead-letter write failed with {code.name}")

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.writer.close()
