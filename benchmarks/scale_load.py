"""The scale benchmark's load generator (benchmarks/scale.py starts one or two of these).

Thousands of simulated share-group members in one asyncio process, speaking the protocol
directly (kshare_sidecar.client's request builders and connections — not client processes):
each member has its own TCP connection to the sidecar, joins its group with a
ShareGroupHeartbeat and then heartbeats at the interval the coordinator tells it (Kafka's
default 5 s), rejoining after UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH and retrying coordinator
and connection errors after 100 ms, as a share consumer does. Busy members also fetch
(ShareFetch with the previous response's records acknowledged, ACCEPT) at a fixed pace.

Commands arrive one JSON object per line on stdin; each is answered by one JSON line on stdout:

- ``{"cmd": "join", "members": [[group, member_id, [topic, ...]], ...], "partitions": {group: n}}``:
  start them; answered once every group's members hold all ``n`` partitions between them;
- ``{"cmd": "load", "groups": [...]}``: every member of those groups opens a share session on its
  assignment and closes it (one ShareFetch each way): their share-partitions are loaded;
- ``{"cmd": "busy", "groups": [...], "seconds": s, "pace_ms": p, "max_records": n}``: those groups'
  members fetch and acknowledge for ``s`` seconds; ShareFetch latencies and records;
- ``{"cmd": "stats"}``: heartbeat latencies (ms) and errors since the last ``stats``;
- ``{"cmd": "mark"}`` then ``{"cmd": "recovered"}``: how many members have had a successful
  heartbeat since the mark, and when the last of them had its first (wall clock);
- ``{"cmd": "quit"}``.

Usage (by benchmarks/scale.py): python benchmarks/scale_load.py HOST:PORT
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kio.schema.errors import ErrorCode

from kshare_sidecar.client import protocol
from kshare_sidecar.client.acks import AckBatch
from kshare_sidecar.client.conn import NodeConn

ACCEPT = 1
REJOIN = {ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch}
RETRY_S = 0.1


class Member:
    def __init__(self, gen: LoadGen, group: str, member_id: str, topics: list[str]) -> None:
        self.gen, self.group, self.member_id, self.topics = gen, group, member_id, tuple(topics)
        self.conn = NodeConn(-1, gen.host, gen.port, f"kshare-scale-{member_id[:8]}", timeout_s=30)
        self.epoch = 0
        self.interval_s = 5.0
        self.assignment: dict[uuid.UUID, frozenset[int]] = {}
        self.last_ok = 0.0
        self.task: asyncio.Task | None = None
        self.stop = False

    async def heartbeat_loop(self) -> None:
        # consumers start at different times: their heartbeats are spread evenly over the interval,
        # not 2,000 at once (members of one group still line up after a rebalance, as Kafka's do)
        await asyncio.sleep(self.gen.jitter() * self.gen.spread_s)
        while not self.stop:
            delay = await self.heartbeat_once()
            await asyncio.sleep(delay)

    async def heartbeat_once(self) -> float:
        req = protocol.heartbeat(self.group, self.member_id, self.epoch, self.topics if self.epoch == 0 else None)
        t0 = time.perf_counter()
        try:
            resp = await self.conn.call(req, timeout_s=30)
        except Exception:  # noqa: BLE001 - connection refused or dropped: a consumer retries
            self.gen.errors["connection"] = self.gen.errors.get("connection", 0) + 1
            return RETRY_S
        ms = (time.perf_counter() - t0) * 1000
        if resp.error_code != ErrorCode.none:
            name = resp.error_code.name
            self.gen.errors[name] = self.gen.errors.get(name, 0) + 1
            if resp.error_code in REJOIN:
                self.epoch = 0
            return RETRY_S
        self.gen.hb_ms.append(ms)
        self.gen.hb_at.append(time.time())
        self.epoch = int(resp.member_epoch)
        self.interval_s = resp.heartbeat_interval.total_seconds()
        if resp.assignment is not None:
            self.assignment = {tp.topic_id: frozenset(int(p) for p in tp.partitions)
                               for tp in resp.assignment.topic_partitions}
        now = time.time()
        if self.gen.mark and self.last_ok < self.gen.mark:
            self.gen.recovered.append(now)
        self.last_ok = now
        return self.interval_s

    def listed(self) -> list[tuple[uuid.UUID, int]]:
        return [(t, p) for t, ps in self.assignment.items() for p in sorted(ps)]

    async def fetch(self, epoch: int, *, acks=None, max_wait_ms: int = 0, max_records: int = 500,
                    listed=None, timeout_s: float = 60):
        await self.conn.ensure()
        version = self.conn.versions[protocol.SHARE_FETCH]
        req = protocol.share_fetch(version, group_id=self.group, member_id=self.member_id, epoch=epoch,
                                   max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=50 * 2**20,
                                   max_records=max_records, batch_size=max_records,
                                   listed=self.listed() if listed is None else listed, acks=acks or {},
                                   forgotten=[])
        return await self.conn.call(req, timeout_s=timeout_s)

    async def load(self) -> int:
        """Open a share session on the assignment (loading its share-partitions), then close it."""
        if not self.assignment:
            return 0
        for _attempt in range(5):
            try:
                # the sidecar reads every listed partition from the backend once: minutes on a busy host
                resp = await self.fetch(0, timeout_s=600)
                await self.fetch(-1, listed=[], timeout_s=600)
            except Exception:  # noqa: BLE001 - counted, tried again
                self.gen.errors["load"] = self.gen.errors.get("load", 0) + 1
                await asyncio.sleep(1)
                continue
            errors = [p.error_code for t in resp.responses for p in t.partitions if p.error_code != ErrorCode.none]
            if resp.error_code == ErrorCode.none and not errors:
                return len(self.listed())
            self.gen.errors["load"] = self.gen.errors.get("load", 0) + 1
        return 0

    async def busy(self, until: float, pace_s: float, max_records: int, out: dict) -> None:
        """Fetch and acknowledge until ``until``; one ShareFetch every ``pace_s`` at most."""
        epoch, acks = 0, {}
        while time.monotonic() < until:
            t0 = time.perf_counter()
            try:
                resp = await self.fetch(epoch, acks=acks, max_wait_ms=500, max_records=max_records)
            except Exception:  # noqa: BLE001
                out["errors"] += 1
                epoch, acks = 0, {}
                await asyncio.sleep(RETRY_S)
                continue
            took_ms = (time.perf_counter() - t0) * 1000
            if resp.error_code != ErrorCode.none:
                out["errors"] += 1
                epoch, acks = 0, {}
                await asyncio.sleep(RETRY_S)
                continue
            epoch = epoch + 1 if epoch < 2**31 - 1 else 1
            acks = {}
            for t in resp.responses:
                for p in t.partitions:
                    ranges = [AckBatch(int(a.first_offset), int(a.last_offset), (ACCEPT,))
                              for a in p.acquired_records]
                    if ranges:
                        acks[(t.topic_id, int(p.partition_index))] = ranges
                        out["records"] += sum(b.last_offset - b.first_offset + 1 for b in ranges)
            # The latency of a fetch that delivered: one that found the backlog consumed waits
            # out its MaxWaitMs by design (counted apart, it is not the sidecar's latency).
            if acks:
                out["fetch_ms"].append(took_ms)
            else:
                out["empty_fetches"] = out.get("empty_fetches", 0) + 1
            left = pace_s - (time.perf_counter() - t0)
            if left > 0:
                await asyncio.sleep(left)
        if acks or epoch:
            try:
                await self.fetch(-1, acks=acks, listed=[])
            except Exception:  # noqa: BLE001
                out["errors"] += 1


class LoadGen:
    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.host, self.port = host, int(port)
        self.members: dict[str, Member] = {}
        self.by_group: dict[str, list[Member]] = {}
        self.hb_ms: list[float] = []
        self.hb_at: list[float] = []  # when each answer came (wall clock)
        self.errors: dict[str, int] = {}
        self.mark = 0.0
        self.spread_s = 5.0  # Kafka's default group.share.heartbeat.interval.ms
        self.recovered: list[float] = []
        self._n = 0

    def jitter(self) -> float:
        self._n += 1
        return (self._n * 0.618) % 1.0

    async def join(self, members: list, partitions: dict[str, int]) -> dict:
        started = time.monotonic()
        new = []
        for group, member_id, topics in members:
            m = Member(self, group, member_id, topics)
            self.members[member_id] = m
            self.by_group.setdefault(group, []).append(m)
            m.task = asyncio.create_task(m.heartbeat_loop())
            new.append(m)
        while True:  # every new member in, and every group's partitions assigned
            missing = [g for g, n in partitions.items()
                       if sum(len(ps) for m in self.by_group.get(g, ()) for ps in m.assignment.values()) < n]
            if not missing and all(m.epoch > 0 for m in new):
                break
            await asyncio.sleep(0.5)
        return {"joined": len(members), "seconds": round(time.monotonic() - started, 2)}

    async def load(self, groups: list[str]) -> dict:
        started = time.monotonic()
        sem = asyncio.Semaphore(16)

        async def one(m: Member) -> int:
            async with sem:
                return await m.load()
        counts = await asyncio.gather(*(one(m) for g in groups for m in self.by_group.get(g, ())))
        return {"share_partitions": sum(counts), "seconds": round(time.monotonic() - started, 2),
                "errors": self.errors.get("load", 0)}

    async def busy(self, groups: list[str], seconds: float, pace_ms: int, max_records: int) -> dict:
        out = {"fetch_ms": [], "records": 0, "errors": 0}
        until = time.monotonic() + seconds
        started = time.monotonic()
        await asyncio.gather(*(m.busy(until, pace_ms / 1000, max_records, out)
                               for g in groups for m in self.by_group.get(g, ())))
        out["seconds"] = round(time.monotonic() - started, 2)
        return out

    def stats(self) -> dict:
        out = {"hb_ms": [round(x, 3) for x in self.hb_ms], "hb_at": [round(x, 3) for x in self.hb_at],
               "errors": dict(self.errors)}
        self.hb_ms, self.hb_at, self.errors = [], [], {}
        return out

    async def quit(self) -> None:
        for m in self.members.values():
            m.stop = True
            if m.task is not None:
                m.task.cancel()
        await asyncio.gather(*(m.task for m in self.members.values() if m.task), return_exceptions=True)
        await asyncio.gather(*(m.conn.close() for m in self.members.values()), return_exceptions=True)


async def main() -> None:
    gen = LoadGen(sys.argv[1])
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**30)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            break
        cmd = json.loads(line)
        name = cmd["cmd"]
        if name == "join":
            answer = await gen.join(cmd["members"], cmd["partitions"])
        elif name == "load":
            answer = await gen.load(cmd["groups"])
        elif name == "busy":
            answer = await gen.busy(cmd["groups"], cmd["seconds"], cmd["pace_ms"], cmd["max_records"])
        elif name == "stats":
            answer = gen.stats()
        elif name == "mark":
            gen.mark, gen.recovered = time.time(), []
            answer = {"mark": gen.mark}
        elif name == "recovered":
            answer = {"members": len(gen.recovered), "last": max(gen.recovered, default=None)}
        elif name == "quit":
            await gen.quit()
            print(json.dumps({"quit": True}), flush=True)
            break
        else:
            answer = {"error": f"unknown command {name!r}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
