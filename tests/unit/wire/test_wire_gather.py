"""Writing a frame's pieces with one gathered send (wire/gather.py), over real loopback sockets."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from kshare_sidecar.wire import gather
from kshare_sidecar.wire.gather import write_pieces


class _Sink(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport


async def _pair() -> tuple[asyncio.WriteTransport, socket.socket]:
    a, b = socket.socketpair()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(_Sink, a)
    b.setblocking(False)
    return transport, b  # type: ignore[return-value]


async def _read(sock: socket.socket, n: int) -> bytes:
    loop = asyncio.get_running_loop()
    out = bytearray()
    while len(out) < n:
        out += await loop.sock_recv(sock, 1 << 20)
    return bytes(out)


async def test_small_pieces_go_in_one_send_and_arrive_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    transport, peer = await _pair()
    sends: list[int] = []
    real = gather._send_gathered
    monkeypatch.setattr(gather, "_send_gathered", lambda t, p: sends.append(len(p)) or real(t, p))
    body = os.urandom(5000)
    pieces = [b"head", memoryview(body)[100:4000], bytearray(b"tail")]
    assert write_pieces(transport, pieces) == 0  # nothing buffered: nothing copied
    assert sends == [3]
    assert await _read(peer, 4 + 3900 + 4) == b"head" + body[100:4000] + b"tail"
    transport.close()
    peer.close()


async def test_what_the_socket_does_not_take_is_buffered_in_order() -> None:
    transport, peer = await _pair()
    big = os.urandom(8 << 20)  # more than a socket buffer takes at once
    pieces = [b"a" * 10, memoryview(big), b"z" * 10, memoryview(big)[:1000]]
    buffered = write_pieces(transport, pieces)
    assert 0 < buffered < len(big) + 1020
    got = await _read(peer, 10 + len(big) + 10 + 1000)
    assert got == b"a" * 10 + big + b"z" * 10 + big[:1000]
    transport.close()
    peer.close()


async def test_behind_a_buffer_the_pieces_queue_behind_it() -> None:
    transport, peer = await _pair()
    first = os.urandom(8 << 20)
    transport.write(first)  # leaves most of it buffered
    assert transport.get_write_buffer_size() > 0
    write_pieces(transport, [b"x", b"y", memoryview(b"zz")])
    assert await _read(peer, len(first) + 4) == first + b"xyzz"
    transport.close()
    peer.close()


def test_a_gathering_writelines_is_used_as_it_is() -> None:
    class Gathering(asyncio.WriteTransport):
        def __init__(self) -> None:
            super().__init__()
            self.got: list[bytes] = []

        def writelines(self, list_of_data):  # type: ignore[no-untyped-def, override]
            self.got.append(b"".join(list_of_data))

    t = Gathering()
    assert write_pieces(t, [b"a", memoryview(b"bc")]) == 0
    assert t.got == [b"abc"]
