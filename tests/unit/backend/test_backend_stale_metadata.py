"""Topics cached but old (backend/backend.py, ``describe_topics``): a refresh is waited for at most
``stale_wait_s``, and not at all — nor even started — while the backend is suspended (a cluster
member whose lease lapsed answers Metadata from what it has, never with an error)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from kshare_sidecar.backend.backend import Backend
from kshare_sidecar.backend.errors import BackendUnavailableError
from kshare_sidecar.backend.metadata import CachedTopic
from kshare_sidecar.backend.types import TopicInfo

ORDERS = TopicInfo("orders", uuid.UUID(int=5), 3)


def stale_backend() -> tuple[Backend, list[tuple[str, ...]]]:
    backend = Backend("x:1", metadata_max_age_s=5.0)
    backend._client = type("Client", (), {"_conns": {}})()  # started (no connections)
    backend._cache.put(CachedTopic(ORDERS, None, False, time.monotonic() - 60))  # type: ignore[arg-type]
    asked: list[tuple[str, ...]] = []

    async def refresh_names(names):
        asked.append(names)
        backend._require_client()  # a suspended backend fails here, at once
        await asyncio.sleep(3600)  # a cut link: no answer

    backend._refresh_names = refresh_names  # type: ignore[method-assign]
    return backend, asked


async def test_a_suspended_backend_answers_from_the_cache_without_asking():
    backend, asked = stale_backend()
    backend.suspend("this sidecar's cluster lease lapsed")
    assert await asyncio.wait_for(backend.describe_topics(["orders"]), 1) == {"orders": ORDERS}
    assert asked == []
    with pytest.raises(BackendUnavailableError):  # a name it has never seen: nothing to answer from
        await asyncio.wait_for(backend.describe_topics(["other"]), 1)


async def test_a_slow_backend_is_waited_for_at_most_stale_wait_s():
    backend, asked = stale_backend()
    backend.stale_wait_s = 0.05
    started = time.monotonic()
    assert await asyncio.wait_for(backend.describe_topics(["orders"]), 1) == {"orders": ORDERS}
    assert time.monotonic() - started < 0.5 and asked == [("orders",)]


async def test_a_suspension_during_the_wait_answers_from_the_cache():
    backend, _asked = stale_backend()
    backend.stale_wait_s = 5

    async def lapse_soon():
        await asyncio.sleep(0.05)
        backend.suspend("this sidecar's cluster lease lapsed")

    lapse = asyncio.create_task(lapse_soon())
    real = backend._refresh_names

    async def aborted(names):  # the refresh in flight is ended by the suspension
        try:
            await backend.suspension.abortable(real(names))
        except ConnectionAbortedError:
            raise BackendUnavailableError(-1, "aborted") from None

    backend._refresh_names = aborted  # type: ignore[method-assign]
    assert await asyncio.wait_for(backend.describe_topics(["orders"]), 2) == {"orders": ORDERS}
    await lapse
