"""Hypothesis-driven fuzzing of decode + dispatch (sans-I/O): structure-aware, mutated and random
request frames go through the real dispatcher over the real services. No frame may raise anything
but CloseConnection, log a traceback, or produce a response that does not parse."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kshare_sidecar.testing.wirefuzz import FrameFactory
from kshare_sidecar.wire import CloseConnection, codec

from .stack import TOPICS, FakeConn as Conn, Stack




@pytest.fixture(scope="module")
def stack():
    loop = asyncio.new_event_loop()
    s = Stack()
    loop.run_until_complete(s.start())
    yield loop, s
    loop.run_until_complete(s.stop())
    loop.close()


def _run(loop, dispatcher, frame: bytes):
    async def go():
        return await asyncio.wait_for(dispatcher.handle(frame, Conn(), lambda: None), 0.2)
    return loop.run_until_complete(go())


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**64), mode=st.sampled_from(("structured", "mutated", "random")))
def test_no_frame_escapes_the_dispatcher(stack, caplog, seed: int, mode: str) -> None:
    loop, s = stack
    factory = FrameFactory(random.Random(seed), topic_ids=[t.topic_id for t in TOPICS],
                           served=s.dispatcher.registry.ranges())
    frame = {"structured": factory.structured, "mutated": factory.mutated, "random": factory.random_frame}[mode]()
    peeked = codec.peek(frame)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        try:
            out = _run(loop, s.dispatcher, frame)
        except CloseConnection:
            out = None
        except TimeoutError:
            assert peeked.api_key == 78, f"api key {peeked.api_key} v{peeked.api_version} hung"  # long poll
            out = None
    tracebacks = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not tracebacks, tracebacks[0].getMessage()
    if out:
        assert int.from_bytes(out[:4], "big") == len(out) - 4
        entry = s.dispatcher.registry.get(peeked.api_key)
        version = peeked.api_version if entry and entry.serves(peeked.api_version) else 0
        header, _ = codec.decode_response(out[4:], codec.response_class(peeked.api_key, version))
        assert header.correlation_id == peeked.correlation_id
