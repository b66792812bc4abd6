"""Per-connection limits on 127.0.0.1: idle and partial-frame timeouts, connection caps, and the
rate-limited "closing" lines a flood of bad frames produces. Assertions count events, not time."""

from __future__ import annotations

import asyncio
import gc
import logging
import struct
import uuid

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from kshare_sidecar.api import Dispatcher, InMemoryTopicCatalog, NodeIdentity, build_registry
from kshare_sidecar.backend.types import TopicInfo
from kshare_sidecar.wire import Listener, codec
from kshare_sidecar.ratelog import RateLimitedLog

pytestmark = pytest.mark.timeout(30)
API_VERSIONS = codec.encode_request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 1)


async def listener(**limits) -> Listener:
    dispatcher = Dispatcher(build_registry(InMemoryTopicCatalog([TopicInfo("t", uuid.uuid4(), 1)])),
                            NodeIdentity(1, "127.0.0.1", 0))
    lst = Listener(dispatcher, "127.0.0.1", 0, **limits)
    await lst.start()
    return lst


async def closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), 10) == b""
    except ConnectionError:
        return True


async def answered(reader, writer) -> bool:
    writer.write(API_VERSIONS)
    size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
    return len(await reader.readexactly(size)) == size


async def test_idle_connection_is_closed_after_connections_max_idle() -> None:
    lst = await listener(idle_timeout_s=1.0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
        assert await answered(reader, writer)
        assert await closed(reader)
        writer.close()
    finally:
        await lst.stop()


async def test_slow_loris_partial_frame_is_closed_after_request_read_timeout() -> None:
    lst = await listener(read_timeout_s=0.2)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
        writer.write(struct.pack(">i", 1000) + b"\x00\x12")  # a 1000-byte frame that never comes
        for _ in range(3):
            await asyncio.sleep(0.05)
            if writer.is_closing():
                break
            writer.write(b"\x00")  # trickling bytes does not keep it alive
        assert await closed(reader)
        assert not lst.connections or all(c.closed for c in lst.connections.values())
        writer.close()
    finally:
        await lst.stop()


async def test_max_connections_per_ip_closes_the_extra_connection() -> None:
    lst = await listener(max_connections_per_ip=2)
    try:
        conns = [await asyncio.open_connection("127.0.0.1", lst.port) for _ in range(2)]
        for r, w in conns:
            assert await answered(r, w)
        r3, w3 = await asyncio.open_connection("127.0.0.1", lst.port)
        assert await closed(r3)
        assert lst.refused == 1
        conns[0][1].close()
        await asyncio.sleep(0.1)
        r4, w4 = await asyncio.open_connection("127.0.0.1", lst.port)
        assert await answered(r4, w4)  # the freed slot is usable again
        for _, w in (*conns[1:], (r3, w3), (r4, w4)):
            w.close()
    finally:
        await lst.stop()


async def test_bad_frames_then_eof_leave_no_unretrieved_task_exceptions(caplog, monkeypatch) -> None:
    from kshare_sidecar.wire import connection

    monkeypatch.setattr(connection, "closing", RateLimitedLog(connection.log))  # a fresh budget
    lst = await listener()
    try:
        with caplog.at_level(logging.INFO):
            for i in range(40):
                reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
                # ShareFetch v1 cut short (BufferUnderflow in kio), then EOF at once
                writer.write(codec.frame(struct.pack(">hhih", 3, 12, i, -1) + b"\x00\x05"))
                writer.write_eof()
                await closed(reader)
                writer.close()
            await asyncio.sleep(0.1)
            gc.collect()
        assert not [r for r in caplog.records if "never retrieved" in r.getMessage() or r.exc_info]
        closing = [r for r in caplog.records if "closing" in r.getMessage()]
        assert 1 <= len(closing) <= 6  # rate-limited: a burst, then one line carrying the count
    finally:
        await lst.stop()


def test_rate_limited_log_counts_what_it_suppresses(caplog) -> None:
    now = [0.0]
    rl = RateLimitedLog(logging.getLogger("t"), interval_s=10, burst=2, clock=lambda: now[0])
    with caplog.at_level(logging.INFO):
        written = [rl.log("k", logging.WARNING, "bad %d", i) for i in range(5)]
        now[0] = 11
        rl.log("k", logging.WARNING, "bad %d", 5)
    assert written == [True, True, False, False, False]
    assert caplog.records[-1].getMessage() == "bad 5 (3 similar lines suppressed)"


async def test_a_peer_that_never_reads_is_closed_after_connections_max_idle() -> None:
    import socket

    async def one_megabyte(conn, frame, release) -> bytes:  # any frame: a 1 MiB answer
        return codec.frame(frame[4:8] + bytes(1 << 20))

    lst = Listener(one_megabyte, "127.0.0.1", 0, idle_timeout_s=0.5)
    await lst.start()
    try:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", lst.port))
        # 40 MiB of answers the client never reads: the server's writes back up
        sock.sendall(b"".join(codec.frame(struct.pack(">hhi", 18, 0, i)) for i in range(40)))
        await asyncio.sleep(0.2)
        (conn,) = lst.connections.values()
        assert await asyncio.wait_for(_until_closed(lst), 20)
        assert "did not read its responses" in (conn.close_reason or "")
        sock.close()
    finally:
        await lst.stop()


async def _until_closed(lst: Listener) -> bool:
    while lst.connections:
        await asyncio.sleep(0.05)
    return True


async def test_a_closing_frame_behind_a_parked_long_poll_closes_at_once() -> None:
    """Found by make fuzz: a ShareFetch parked for MaxWaitMs (24 days), then a frame that closes
    the connection. The close waited behind the parked response and ignored the peer's EOF."""
    from kshare_sidecar.wire import CloseConnection

    async def handler(conn, frame, release) -> bytes:
        key = codec.peek(frame).api_key
        if key == 78:  # a long poll: ordering released, then it only waits
            release()
            await asyncio.sleep(3600)
        if key == 0:
            raise CloseConnection("Produce with acks=0")
        return codec.frame(frame[4:8])

    lst = Listener(handler, "127.0.0.1", 0)
    await lst.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
        writer.write(b"".join(codec.frame(struct.pack(">hhi", key, 0, i)) for i, key in enumerate((18, 78, 18, 0, 18))))
        head = await asyncio.wait_for(reader.readexactly(8), 10)
        assert head == struct.pack(">ii", 4, 0)  # the answer before the parked one
        assert await closed(reader)  # without waiting for the long poll, without our EOF
        writer.close()
    finally:
        await lst.stop()


@pytest.mark.parametrize("key,value", [("max.connections.per.ip", "0"), ("connections.max.idle.ms", "soon"),
                                       ("request.read.timeout.ms", "-5")])
def test_bad_listener_limits_are_one_line_naming_the_key(key: str, value: str) -> None:
    from kshare_sidecar.config import ConfigError, load_config

    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092", key: value})
    assert key in str(info.value) and "\n" not in str(info.value)


async def test_stop_cancels_a_connection_stuck_in_its_close_callback_cleanly(caplog) -> None:
    """A connection whose close callback outlives the grace (a share session release waiting on
    the backend) is cancelled by stop(); its task must end without an "Exception in callback"
    from asyncio's stream machinery (the demo printed one)."""
    async def handler(conn, frame, release) -> bytes:
        conn.add_close_callback(lambda _c: asyncio.sleep(3600))
        return codec.frame(frame[4:8])

    loop_errors: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: loop_errors.append(ctx))
    lst = Listener(handler, "127.0.0.1", 0)
    await lst.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
    writer.write(codec.frame(struct.pack(">hhi", 18, 0, 1)))
    await asyncio.wait_for(reader.readexactly(8), 10)
    tasks = set(lst._tasks)
    await asyncio.wait_for(lst.stop(grace=0.2), 5)
    writer.close()
    await asyncio.sleep(0.05)  # let asyncio run the tasks' done callbacks
    assert tasks and all(t.done() and not t.cancelled() for t in tasks)
    assert not loop_errors, loop_errors


