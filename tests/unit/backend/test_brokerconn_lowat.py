"""Large answers are received with the socket's receive low-water mark raised (fewer wake-ups per
answer), never above what the answer still lacks: every answer arrives whole, a small one after
a large one does not wait for bytes that never come, and the mark is back at one byte between
answers."""

from __future__ import annotations

import asyncio
import socket

from kshare_sidecar.backend import brokerconn
from kshare_sidecar.backend.brokerconn import BrokerConn


def _request(tag: int) -> bytes:
    # api key, version, correlation id (replaced by BrokerConn), then a tag the fake broker reads
    return (1).to_bytes(2, "big") + (4).to_bytes(2, "big") + (0).to_bytes(4, "big") + tag.to_bytes(4, "big")


class _Broker:
    """Answers request ``tag`` with ``sizes[tag]`` bytes of body, written in 64 KiB pieces; a piece
    waits for ``gate`` when the answer's ``hold_at`` byte is reached."""

    def __init__(self, sizes: dict[int, int], hold_at: dict[int, int] | None = None) -> None:
        self.sizes, self.hold_at = sizes, hold_at or {}
        self.gate = asyncio.Event()
        self.held = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                payload = await reader.readexactly(size)
                cid, tag = payload[4:8], int.from_bytes(payload[8:12], "big")
                frame = (4 + self.sizes[tag]).to_bytes(4, "big") + cid + _expected(tag, self.sizes[tag])
                for at in range(0, len(frame), 65536):
                    if at >= self.hold_at.get(tag, len(frame)) and not self.gate.is_set():
                        self.held.set()
                        await self.gate.wait()
                    writer.write(frame[at:at + 65536])
                    await writer.drain()
                    await asyncio.sleep(0)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass


def _expected(tag: int, size: int) -> bytes:
    body = bytes((tag + i) % 251 for i in range(256)) * (size // 256 + 1)
    return body[:size]


async def _with_broker(broker: _Broker, fn) -> None:
    server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
    conn = BrokerConn("127.0.0.1", server.sockets[0].getsockname()[1], node_id=1)
    try:
        await asyncio.wait_for(fn(conn), 20)
    finally:
        await conn.close()
        server.close()


def _lowat(conn: BrokerConn) -> int:
    proto = conn._proto
    assert proto is not None and proto._sock is not None
    return proto._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)


def test_large_and_small_answers_arrive_whole_and_the_mark_returns_to_one_byte():
    sizes = {0: 3 * 1024 * 1024 + 17, 1: 10, 2: brokerconn._LOWAT_MIN - 5, 3: brokerconn._LOWAT_CAP + 1, 4: 3}

    async def run(conn: BrokerConn) -> None:
        for tag in (0, 1, 2, 3, 4):  # one at a time: a small answer right after a large one
            answer = await conn.request(_request(tag), timeout_s=15)
            assert answer[4:] == _expected(tag, sizes[tag])
            assert _lowat(conn) == 1
        # pipelined: answers back to back in the socket, large and small interleaved
        futures = [await conn.send(_request(tag)) for tag in (0, 1, 3, 4, 2)]
        for tag, fut in zip((0, 1, 3, 4, 2), futures):
            assert (await fut)[4:] == _expected(tag, sizes[tag])
        assert _lowat(conn) == 1

    asyncio.run(_with_broker(_Broker(sizes), run))


def test_the_mark_is_raised_while_a_large_answer_is_half_received():
    size = brokerconn._LOWAT_CAP + 2 * 1024 * 1024
    broker = _Broker({0: size}, hold_at={0: 512 * 1024})

    async def run(conn: BrokerConn) -> None:
        fut = await conn.send(_request(0))
        await broker.held.wait()
        await asyncio.sleep(0.05)  # what was written before the hold is in (or on its way)
        assert _lowat(conn) == brokerconn._LOWAT_CAP  # more than the cap still to come
        broker.gate.set()
        assert (await asyncio.wait_for(fut, 15))[4:] == _expected(0, size)
        assert _lowat(conn) == 1

    asyncio.run(_with_broker(broker, run))
