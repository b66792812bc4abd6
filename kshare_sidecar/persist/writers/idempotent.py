"""``state.write.mode=idempotent``: plain idempotent produce (acks=all), for backends without
transactions. The backend fences no writer here: the replay's owner rule ignores a zombie's late
records, and the state-topic watch (:mod:`.watch`) answers a write only once it counts.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer

from kshare_sidecar.persist.txnclient import is_fatal
from kshare_sidecar.persist.writers.base import StateWriters
from kshare_sidecar.persist.writers.watch import StateWatch

if TYPE_CHECKING:
    from kshare_sidecar.persist.ops import Record

log = logging.getLogger("kshare_sidecar.persist.topic")


class IdempotentWriters(StateWriters):
    """Idempotent aiokafka producers, one per state partition, confirmed by the state-topic watch."""

    replay_rule = "owner"
    fences_writers = False

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.watch: StateWatch | None = None  # from serving() on

    def new(self, partition: int) -> AIOKafkaProducer:
        s = self.settings
        return s.bound(AIOKafkaProducer(
            bootstrap_servers=s.bootstrap_servers, enable_idempotence=True, acks="all", linger_ms=0,
            retry_backoff_ms=20, max_batch_size=1024 * 1024, request_timeout_ms=s.request_timeout_ms,
            client_id=f"kshare-state-writer-{partition}", **s.client_options))

    def unusable(self, producer: Any) -> bool:
        return is_fatal(producer)

    async def write(self, producer: AIOKafkaProducer, partition: int, records: list[Record]) -> None:
        """The records in one produce batch (acks=all); done when acknowledged and the state-topic
        watch has confirmed no newer owner precedes them."""
        futures = [await producer.send(self.settings.topic, value=value, key=key, partition=partition)
                   for key, value in records]
        try:
            last = -1
            for f in futures:
                last = max(last, (await f).offset)
            if self.watch is not None:  # start-up (owner records): the second replay covers them
                await self.watch.confirm(partition, last)
        finally:
            for f in futures:
                if not f.done():
                    f.add_done_callback(lambda fut: fut.cancelled() or fut.exception())

    async def settle(self, partition: int) -> bool:
        """Delivered or failed once the producer has drained."""
        producer = self.producers.get(partition)
        if producer is None:
            return False
        try:
            await asyncio.wait_for(producer.flush(), self.settings.commit_timeout_s)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - a broken producer is replaced
            log.debug("state partition %d: flushing: %r", partition, exc)
            return False
        return True

    def serving(self, persister: Any, positions: dict[int, int]) -> None:
        if self.watch is None:
            self.watch = StateWatch(self.settings, persister, positions)
            self.watch.start()

    async def close(self) -> None:
        watch, self.watch = self.watch, None
        if watch is not None:
            await watch.stop()
        await super().close()
