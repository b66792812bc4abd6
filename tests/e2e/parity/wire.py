"""A blocking Kafka wire client for the differential harness: requests encoded once with kio.

The harness must see exactly what a broker answers, so nothing here interprets a response
(no retries, no metadata refresh): one TCP connection, one request at a time, kio entities in
and out. The connection is kshare's :class:`~kshare_sidecar.protocol.blocking.BlockingConnection`
(framing only: kio's reader/writer, a correlation-id check); the bytes on the wire are kio's.
"""

from __future__ import annotations

import time
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from kshare_sidecar.protocol.address import parse_host_port
from kshare_sidecar.protocol.blocking import BlockingConnection


class Wire:
    """One connection to one target (``host:port``), opened on first use."""

    def __init__(self, bootstrap: str, *, client_id: str = "kshare-parity", timeout_s: float = 30.0) -> None:
        self._addr = parse_host_port(bootstrap)
        self._client_id = client_id
        self._timeout = timeout_s
        self._conn: BlockingConnection | None = None

    def call(self, request: Any) -> Any:
        """Send one request and return its decoded response body."""
        if self._conn is None:
            self._conn = BlockingConnection(*self._addr, timeout=self._timeout, client_id=self._client_id)
        try:
            return self._conn.call(request)
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def record_batch(values: list[bytes], *, timestamp_ms: int | None = None) -> bytes:
    """One uncompressed v2 record batch holding ``values`` (keys null), offsets from 0.

    Batches are built here rather than by a producer so that both targets store the same batch
    boundaries: ShareFetch acquisition is aligned to batches, and a producer's batching is timing.
    Timestamps are now: an old one would let retention delete the records at once.
    """
    timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=timestamp_ms, key=None, value=value, headers=[])
    return bytes(builder.build())


def records(blob: bytes | None) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every data record in a records field (control batches skipped)."""
    out: list[tuple[int, bytes | None]] = []
    if not blob:
        return out
    batches = MemoryRecords(bytes(blob))
    while batches.has_next():
        batch = batches.next_batch()
        if batch is None:
            break
        if batch.is_control_batch:
            continue
        out.extend((record.offset, record.value) for record in batch)
    return out
