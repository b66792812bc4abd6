"""A delaying TCP proxy for the lab (tests/e2e/netlab.py): a slow link without netem (this
kernel has none). It stands in for hosts — one listening address per target — and every byte a
connection carries, either way, leaves ``delay`` milliseconds after it arrived, in order; the
delay is chosen per *client address* (a sidecar's link to the backend turns slow, nobody
else's) from a JSON file it re-reads every 100 ms: ``{"10.77.0.5": 300}``.

Usage: python netlab_delay.py CONFIG LISTEN_IP:PORT:TARGET_HOST:TARGET_PORT [...]
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path


class Delays:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.by_source: dict[str, float] = {}
        self._mtime = 0.0

    async def watch(self) -> None:
        while True:
            try:
                mtime = self.path.stat().st_mtime
                if mtime != self._mtime:
                    self._mtime = mtime
                    self.by_source = {k: float(v) / 1000 for k, v in json.loads(self.path.read_text() or "{}").items()}
            except (OSError, ValueError):
                pass
            await asyncio.sleep(0.1)

    def of(self, source: str) -> float:
        return self.by_source.get(source, 0.0)


async def delayed_pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay()`` seconds after it was read, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()

    async def feed() -> None:
        try:
            while data := await reader.read(65536):
                queue.put_nowait((loop.time() + delay(), data))
        except (ConnectionError, OSError):
            pass
        queue.put_nowait((loop.time() + delay(), None))

    feeder = asyncio.create_task(feed())
    try:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        feeder.cancel()
        writer.close()


async def serve(listen: str, port: int, host: str, target: int, delays: Delays) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        source = writer.get_extra_info("peername")[0]
        try:
            up_reader, up_writer = await asyncio.open_connection(host, target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(delayed_pipe(reader, up_writer, lambda: delays.of(source)),
                             delayed_pipe(up_reader, writer, lambda: delays.of(source)))
    return await asyncio.start_server(handle, listen, port)


async def main(config: str, specs: list[str]) -> None:
    delays = Delays(Path(config))
    watcher = asyncio.create_task(delays.watch())
    servers = []
    for spec in specs:
        listen, port, host, target = spec.split(":")
        servers.append(await serve(listen, int(port), host, int(target), delays))
    print("delaying", " ".join(specs), flush=True)
    await asyncio.gather(watcher, *(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
