"""Reading ranges of a topic's records from the backend, for the dead-letter page, ``kshare dlq``
and the redrive (the dead letters themselves, and source records a headers-only dead letter
points at).

An aiokafka consumer without a group (manual assignment, no commits), one request at a time: the
console and the CLI read little and seldom, and the sidecar's own backend reads
(backend/backend.py) stay untouched by them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from .records import DeadLetter, parse

log = logging.getLogger("kshare.dlq")

#: A read gives up after this long without reaching the wanted records (a partition whose
#: leader is gone, a range ending in a long run of aborted records).
READ_TIMEOUT_S = 10.0


class ReadError(Exception):
    """The topic cannot be read now (unknown topic, backend unreachable)."""


class TopicReader:
    """Reads records of any topic by partition and offset range (see the module docstring)."""

    def __init__(self, bootstrap_servers: str, client_options: dict[str, Any] | None = None, *,
                 isolation_level: str = "read_committed", client_id: str = "kshare-dlq-reader") -> None:
        self._options = dict(bootstrap_servers=bootstrap_servers, group_id=None, enable_auto_commit=False,
                             isolation_level=isolation_level, auto_offset_reset="earliest", client_id=client_id,
                             **(client_options or {}))
        self._consumer_or_none: AIOKafkaConsumer | None = None  # made at first use (aiokafka warns of unused ones)
        self._lock = asyncio.Lock()

    @property
    def _consumer(self) -> AIOKafkaConsumer:
        assert self._consumer_or_none is not None, "start() first"
        return self._consumer_or_none

    async def start(self) -> None:
        if self._consumer_or_none is None:
            consumer = AIOKafkaConsumer(**self._options)
            try:
                await consumer.start()
            except KafkaError as exc:
                await consumer.stop()
                raise ReadError(f"cannot reach the backend: {exc}") from exc
            except BaseException:
                await consumer.stop()
                raise
            self._consumer_or_none = consumer

    async def close(self) -> None:
        consumer, self._consumer_or_none = self._consumer_or_none, None
        if consumer is not None:
            await consumer.stop()

    async def partitions(self, topic: str) -> list[int]:
        """The topic's partitions; :class:`ReadError` when the backend does not know it."""
        await self.start()
        parts = self._consumer.partitions_for_topic(topic)
        if not parts:
            try:
                await self._consumer._client.force_metadata_update()
                self._consumer._client.add_topic(topic)
                await self._consumer._client.force_metadata_update()
            except KafkaError as exc:
                raise ReadError(f"cannot read the metadata of {topic!r}: {exc}") from exc
            parts = self._consumer.partitions_for_topic(topic)
        if not parts:
            raise ReadError(f"topic {topic!r} does not exist")
        return sorted(parts)

    async def bounds(self, topic: str) -> dict[int, tuple[int, int]]:
        """partition -> (log start offset, end offset: the last stable offset under read_committed)."""
        parts = await self.partitions(topic)
        tps = [TopicPartition(topic, p) for p in parts]
        try:
            begin = await self._consumer.beginning_offsets(tps)
            end = await self._consumer.end_offsets(tps)
        except KafkaError as exc:
            raise ReadError(f"cannot read the offsets of {topic!r}: {exc}") from exc
        return {tp.partition: (begin[tp], end[tp]) for tp in tps}

    async def read(self, topic: str, partition: int, start: int, limit: int, end: int | None = None) -> \
            tuple[list[Any], int]:
        """Up to ``limit`` records from offset ``start`` (below ``end`` if given), and the position
        after them (past control and aborted records too, so a caller never reads them twice)."""
        await self.start()
        tp = TopicPartition(topic, partition)
        async with self._lock:
            consumer = self._consumer
            consumer.assign([tp])
            consumer.seek(tp, start)
            out: list[Any] = []
            position = start
            loop = asyncio.get_running_loop()
            deadline = loop.time() + READ_TIMEOUT_S
            while len(out) < limit and (end is None or position < end):
                if loop.time() > deadline:
                    if out or end is None:
                        break
                    raise ReadError(f"{topic}-{partition}: nothing could be read from offset {start} within "
                                    f"{READ_TIMEOUT_S:.0f} s")
                try:
                    batch = await consumer.getmany(tp, timeout_ms=500, max_records=limit - len(out))
                    position = await consumer.position(tp)
                except KafkaError as exc:
                    raise ReadError(f"cannot read {topic}-{partition} at {position}: {exc}") from exc
                records = batch.get(tp, [])
                out.extend(r for r in records if end is None or r.offset < end)
                if not records and end is None:
                    break  # at the end of the log
            if len(out) >= limit:
                del out[limit:]
                position = out[-1].offset + 1
            elif end is not None:
                position = min(position, end)
            return out, position

    async def read_one(self, topic: str, partition: int, offset: int) -> Any | None:
        """The record at ``offset``, or ``None`` when the log no longer (or never) had it."""
        records, _ = await self.read(topic, partition, offset, 1)
        if records and records[0].offset == offset:
            return records[0]
        return None

    async def dead_letters(self, topic: str, partition: int, start: int, limit: int,
                           end: int | None = None) -> tuple[list[DeadLetter], int]:
        records, position = await self.read(topic, partition, start, limit, end)
        return [letter(topic, r) for r in records], position


def letter(topic: str, record: Any) -> DeadLetter:
    """An aiokafka ``ConsumerRecord`` of a dead-letter topic as a :class:`DeadLetter`."""
    return parse(topic, record.partition, record.offset, record.timestamp, record.key, record.value,
                 record.headers or ())
