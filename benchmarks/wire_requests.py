"""What the connection layer alone costs per request: ``wire.Connection`` serving a handler that
answers at once (as a heartbeat or a metadata answer from cache does), over loopback.

A child process keeps C connections and sends N requests one after the other, each waiting for
its answer (80-byte requests, 100-byte answers); the sidecar side is this process's event loop.
Printed per round: the server's CPU microseconds per request (``time.process_time`` over the
round: the event loop, the socket reads and writes, the connection's tasks and futures — no
request decoding, no API work) and the wall time per request. The spread between rounds on a
quiet host is a few microseconds; compare two trees by running the script from each, alternating
(``PYTHONPATH=/path/to/other/tree python benchmarks/wire_requests.py``).

``--wait``: the handler answers after one pass of the event loop, holding request ordering
meanwhile — what the connection costs a request that waits on I/O (a ShareFetch's state write, a
forwarded request): the wait for its release, and the written answer from the write loop.

Usage: python benchmarks/wire_requests.py [--quick] [--requests N] [--connections C] [--rounds R] [--wait] [--out DIR]
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import socket
import statistics
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import base_parser, finish, loadavg, machine  # noqa: E402

REQUEST = struct.pack(">i", 80) + b"\x01" * 80
ANSWER = struct.pack(">i", 100) + b"\x00" * 100


def _client(port: int, requests: int, connections: int) -> None:
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    for s in socks:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(requests):
        s = socks[i % connections]
        s.sendall(REQUEST)
        got = 0
        while got < len(ANSWER):
            chunk = s.recv(65536)
            if not chunk:
                raise SystemExit("the server closed a connection")
            got += len(chunk)
    for s in socks:
        s.close()


async def _answer(conn, frame: bytes, release) -> bytes:
    return ANSWER


async def _answer_later(conn, frame: bytes, release) -> bytes:
    """Answers after one pass of the event loop, holding request ordering meanwhile: the shape of
    a request that waits for a backend answer or a state write (``--wait``)."""
    await asyncio.sleep(0)
    return ANSWER


async def _rounds(requests: int, connections: int, rounds: int, wait: bool = False) -> list[dict]:
    from kshare_sidecar.wire.connection import Connection

    handler = _answer_later if wait else _answer

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await Connection(reader, writer, handler).run()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    ctx = mp.get_context("fork")

    async def one(n: int) -> tuple[float, float]:
        cpu, wall = time.process_time(), time.monotonic()
        child = ctx.Process(target=_client, args=(port, n, connections))
        child.start()
        while child.is_alive():
            await asyncio.sleep(0.05)
        if child.exitcode:
            raise SystemExit(f"the client failed (exit {child.exitcode})")
        return time.process_time() - cpu, time.monotonic() - wall

    out = []
    try:
        await one(min(requests, 2000))  # warm-up: connection set-up, first allocations
        for _ in range(rounds):
            cpu_s, wall_s = await one(requests)
            out.append({"cpu_us_per_request": round(cpu_s / requests * 1e6, 1),
                        "wall_us_per_request": round(wall_s / requests * 1e6, 1)})
            print(f"server CPU {out[-1]['cpu_us_per_request']:6.1f} µs per request, wall "
                  f"{out[-1]['wall_us_per_request']:6.1f} µs", flush=True)
    finally:
        server.close()
        await server.wait_closed()
    return out


def main() -> None:
    ap = base_parser(__doc__)
    ap.add_argument("--requests", type=int, default=None, help="requests per round (default 20,000; --quick 5,000)")
    ap.add_argument("--connections", type=int, default=4, help="client connections, used in turn (default 4)")
    ap.add_argument("--rounds", type=int, default=5, help="measured rounds (default 5)")
    ap.add_argument("--wait", action="store_true", help="the handler answers after one pass of the event loop, "
                                                        "holding ordering meanwhile (a request waiting on I/O)")
    args = ap.parse_args()
    requests = args.requests or (5_000 if args.quick else 20_000)
    load = loadavg()
    rounds = asyncio.run(_rounds(requests, args.connections, args.rounds, args.wait))
    cpu = [r["cpu_us_per_request"] for r in rounds]
    finish({"scenario": "wire_requests", "machine": machine(), "requests": requests, "wait": args.wait,
            "connections": args.connections, "rounds": rounds, "cpu_us_per_request_median": statistics.median(cpu),
            "cpu_us_per_request_min": min(cpu), "loadavg_before": load, "loadavg_after": loadavg()},
           args.out, "wire_requests")


if __name__ == "__main__":
    main()
