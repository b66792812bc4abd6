"""Dead-letter writes (KIP-1191's names, kshare's extension on any backend; docs/extensions.md).

A share-partition of a group with ``errors.deadletterqueue.topic.name`` holds every record that
was rejected or reached the delivery count limit (share/extended.py). This service drains those
holds: it reads the records from the backend (only when ``errors.deadletterqueue.copy.record.enable``),
produces one dead-letter record per offset — key, value and headers copied, plus Kafka 4.4's
``__dlq.errors.*`` headers — with an idempotent ``acks=all`` producer, and only after every write
is acknowledged archives the records with an ordinary state write (the holder acknowledges them
as REJECT). So the state never says "archived" for a record the topic does not have; a crash or a
failed state write after the dead-letter write repeats it (at least once: duplicates carry the
same topic/partition/offset/group headers). A failed write leaves the hold and retries with
backoff (0.5 s doubling to 30 s), logging one line per failure kind a minute.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ..client.records import RecordDecodeError, decode_batches
from ..config_sections import GroupConfig
from ..ratelog import RateLimitedLog
from ..share.holds import CAUSE_LIMIT, DEAD_LETTER

log = logging.getLogger("kshare.deadletter")
_failures = RateLimitedLog(log)

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
#: Kafka 4.4's cause messages (ShareGroupDLQ*), so tooling written for native DLQ records matches.
MESSAGE_REJECTED = "Offset rejected by client."
MESSAGE_LIMIT = "Offset delivery count exceeded the threshold."

_READ_BYTES = 1024 * 1024


class DeadLetterError(Exception):
    """The dead-letter write cannot be done now (missing topic, backend error); it is retried."""


def dlq_headers(topic: str, partition: int, offset: int, group: str, delivery_count: int,
                cause: str) -> list[tuple[str, bytes]]:
    """The context headers, as Kafka 4.4 writes them (UTF-8 decimal text)."""
    return [(HEADER_TOPIC, topic.encode()), (HEADER_PARTITION, str(partition).encode()),
            (HEADER_OFFSET, str(offset).encode()), (HEADER_GROUP, group.encode()),
            (HEADER_DELIVERY_COUNT, str(delivery_count).encode()),
            (HEADER_MESSAGE, (MESSAGE_LIMIT if cause == CAUSE_LIMIT else MESSAGE_REJECTED).encode())]


class DeadLetterWriter:
    """Produces dead-letter records to the backend (one idempotent producer, started on first use)."""

    def __init__(self, backend, *, bootstrap_servers: str, client_options: dict, auto_create: bool,
                 prefix: str) -> None:
        self.backend = backend
        self.bootstrap_servers = bootstrap_servers
        self.client_options = client_options
        self.auto_create = auto_create
        self.prefix = prefix
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def _get_producer(self) -> AIOKafkaProducer:
        async with self._lock:
            if self._producer is None:
                producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers, enable_idempotence=True,
                                            acks="all", linger_ms=5, client_id="kshare-dead-letter",
                                            **self.client_options)
                await producer.start()
                self._producer = producer
            return self._producer

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def _partitions(self, topic: str) -> int:
        """Partitions of the dead-letter topic, creating it when allowed."""
        await self.backend.refresh([topic])
        info = self.backend.topic_by_name(topic)
        if info is not None:
            return info.partitions
        if not self.auto_create:
            raise DeadLetterError(f"dead-letter topic {topic!r} does not exist (create it, or set "
                                  "errors.deadletterqueue.auto.create.topics.enable=true)")
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers, **self.client_options)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(name=topic, num_partitions=1, replication_factor=-1,
                                                replica_assignments={})])
            log.info("created dead-letter topic %r", topic)
        finally:
            await admin.close()
        await self.backend.refresh([topic])
        info = self.backend.topic_by_name(topic)
        if info is None:
            raise DeadLetterError(f"dead-letter topic {topic!r} not visible yet after creation")
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
                raise DeadLetterError(f"cannot decode {topic}-{partition} at {offset}: {exc}") from exc
            offset = result.batches[-1].last_offset + 1
        return out

    async def write(self, *, group: str, topic: str, partition: int, pending: list[tuple[int, int, int, str]],
                    dlq_topic: str, copy_record: bool) -> int:
        """Write one dead-letter record per pending offset; returns how many. Raises DeadLetterError."""
        if not dlq_topic.startswith(self.prefix):
            raise DeadLetterError(f"dead-letter topic {dlq_topic!r} does not start with "
                                  f"errors.deadletterqueue.topic.name.prefix {self.prefix!r}")
        try:
            n_partitions = await self._partitions(dlq_topic)
            records: dict = {}  # offset -> RawRecord, as _read returns
            if copy_record:
                for first, last, _count, _cause in pending:
                    records |= await self._read(topic, partition, first, last)
            producer = await self._get_producer()
            futures = []
            target = partition % n_partitions  # Kafka 4.4: source partition modulo DLQ partitions
            for first, last, count, cause in pending:
                for offset in range(first, last + 1):
                    rec = records.get(offset)
                    headers = list(rec.headers) if rec is not None else []
                    headers += dlq_headers(topic, partition, offset, group, count, cause)
                    futures.append(await producer.send(
                        dlq_topic, key=rec.key if rec is not None else None,
                        value=rec.value if rec is not None else None, headers=headers, partition=target))
            await asyncio.gather(*futures)
            return len(futures)
        except DeadLetterError:
            raise
        except Exception as exc:  # backend errors of any kind: the hold stays, the write is retried
            raise DeadLetterError(f"{type(exc).__name__}: {exc}") from exc


class DeadLetterService:
    """Drains each share-partition's dead-letter holds, one task per share-partition at a time."""

    def __init__(self, *, partitions, writer: DeadLetterWriter, group_config: Callable[[str], dict]) -> None:
        self.partitions = partitions
        self.writer = writer
        self.group_config = group_config
        self._tasks: dict = {}
        self.written = 0  # dead-letter records produced (metrics, tests)

    def kick(self, slot) -> None:
        """A share-partition changed: start draining its dead-letter holds if it has any."""
        pending = getattr(slot.partition, "dead_letter_pending", None)
        if pending is None or slot.key in self._tasks or not pending():
            return
        key = slot.key
        task = asyncio.create_task(self._drain(slot), name=f"kshare-dead-letter-{key.group_id}")
        self._tasks[key] = task
        task.add_done_callback(lambda _t: self._tasks.pop(key, None))

    async def _drain(self, slot) -> None:
        from .partitions import PendingAcks

        delay = 0.5
        while not slot.dead and self.partitions.slots.get(slot.key) is slot:
            pending = slot.partition.dead_letter_pending()
            if not pending:
                return
            group = slot.key.group_id
            config = GroupConfig.of(self.group_config(group))
            dlq_topic = config.deadletter_topic_name
            try:
                if not dlq_topic:  # the group dropped its topic: archive, as without one
                    log.info("group=%s partition=%s-%d: no dead-letter topic any more; archiving %d held "
                             "record(s)", group, slot.topic, slot.key.partition,
                             sum(last - first + 1 for first, last, _c, _cause in pending))
                    n = 0
                else:
                    n = await self.writer.write(group=group, topic=slot.topic, partition=slot.key.partition,
                                                pending=pending, dlq_topic=dlq_topic,
                                                copy_record=config.deadletter_copy_record_enable)
                batches = [(first, last, [3]) for first, last, _c, _cause in pending]
                codes = await self.partitions.persist_plans([(slot, PendingAcks(DEAD_LETTER, batches))])
                code = codes[slot.key]
                if code:
                    raise DeadLetterError(f"archiving after the dead-letter write failed with {code.name}")
                self.written += n
                log.debug("group=%s partition=%s-%d: %d record(s) dead-lettered to %s", group, slot.topic,
                          slot.key.partition, n, dlq_topic)
                delay = 0.5
            except DeadLetterError as exc:
                _failures.log("write", logging.WARNING, "dead-letter write for group=%s partition=%s-%d failed "
                              "(records stay held, retrying): %s", group, slot.topic, slot.key.partition, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
            except Exception:  # a bug must not end the drain silently: the records would stay held
                log.exception("dead-letter drain for group=%s partition=%s-%d failed; retrying", group, slot.topic,
                              slot.key.partition)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.writer.close()
