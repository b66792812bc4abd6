"""Published ports on the lab's "Docker host" (tests/e2e/netlab.py): what docker-proxy does for
``ports: ["9192:9192"]`` — accept on the host's port, open a connection to the container's port,
copy bytes both ways.

Usage: python netlab_proxy.py HOST_PORT:TARGET_HOST:TARGET_PORT [...]   (binds 127.0.0.1)
"""

from __future__ import annotations

import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def serve(port: int, host: str, target: int) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
    return await asyncio.start_server(handle, "127.0.0.1", port)


async def main(specs: list[str]) -> None:
    servers = []
    for spec in specs:
        port, host, target = spec.split(":")
        servers.append(await serve(int(port), host, int(target)))
    print("proxying", " ".join(specs), flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
