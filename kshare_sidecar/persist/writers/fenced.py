"""``state.write.mode=fenced`` (the default): each state partition's writer sends idempotent batches
at the producer epoch of its transactional id (persist/epochwriter.py). A successor's
InitProducerId bumps the epoch and the partition leader refuses the zombie's batches: fencing
without a transaction per write. A batch is done when the leader has it (acks=all).

All writers share one aiokafka client. Every ``writer_refresh_s`` each owned, serving partition
takes a new producer epoch and writes its owner record at it (persist/settings.py,
``WRITER_REFRESH_S``: neither the transactional id nor the producer state may expire meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokafka.client import AIOKafkaClient

from kshare_sidecar.backend.health import drop_connections
from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import KIND_OWNER
from kshare_sidecar.persist.epochwriter import EpochWriter
from kshare_sidecar.persist.writers.base import StateWriters

if TYPE_CHECKING:
    from kshare_sidecar.persist.ops import Record

log = logging.getLogger("kshare_sidecar.persist.topic")


class FencedWriters(StateWriters):
    """EpochWriters on one shared client, refreshed every ``writer_refresh_s``."""

    # the leader refuses a zombie's batches once the owner record is written at the new epoch; the
    # owner rule of replay stays behind it (an expired producer state, see WRITER_REFRESH_S)
    replay_rule = "owner"

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.client: AIOKafkaClient | None = None
        self._refresher: asyncio.Task[None] | None = None
        #: what the refresh asks before it writes (set by the store: the serving persister's view)
        self.owner_epoch_of: Callable[[int], int] | None = None
        self.blocked: Callable[[int], bool] = lambda _p: False
        self.closed = False

    async def open(self) -> None:
        if self.client is not None:
            return
        s = self.settings
        self.client = s.bound(AIOKafkaClient(bootstrap_servers=s.bootstrap_servers,
                                             request_timeout_ms=s.request_timeout_ms, client_id="kshare-state-writer",
                                             **s.client_options))
        await self.client.bootstrap()
        self.client.add_topic(s.topic)
        await self.client.force_metadata_update()
        if s.writer_refresh_s > 0:  # 0: the backend expires no producer state (state.write.refresh.ms)
            self._refresher = asyncio.get_running_loop().create_task(self._refresh(),
                                                                     name="kshare-state-writer-refresh")

    def new(self, partition: int) -> EpochWriter:
        assert self.client is not None
        s = self.settings
        return EpochWriter(self.client, s.topic, partition, s.transactional_id(partition),
                           transaction_timeout_ms=s.transaction_timeout_ms, request_timeout_ms=s.request_timeout_ms)

    async def write(self, producer: EpochWriter, partition: int, records: list[Record]) -> None:
        """One idempotent batch at the writer's epoch; done when the leader has it."""
        await self.before_send(producer)
        await producer.send(records)

    async def before_send(self, producer: EpochWriter) -> None:
        """Before a batch is sent (a seam: the fencing tests hold every write here, so a SIGSTOP
        lands while one is being made)."""

    async def settle(self, partition: int) -> bool:
        """The lost batch sent again at its sequence."""
        producer = self.producers.get(partition)
        if producer is None:
            return False
        try:
            return await asyncio.wait_for(producer.settle(), self.settings.commit_timeout_s)
        except asyncio.TimeoutError:  # still unanswered: a new epoch (after the owner check) decides
            return False

    async def _stop(self, producer: Any) -> None:
        """Nothing to stop: an EpochWriter's client is the shared one."""

    def serving(self, persister: Any, positions: dict[int, int]) -> None:
        self.owner_epoch_of = persister.ownership.own_epoch
        self.blocked = lambda p: p in persister.blocked

    async def _refresh(self) -> None:
        """Every ``writer_refresh_s``: each owned, serving state partition gets a new producer epoch
        and its owner record written at it."""
        s = self.settings
        while not self.closed:
            await asyncio.sleep(s.writer_refresh_s)
            for p, writer in list(self.producers.items()):
                if self.closed or self.owner_epoch_of is None or self.blocked(p):
                    continue
                try:
                    await asyncio.wait_for(writer.refresh(), s.commit_timeout_s)
                    await asyncio.wait_for(writer.send([codec.encode(KIND_OWNER, p, self.owner_epoch_of(p))]),
                                           s.commit_timeout_s)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the next state write meets the same fault
                    log.warning("state partition %d: refreshing the writer's producer epoch failed: %r", p, exc)

    def drop_connections(self) -> int:
        return drop_connections(self.client)

    async def close(self) -> None:
        self.closed = True
        refresher, self._refresher = self._refresher, None
        if refresher is not None:
            refresher.cancel()
            await asyncio.gather(refresher, return_exceptions=True)
        await super().close()
        client, self.client = self.client, None
        if client is not None:
            await client.close()
