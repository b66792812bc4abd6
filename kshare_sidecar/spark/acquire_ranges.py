"""The driver on the project's asyncio share consumer, offsets only (``shareClient=auto``/``kshare``).

Why: on librdkafka the driver's ``latestOffset`` was an acknowledgement round trip
(``commit_sync``) and then a poll whose 20k records librdkafka decoded into ``Message`` objects
only for the driver to keep their offsets — 53-74 ms a batch where Spark's Kafka source needs
6-7. Here a trigger is one ShareAcknowledge for the previous batch (sent by range: a few
AcknowledgementBatches, not 20k offsets) and one ShareFetch whose AcquiredRecords ranges are all
that is kept (``ShareConsumer(offsets_only=True)``: the record bytes are never decoded or
copied). Measured at the driver (``benchmarks/spark_driver.py``), per 20k-record batch.

The acknowledgements are not piggybacked on that ShareFetch, though the client could: Kafka and
the sidecar apply a ShareFetch's acknowledgements while it acquires, so it finds the window
still full of the batch being acknowledged, and batches came out at 14.3k (native) and 10k
(sidecar) records instead of 22k and 18k — more batches, each paying Spark's fixed cost.

The asyncio client runs on an event loop in a daemon thread of the driver's source process, so
its heartbeats go on between triggers however long a batch takes; Spark's calls block on
futures of that loop. A SIGTERM landing while one is waited for raises (``lifecycle``) and the
coroutine finishes on the loop; the ``stop()`` that follows closes the consumer there, after it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from . import lifecycle
from . import ranges as R
from .acquire import Acquirer
from .options import SourceOptions
from .shareclient import asyncio_kwargs

if TYPE_CHECKING:
    from kshare_sidecar.client import ShareConsumer

log = logging.getLogger("kshare.spark")

#: Beyond the client's own request timeout: how long a blocked Spark call waits for the loop.
SLACK_S = 30.0


class _LoopThread:
    """An event loop running in a daemon thread; ``run`` waits for a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kshare-share-consumer", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


class RangeAcquirer(Acquirer):
    """See the module docstring."""

    def __init__(self, opts: SourceOptions, sid: str | None = None) -> None:
        super().__init__(opts, sid)
        self._kwargs = asyncio_kwargs(opts)
        self._timeout_s = self._kwargs.get("request_timeout_ms", 30_000) / 1000 + SLACK_S
        self._loop: _LoopThread | None = None
        self._consumer: ShareConsumer | None = None

    def _run(self, coro: Coroutine[Any, Any, Any], timeout_s: float | None = None) -> Any:
        assert self._loop is not None
        with lifecycle.consumer_call():
            return self._loop.run(coro, timeout_s or self._timeout_s)

    def _open(self) -> None:
        if self._consumer is not None:
            return
        from kshare_sidecar.client import ShareConsumer

        opts = self.opts
        consumer = ShareConsumer(*opts.topics, bootstrap_servers=opts.bootstrap, group_id=opts.group,
                                 acknowledgement_mode="explicit", offsets_only=True,
                                 max_poll_records=opts.max_records, **self._kwargs)
        self._loop = _LoopThread()
        try:
            self._run(consumer.start())
        except BaseException:
            self._loop.close()
            self._loop = None
            raise
        self._consumer = consumer

    def _poll_ranges(self, timeout_s: float) -> tuple[dict[str, list[R.Range]], int]:
        consumer = self._consumer
        assert consumer is not None
        got = self._run(consumer.getranges(int(timeout_s * 1000)), timeout_s + self._timeout_s)
        self.assigned, self.joined = len(consumer.assignment()), consumer.joined
        started = time.perf_counter()
        out = {R.tp_key(tp.topic, tp.partition): R.merge(rs) for tp, rs in got.items()}
        self.timings["take"] += time.perf_counter() - started
        return out, R.count(out)

    def _queue_acks(self, ranges: dict[str, list[R.Range]], accept: bool) -> tuple[int, int]:
        from kshare_sidecar.client import AcknowledgeType

        consumer = self._consumer
        assert consumer is not None
        ack_type = AcknowledgeType.ACCEPT if accept else AcknowledgeType.RELEASE

        async def queue() -> tuple[int, int]:  # on the loop: the books are the loop's
            from aiokafka.structs import TopicPartition

            from kshare_sidecar.client import AckStateError

            done = failed = 0
            for key, rs in ranges.items():
                tp = TopicPartition(*R.split_key(key))
                for first, last, _ in rs:
                    try:
                        consumer.acknowledge_offsets(tp, first, last, ack_type)
                        done += last - first + 1
                    except AckStateError:  # the session ended meanwhile: the broker released them
                        failed += 1
            return done, failed

        return self._run(queue())

    def _flush(self) -> dict[str, str]:
        consumer = self._consumer
        assert consumer is not None
        results = self._run(consumer.commit())
        return {f"{tp.topic}:{tp.partition}": str(err) for tp, err in results.items() if err is not None}

    def _close_client(self) -> None:
        consumer, self._consumer = self._consumer, None
        try:
            if consumer is not None:
                self._run(consumer.close())
        except Exception as exc:  # broker gone: the session times out on its side
            log.debug("kshare source: closing the share consumer: %s", exc)
        finally:
            if self._loop is not None:
                self._loop.close()
                self._loop = None