async def test_a_peer_leaving_during_a_slow_request_closes_at_once_and_the_request_finishes() -> None:
    """Found by make fuzz: DeleteGroups / AlterShareGroupOffsets waiting on a slow state write
    kept a connection open for >10 s after its client left (the socket was not read while the
    request held ordering). Now EOF is seen while waiting; the request itself is not cancelled
    (it may be changing state) and completes unobserved."""
    finished = asyncio.Event()

    async def handler(conn, frame, release) -> bytes:
        await asyncio.sleep(2)  # a state write; ordering is not released
        finished.set()
        return codec.frame(frame[4:8])

    lst = Listener(handler, "127.0.0.1", 0)
    await lst.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
        writer.write(codec.frame(struct.pack(">hhi", 42, 2, 1)) + codec.frame(struct.pack(">hhi", 18, 0, 2)))
        await asyncio.sleep(0.2)
        writer.write_eof()
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed without an answer
        assert loop.time() - started < 1.5
        await asyncio.wait_for(finished.wait(), 5)  # the request ran to its end
        writer.close()
    finally:
        await lst.stop()


async def test_many_requests_arm_one_deadline_timer(monkeypatch) -> None:
    """Deadlines are one timer per connection, moved on by activity without a new timer per read."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    real = loop.call_at

    def counting(when, callback, *args, **kwargs):
        if getattr(callback, "__name__", "") == "_on_timer":
            armed.append(when)
        return real(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting)
    lst = await listener(idle_timeout_s=30.0, read_timeout_s=20.0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
        for _ in range(200):
            assert await answered(reader, writer)
        writer.close()
        # the idle deadline, then the (earlier) read deadline of the first frame: none after that
        assert len(armed) <= 2, armed
    finally:
        await lst.stop()


async def test_requests_the_stream_read_before_the_take_over_are_answered(monkeypatch) -> None:
    """Bytes the listener's stream read before the connection took the transport over (a client
    that writes its first requests with the connect, during a TLS listener's handshake) are not
    lost, nor is the EOF that followed them."""
    from kshare_sidecar.wire.connection import Connection

    run = Connection.run

    async def late(self: Connection) -> None:
        await asyncio.sleep(0.3)  # the requests and the EOF reach the stream first
        assert self._stream is not None and len(self._stream._buffer) == 3 * len(API_VERSIONS)
        await run(self)

    monkeypatch.setattr(Connection, "run", late)
    lst = await listener()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", lst.port)
        writer.write(API_VERSIONS * 3)
        writer.write_eof()
        for _ in range(3):
            size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
            await reader.readexactly(size)
        writer.close()
    finally:
        await lst.stop()
