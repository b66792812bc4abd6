"""Admission at accept (wire/limits.py): max.connections.per.ip.overrides, and the descriptors kept
free under the process's open-file limit. On 127.0.0.1 and 127.0.0.2 (the loopback range)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kshare_sidecar.config import ConfigError, load_config
from kshare_sidecar.protocol.address import parse_count_overrides
from kshare_sidecar.wire import limits
from tests.unit.wire.test_wire_limits import answered, closed, listener

pytestmark = pytest.mark.timeout(30)


async def test_an_override_caps_one_address_and_leaves_the_others_at_the_default() -> None:
    lst = await listener(max_connections_per_ip=5, max_connections_per_ip_overrides={"127.0.0.2": 1})
    try:
        r1, w1 = await asyncio.open_connection("127.0.0.1", lst.port, local_addr=("127.0.0.2", 0))
        assert await answered(r1, w1)
        r2, w2 = await asyncio.open_connection("127.0.0.1", lst.port, local_addr=("127.0.0.2", 0))
        assert await closed(r2)
        others = [await asyncio.open_connection("127.0.0.1", lst.port) for _ in range(3)]
        for r, w in others:
            assert await answered(r, w)
        assert lst.refused == 1
        for _, w in (*others, (r1, w1), (r2, w2)):
            w.close()
    finally:
        await lst.stop()


async def test_an_override_by_host_name_applies_to_its_addresses() -> None:
    lst = await listener(max_connections_per_ip_overrides={"localhost": 1})
    try:
        r1, w1 = await asyncio.open_connection("127.0.0.1", lst.port)
        assert await answered(r1, w1)
        r2, w2 = await asyncio.open_connection("127.0.0.1", lst.port)
        assert await closed(r2)
        w1.close()
        w2.close()
    finally:
        await lst.stop()


async def test_connections_that_would_use_the_reserved_descriptors_are_closed(monkeypatch, caplog) -> None:
    lst = await listener()
    try:
        r1, w1 = await asyncio.open_connection("127.0.0.1", lst.port)
        assert await answered(r1, w1)
        # a limit just above the descriptors in use now: the next accepted socket is in the reserve
        fd = w1.get_extra_info("socket").fileno()
        monkeypatch.setattr(limits.resource, "getrlimit", lambda _: (fd + limits.MIN_FD_RESERVE, 1 << 20))
        caplog.set_level(logging.WARNING, logger="kshare.wire")
        refused = []
        for _ in range(8):
            r, w = await asyncio.open_connection("127.0.0.1", lst.port)
            refused.append(await closed(r))
            w.close()
        assert all(refused) and lst.refused == 8
        lines = [r for r in caplog.records if "open files nearly exhausted" in r.getMessage()]
        assert 1 <= len(lines) <= 5  # rate-limited
        assert await answered(r1, w1)  # the connection already open is served
        w1.close()
    finally:
        await lst.stop()


def test_the_reserve_is_a_tenth_of_the_limit_or_64() -> None:
    assert limits.fd_reserve(256) == 64 and limits.fd_reserve(100_000) == 10_000


def test_overrides_parse_as_kafka_writes_them() -> None:
    assert parse_count_overrides("") == {}
    assert parse_count_overrides("127.0.0.1:200, broker-7:5,[::1]:3") == {"127.0.0.1": 200, "broker-7": 5, "::1": 3}
    with pytest.raises(ValueError, match="host:count"):
        parse_count_overrides("127.0.0.1")


def test_bad_overrides_and_sessions_below_the_group_size_are_one_line_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092",
                                       "max.connections.per.ip.overrides": "127.0.0.1:many"})
    assert "max.connections.per.ip.overrides" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="group.share.max.share.sessions must be greater than or equal to "
                                          "group.share.max.size"):
        load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092", "group.share.max.share.sessions": "10"})
    with pytest.raises(ConfigError, match="queued.max.request.bytes must be -1"):
        load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092", "queued.max.request.bytes": "4096"})


async def test_a_client_pipelining_without_end_is_read_ahead_at_most_a_bounded_amount() -> None:
    """Requests held in order (a slow handler): while a request holds ordering the connection
    reads ahead at most READ_AHEAD_BYTES (and the last read) and then pauses the transport, so a
    flood of small frames stays in the kernel's buffers."""
    from kshare_sidecar.wire import Listener, frame
    from kshare_sidecar.wire.connection import READ_AHEAD_BYTES

    async def slow(conn, payload: bytes, release) -> bytes:
        await asyncio.sleep(0.005)
        return frame(b"\0\0\0\0ok")

    lst = Listener(slow, "127.0.0.1", 0)
    await lst.start()
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
        request = frame(b"\0\x12\0\x03" + b"\0" * 40)
        loop = asyncio.get_running_loop()
        end, written = loop.time() + 2.0, 0
        while loop.time() < end:  # write 2 s worth, never reading an answer
            writer.write(request * 1000)
            written += 1000 * len(request)
            try:
                await asyncio.wait_for(writer.drain(), 0.2)
            except TimeoutError:
                pass
        (conn,) = lst.connections.values()
        held = conn._waiting_bytes + conn._decoder.buffered
        assert written > 4 * 1024 * 1024
        assert held <= READ_AHEAD_BYTES + 256 * 1024, held  # read ahead, and one read (asyncio's 256 KiB)
        writer.transport.abort()
    finally:
        await lst.stop()


async def test_partial_frames_on_many_connections_hold_at_most_the_memory_pool() -> None:
    """queued.max.request.bytes: a connection announcing a large frame reserves it; the next such
    connection is not read until the pool has room, while complete small requests are served."""
    from kshare_sidecar.wire.limits import RequestMemoryPool

    mib = 1024 * 1024
    pool = RequestMemoryPool(3 * mib)
    lst = await listener(max_frame_bytes=2 * mib, memory_pool=pool)
    try:
        big = (2 * mib).to_bytes(4, "big") + b"\0" * 1000
        _ra, wa = await asyncio.open_connection("127.0.0.1", lst.port)
        wa.write(big)
        await wa.drain()
        for _ in range(100):
            if pool.used:
                break
            await asyncio.sleep(0.02)
        assert pool.used == 2 * mib
        _rb, wb = await asyncio.open_connection("127.0.0.1", lst.port)
        wb.write(big)
        await wb.drain()
        for _ in range(100):
            if pool.waits:
                break
            await asyncio.sleep(0.02)
        assert pool.waits == 1 and pool.used == 2 * mib  # B waits: it is not read meanwhile
        rc, wc = await asyncio.open_connection("127.0.0.1", lst.port)
        assert await answered(rc, wc)  # a complete small request needs no reservation
        wa.transport.abort()  # A goes away: its reservation is released and B gets one
        for _ in range(100):
            if pool.used == 2 * mib and not pool._waiters:
                break
            await asyncio.sleep(0.02)
        assert pool.used == 2 * mib and not pool._waiters
        wb.transport.abort()
        wc.close()
        for _ in range(100):
            if pool.used == 0:
                break
            await asyncio.sleep(0.02)
        assert pool.used == 0
    finally:
        await lst.stop()
