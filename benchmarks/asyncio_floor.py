"""What one small request and its answer cost an asyncio server that does nothing else.

The floor under the sidecar's idle CPU (benchmarks/scale.py: 2,000 members heartbeating every 5 s
are 400 requests a second, and "idle CPU <= 5 % of a core" allows 125 us each). A server process
answers 60-byte frames with 40-byte ones, without any work per request, in two shapes:

- ``protocol``: an ``asyncio.Protocol`` answering from ``data_received`` (no task, no stream): the
  least asyncio can do per request — one readiness wake-up, one ``recv``, one ``send``;
- ``streams``: a ``StreamReader`` read loop that starts a task per request and writes its answer
  when the task is done (the shape of ``wire/connection.py`` until 2026-11-30);
- ``connection``: the sidecar's own ``wire.Listener`` and ``Connection`` with a handler that
  answers at once (request ordering, backpressure, deadlines: everything but the API work).

A client process keeps N connections, each sending one frame, waiting for the answer and
pausing, at a fixed total rate (like the scale benchmark's load generators). Reported: the
server's CPU (user + system, from /proc) per request. Run it on the machine the other figures
come from; nothing else should run meanwhile.

Usage: python benchmarks/asyncio_floor.py [--rate 400] [--connections 200] [--seconds 10] [--rounds 2] [--shapes ...]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import time

_ANSWER_BODY = b"x" * 32


def _answer(frame: bytes) -> bytes:
    return (4 + len(_ANSWER_BODY)).to_bytes(4, "big") + frame[:4] + _ANSWER_BODY


class _Answering(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        while len(buf) >= 4:
            size = int.from_bytes(buf[:4], "big")
            if len(buf) < 4 + size:
                break
            self.transport.write(_answer(buf[4:4 + size]))  # type: ignore[attr-defined]
            buf = buf[4 + size:]
        self.buf = buf


async def _handle(frame: bytes) -> bytes:
    return _answer(frame)


async def _stream_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    loop = asyncio.get_running_loop()
    while True:
        data = await reader.read(65536)  # one frame per read: each client waits for its answer
        if not data:
            writer.close()
            return
        task = loop.create_task(_handle(data[4:]))
        await asyncio.sleep(0)  # the task's first step runs; it is done (as a heartbeat's is)
        writer.write(task.result())


async def _connection_handler(conn: object, frame: bytes, release: object) -> bytes:
    return _answer(frame)  # the connection hands over the frame without its size prefix


def _serve(shape: str, ports: mp.Queue) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        if shape == "connection":
            from kshare_sidecar.wire import Listener

            listener = Listener(_connection_handler, "127.0.0.1", 0)
            await listener.start()
            ports.put(listener.port)
        else:
            if shape == "protocol":
                server = await loop.create_server(_Answering, "127.0.0.1", 0)
            else:
                server = await asyncio.start_server(_stream_connection, "127.0.0.1", 0)
            ports.put(server.sockets[0].getsockname()[1])
        await asyncio.sleep(3600)  # killed by the measuring process

    asyncio.run(main())


async def _load(port: int, connections: int, rate: float, seconds: float) -> int:
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(connections)]
    frame = (56).to_bytes(4, "big") + b"y" * 56
    interval = connections / rate
    done = 0

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
        nonlocal done
        await asyncio.sleep(delay)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            writer.write(frame)
            await reader.read(100)
            done += 1
            await asyncio.sleep(interval)

    await asyncio.gather(*(one(r, w, i * interval / connections) for i, (r, w) in enumerate(conns)))
    for _, w in conns:
        w.close()
    return done


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(shape: str, connections: int, rate: float, seconds: float) -> dict:
    ctx = mp.get_context("spawn")
    ports: mp.Queue = ctx.Queue()
    server = ctx.Process(target=_serve, args=(shape, ports), daemon=True)
    server.start()
    try:
        port = ports.get(timeout=30)
        time.sleep(0.5)
        before = _cpu_s(server.pid)
        requests = asyncio.run(_load(port, connections, rate, seconds))
        cpu = _cpu_s(server.pid) - before
    finally:
        server.kill()
        server.join()
    return {"shape": shape, "requests": requests, "server_cpu_s": round(cpu, 2),
            "us_per_request": round(cpu / requests * 1e6) if requests else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=400.0, help="requests per second, all connections together")
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the shapes")
    ap.add_argument("--shapes", default="protocol,streams,connection", help="which shapes, comma-separated")
    args = ap.parse_args()
    for _ in range(args.rounds):
        for shape in args.shapes.split(","):
            r = measure(shape, args.connections, args.rate, args.seconds)
            print(f"{shape:>8}: {r['requests']} requests, server CPU {r['server_cpu_s']} s, "
                  f"{r['us_per_request']} us per request", flush=True)


if __name__ == "__main__":
    main()
