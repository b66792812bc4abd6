"""The listener's admission limits that are not a plain count: per-address overrides of
max.connections.per.ip, the process's open-file limit, and the memory that partial request frames
may hold across all connections (Kafka's queued.max.request.bytes).

Why the open-file limit matters: every client connection is a file descriptor, and so is every
connection the sidecar opens itself — to the backend (reads, state writes, a client's pass-through
upstreams), to its metrics scrapers, to its log files. A flood of client connections that used the
last descriptors would not be refused by anything: asyncio's accept loop would log an error per
second and the sidecar's own next backend connection would fail with EMFILE, taking every client's
share-partitions down with it. So a new client connection is closed, like one over
max.connections, while fewer than a reserve of descriptors would be left. The socket just accepted
tells how many are in use without a scan: Linux hands out the lowest free descriptor, so its number
is at least the count of descriptors below it, all of which are open.

At start the soft limit is raised to the hard one (as the JVM does for a Kafka broker), so the
reserve only bites where an operator set the hard limit low.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import socket

log = logging.getLogger("kshare.wire")

#: descriptors kept for the sidecar's own connections and files: this many, or a tenth of the limit
MIN_FD_RESERVE = 64

_raised = False


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (once per process); the soft limit in force."""
    global _raised
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if not _raised:
        _raised = True
        if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
                log.info("open files limit raised from %d to %d (the hard limit)", soft, hard)
                soft = hard
            except (ValueError, OSError) as exc:
                log.info("open files limit stays at %d (raising it to %d failed: %s)", soft, hard, exc)
    return soft


def fd_reserve(soft_limit: int) -> int:
    return max(MIN_FD_RESERVE, soft_limit // 10)


def fds_nearly_exhausted(fd: int) -> tuple[bool, int]:
    """Whether a connection whose socket is descriptor ``fd`` would leave fewer than the reserve
    free; also the soft limit read (per call: an operator may change it with prlimit)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or fd < 0:
        return False, soft
    return fd >= soft - fd_reserve(soft), soft


def resolve_overrides(overrides: dict[str, int]) -> dict[str, int]:
    """max.connections.per.ip.overrides by IP address: names are resolved once (every address a
    name has gets its count, as Kafka resolves its override hosts)."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            out[str(ipaddress.ip_address(host))] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            log.warning("max.connections.per.ip.overrides: %s does not resolve (%s); its override is ignored",
                        host, exc)
            continue
        for info in infos:
            out[str(info[4][0])] = count
    return out


class RequestMemoryPool:
    """Kafka's ``queued.max.request.bytes``: the bytes that request frames being received may hold,
    summed over every connection. A connection reserves a frame's announced size once its size
    prefix is read and releases it when the frame is complete (or the connection ends); while the
    pool cannot hold the next frame, that connection is not read (Kafka mutes the channel), so
    clients announcing 100 MiB frames on many connections cannot make the sidecar buffer more than
    the pool. A frame is always admitted into an empty pool, so none waits forever. ``limit`` <= 0:
    no pool (Kafka's default, -1)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.waits = 0  # reservations that had to wait (a gauge of memory pressure, for tests)
        self._waiters: list[asyncio.Future[None]] = []

    def try_acquire(self, n: int) -> bool:
        """Take ``n`` bytes if the pool holds them now (or is empty); False leaves it to :meth:`acquire`."""
        if self.limit <= 0 or n <= 0:
            return True
        if self.used and self.used + n > self.limit:
            return False
        self.used += n
        return True

    async def acquire(self, n: int) -> None:
        if self.try_acquire(n):
            return
        self.waits += 1
        while not self.try_acquire(n):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def release(self, n: int) -> None:
        if self.limit <= 0 or n <= 0:
            return
        self.used = max(0, self.used - n)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
