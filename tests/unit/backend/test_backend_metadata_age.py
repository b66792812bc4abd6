"""Aged topic metadata: re-read once however many callers find it aged, and (``stale_ok``, the
heartbeat's way) answered from the cache while the re-read runs in the background."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

from kshare_sidecar.backend import Backend
from kshare_sidecar.backend.metadata import MetadataAnswer, TopicMeta


def _meta(name: str, partitions: int) -> TopicMeta:
    return TopicMeta(name, uuid.UUID(int=5), False, (1,) * partitions, (0,) * partitions)


def backend_with(partitions: dict[str, int], gate: asyncio.Event | None = None):
    backend = Backend("unused:1", metadata_max_age_s=5.0)
    calls: list[tuple[str, ...]] = []

    async def metadata(names):
        calls.append(names)
        if gate is not None:
            await gate.wait()
        return MetadataAnswer({n: _meta(n, partitions[n]) for n in names if n in partitions},
                              frozenset(n for n in names if n not in partitions), 12)

    backend._metadata = metadata  # type: ignore[method-assign]
    return backend, calls


def age(backend: Backend, name: str, seconds: float) -> None:
    entry = backend._cache.by_name[name]
    backend._cache.put(dataclasses.replace(entry, at=time.monotonic() - seconds))


async def test_concurrent_callers_of_an_aged_topic_share_one_metadata_request():
    gate = asyncio.Event()
    backend, calls = backend_with({"t": 3}, gate)
    gate.set()
    await backend.describe_topics(["t"])
    gate.clear()
    age(backend, "t", 6)
    waiting = [asyncio.ensure_future(backend.describe_topics(["t"])) for _ in range(50)]
    await asyncio.sleep(0.01)
    gate.set()
    results = await asyncio.gather(*waiting)
    assert len(calls) == 2, "one read at first, one re-read for all 50 callers"
    assert all(r["t"].partitions == 3 for r in results)


async def test_a_topic_not_cached_is_always_read_afresh():
    backend, calls = backend_with({"t": 1})
    assert await backend.describe_topics(["missing"]) == {}
    assert await backend.describe_topics(["missing"]) == {}
    assert len(calls) == 2  # a topic created a moment ago must show up at once


async def test_stale_ok_answers_from_the_cache_and_re_reads_in_the_background():
    partitions = {"t": 2}
    backend, calls = backend_with(partitions)
    await backend.describe_topics(["t"], stale_ok=True)  # not cached: read now
    assert len(calls) == 1
    partitions["t"] = 4  # grown at the backend
    assert (await backend.describe_topics(["t"], stale_ok=True))["t"].partitions == 2  # fresh: no read
    assert len(calls) == 1
    age(backend, "t", 6)
    assert (await backend.describe_topics(["t"], stale_ok=True))["t"].partitions == 2  # aged: cached answer...
    await asyncio.sleep(0.01)
    assert len(calls) == 2  # ...and one re-read behind it
    assert (await backend.describe_topics(["t"], stale_ok=True))["t"].partitions == 4
    await backend.close()


async def test_a_failed_background_re_read_is_tried_again_by_the_next_caller():
    backend, calls = backend_with({"t": 1})
    await backend.describe_topics(["t"])

    async def failing(names):
        calls.append(names)
        raise RuntimeError("backend down")

    backend._metadata = failing  # type: ignore[method-assign]
    age(backend, "t", 6)
    assert "t" in await backend.describe_topics(["t"], stale_ok=True)
    await asyncio.sleep(0.01)
    assert "t" in await backend.describe_topics(["t"], stale_ok=True)
    await asyncio.sleep(0.01)
    assert len(calls) == 3
    await backend.close()
