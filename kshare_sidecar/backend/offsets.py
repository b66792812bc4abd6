"""The backend's offsets by ListOffsets (the `OffsetLookups` part of `Backend`, backend/backend.py):
log start, high watermark, last stable offset, by timestamp; and the offsets an
OFFSET_OUT_OF_RANGE fetch result is completed with."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from aiokafka.client import ConnectionGroup

from ..protocol.types import TopicPartition
from . import errors as E
from .errors import BackendError, BackendUnavailableError, UnknownTopicError, error_for
from .kio_bridge import KioRequest
from .reads import EARLIEST, LATEST, empty_result, list_offsets_request, list_offsets_timestamp
from .types import FetchResult

OffsetSpec = Literal["earliest", "latest"] | int


class OffsetLookups:
    """Needs ``_ensure_known``, ``_leader``, ``_send`` and ``_refresh_after_error`` (`Backend`'s)."""

    async def _ensure_known(self, topics: set[str]) -> None:
        raise NotImplementedError

    def _leader(self, topic: str, partition: int) -> int:
        raise NotImplementedError

    async def _send(self, node: int, request: KioRequest, *, group: ConnectionGroup = ConnectionGroup.DEFAULT) -> Any:
        raise NotImplementedError

    async def _refresh_after_error(self, topics: set[str]) -> None:
        raise NotImplementedError

    async def _fill_out_of_range(self, results: dict[TopicPartition, FetchResult], isolation_level: int) -> None:
        keys = [k for k, v in results.items() if v.error_code == E.OFFSET_OUT_OF_RANGE]
        if not keys:
            return

        async def offsets(key: TopicPartition) -> None:
            try:
                start, end, stable = await asyncio.gather(
                    self._list_offset(*key, EARLIEST, 0),
                    self._list_offset(*key, LATEST, 0),
                    self._list_offset(*key, LATEST, 1),
                )
            except BackendError:
                return  # keep the bare OFFSET_OUT_OF_RANGE result
            results[key] = empty_result(E.OFFSET_OUT_OF_RANGE, hwm=end, lso=stable, log_start=start)

        await asyncio.gather(*(offsets(k) for k in keys))

    async def list_offsets(
        self, topic: str, partition: int, spec: OffsetSpec, *, isolation_level: int = 0
    ) -> int | None:
        """The offset for ``spec``: ``"earliest"`` = log start, ``"latest"`` = high watermark (or
        LSO with ``isolation_level=1``), an int = first offset whose timestamp ≥ it in ms; ``None``
        when no record is that recent (callers then use ``"latest"``)."""
        offset = await self._list_offset(topic, partition, list_offsets_timestamp(spec), isolation_level)
        return None if offset < 0 else offset

    async def high_watermark(self, topic: str, partition: int) -> int:
        return await self._list_offset(topic, partition, LATEST, 0)

    async def last_stable_offset(self, topic: str, partition: int) -> int:
        return await self._list_offset(topic, partition, LATEST, 1)

    async def log_start_offset(self, topic: str, partition: int) -> int:
        return await self._list_offset(topic, partition, EARLIEST, 0)

    async def _list_offset(self, topic: str, partition: int, timestamp: int, isolation_level: int) -> int:
        for attempt in (0, 1):
            await self._ensure_known({topic})
            offset = -1
            try:
                node = self._leader(topic, partition)
                code = E.LEADER_NOT_AVAILABLE
            except UnknownTopicError:
                # the cache may predate the topic reaching every broker, or a partition added since:
                # retried after a refresh below, as the broker's own UNKNOWN_TOPIC_OR_PARTITION is
                node, code = -1, E.UNKNOWN_TOPIC_OR_PARTITION
            if node >= 0:
                try:
                    response = await self._send(node, list_offsets_request(topic, partition, timestamp, isolation_level))
                    p = response.topics[0].partitions[0]
                    code, offset = int(p.error_code), int(getattr(p, "offset", -1))
                except BackendUnavailableError as exc:
                    code = exc.code
            if code == 0:
                return offset
            if attempt == 0 and code in E.REFRESH_AND_RETRY:
                await self._refresh_after_error({topic})
                continue
            raise error_for(code, f"list offsets {topic}[{partition}] ts={timestamp} failed: error {code}",
                            topic=topic, partition=partition)
        raise AssertionError("unreachable")
