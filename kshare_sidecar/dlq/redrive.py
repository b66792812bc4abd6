"""Redrive: a share group's dead letters back to their source topic (or another), each record
once, rate-limited, resumable — from the console or ``kshare dlq redrive``.

How "each record once" survives a process killed mid-way: Kafka's own consume-transform-produce
transaction. Each chunk of dead letters is copied to the target inside one transaction of a
producer whose ``transactional.id`` is the redrive's name, and the same transaction commits the
redrive's position in the dead-letter topic as the committed offset of a consumer group of the
same name (``send_offsets_to_transaction``) — so the copies and the progress become visible
together or not at all. A redrive started again (after a kill, by the restarted sidecar or by
the CLI) first initializes that transactional id, which fences any older instance still alive
and aborts the transaction it left open, then reads the committed position and goes on from
there. Readers of the target at ``read_committed`` (``share.isolation.level=read_committed`` for
a share group) see every record exactly once; a ``read_uncommitted`` reader may also see the
records of the one chunk whose transaction the kill aborted. The backend must support
transactions (Kafka, Redpanda); the sidecar's state topic is not involved, so a redrive works the
same without a sidecar.

What is redriven: the dead letters of one share group (``__dlq.errors.group``) in one
dead-letter topic, from the redrive's committed position up to the topic's end *when the redrive
was first started* (kept with the position as offset-commit metadata, JSON): records that fail
again and are dead-lettered again during the redrive are not picked up again by it. Records of
other groups, and records without the ``__dlq.errors.topic/partition/offset`` context, are
passed over. A headers-only dead letter (``errors.deadletterqueue.copy.record.enable=false``)
is redriven from the source record, read from ``__dlq.errors.topic/partition/offset``; when the
log no longer has it, the redrive stops there with a line saying so (or, with ``skip_missing``,
counts it and goes on). The copy goes to the same partition number as its source (modulo the
target's partitions), with the source record's key, value and headers, without the
``__dlq.errors.*`` headers, plus ``kshare.redrive.source = <dlq>/<partition>/<offset>``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, ProducerFenced

from .reader import ReadError, TopicReader
from .records import DeadLetter, redriven_headers

log = logging.getLogger("kshare.redrive")

PREFIX = "kshare-redrive."
#: The most records one transaction carries (a lower rate makes chunks smaller: one a second).
MAX_CHUNK = 500
TRANSACTION_TIMEOUT_MS = 60_000


def redrive_name(group: str, dlq_topic: str) -> str:
    """The consumer group and transactional id of the redrive of ``group``'s dead letters in ``dlq_topic``."""
    return f"{PREFIX}{group}.{dlq_topic}"


class RedriveError(Exception):
    """A redrive cannot start or go on (the message is one line for the user)."""


@dataclass(frozen=True)
class RedriveRequest:
    group: str
    dlq_topic: str
    target: str = ""  # "" = each record's source topic (__dlq.errors.topic)
    rate: float = 100.0  # records per second
    skip_missing: bool = False
    principal: str = ""  # who asked (kept with the progress; shown)


@dataclass
class PartitionProgress:
    partition: int
    start: int  # position when this run began (progress is measured from here)
    position: int  # next dead-letter offset to look at (committed with each chunk)
    until: int  # the dead-letter topic's end when the redrive was first started


@dataclass
class RedriveStatus:
    """What a redrive did so far (the console's progress bar, the CLI's lines, JSON)."""

    request: RedriveRequest
    state: str = "starting"  # starting, running, done, stopped, failed, fenced
    redriven: int = 0
    passed_over: int = 0  # other groups' records, records without context
    missing: int = 0  # headers-only dead letters whose source record is gone (skip_missing)
    error: str | None = None
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    finished_ms: int | None = None
    partitions: list[PartitionProgress] = field(default_factory=list)
    resumed: bool = False  # the position came from an earlier, unfinished run

    @property
    def total(self) -> int:
        return sum(max(0, p.until - p.start) for p in self.partitions)

    @property
    def examined(self) -> int:
        return sum(max(0, min(p.position, p.until) - p.start) for p in self.partitions)

    @property
    def finished(self) -> bool:
        return self.state in ("done", "stopped", "failed", "fenced")

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["request"] = dataclasses.asdict(self.request)
        out.update(total=self.total, examined=self.examined, name=redrive_name(self.request.group,
                                                                             self.request.dlq_topic))
        return out


def _metadata(request: RedriveRequest, until: int, started_ms: int) -> str:
    return json.dumps({"v": 1, "group": request.group, "dlq": request.dlq_topic, "until": until,
                       "target": request.target, "rate": request.rate, "skip_missing": request.skip_missing,
                       "by": request.principal, "started": started_ms}, separators=(",", ":"))


def read_metadata(text: str | None) -> dict[str, Any] | None:
    """The JSON kept with a redrive's committed position, or ``None`` for anything else."""
    try:
        meta = json.loads(text or "")
    except ValueError:
        return None
    return meta if isinstance(meta, dict) and meta.get("v") == 1 and isinstance(meta.get("until"), int) else None


Authorize = Callable[[str], Awaitable[bool]]
#: How long a retriable backend error (no group coordinator yet: a fresh cluster creates
#: __consumer_offsets at the first lookup) is retried before a redrive gives up.
RETRY_S = 30.0


async def _retrying(call: Callable[[], Awaitable[Any]]) -> Any:
    deadline = asyncio.get_running_loop().time() + RETRY_S
    while True:
        try:
            return await call()
        except KafkaError as exc:
            if not getattr(exc, "retriable", False) or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)


class Redrive:
    """One run of a redrive (see the module docstring). ``await run()``; ``stop()`` ends it after
    the chunk in flight (the rest stays for a later run)."""

    def __init__(self, request: RedriveRequest, *, bootstrap_servers: str, client_options: dict[str, Any] | None = None,
                 authorize_write: Authorize | None = None) -> None:
        if request.rate <= 0:
            raise RedriveError(f"rate must be > 0 records/s, got {request.rate}")
        self.request = request
        self.status = RedriveStatus(request)
        self.name = redrive_name(request.group, request.dlq_topic)
        self._bootstrap = bootstrap_servers
        self._options = dict(client_options or {})
        self._authorize = authorize_write
        self._stop = asyncio.Event()
        self._allowed: dict[str, bool] = {}
        self._partitions: dict[str, int] = {}

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> RedriveStatus:
        status = self.status
        producer = AIOKafkaProducer(bootstrap_servers=self._bootstrap, transactional_id=self.name,
                                    enable_idempotence=True, acks="all", client_id="kshare-redrive",
                                    transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, **self._options)
        dlq = TopicReader(self._bootstrap, self._options, client_id="kshare-redrive")
        source = TopicReader(self._bootstrap, self._options, isolation_level="read_uncommitted",
                             client_id="kshare-redrive-source")
        try:
            try:
                await producer.start()  # InitProducerId: fences an older run, aborts its open transaction
            except KafkaError as exc:
                raise RedriveError(f"cannot start the redrive's transactional producer {self.name!r} (the "
                                   f"backend must support transactions): {exc}") from exc
            await self._plan(dlq)
            status.state = "running"
            log.info("redrive %s: %d dead letter(s) to look at (%s), to %s at %.0f records/s", self.name,
                     status.total, "resumed" if status.resumed else "new", self.request.target or "their source "
                     "topics", self.request.rate)
            await self._copy(producer, dlq, source)
            status.state = "stopped" if self._stop.is_set() and status.examined < status.total else "done"
        except ProducerFenced:
            status.state, status.error = "fenced", (f"another run of redrive {self.name!r} took over (its "
                                                    f"transactional id was initialized again)")
        except (RedriveError, ReadError) as exc:
            status.state, status.error = "failed", str(exc)
        except KafkaError as exc:
            status.state, status.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            status.finished_ms = int(time.time() * 1000)
            for part in (producer, dlq, source):
                try:
                    await (part.stop() if isinstance(part, AIOKafkaProducer) else part.close())
                except Exception as exc:  # noqa: BLE001 - closing must not hide the outcome
                    log.debug("redrive %s: closing %r: %r", self.name, part, exc)
        level = logging.INFO if status.state in ("done", "stopped") else logging.WARNING
        log.log(level, "redrive %s %s: %d redriven, %d passed over, %d missing%s", self.name, status.state,
                status.redriven, status.passed_over, status.missing, f" ({status.error})" if status.error else "")
        return status

    async def _plan(self, dlq: TopicReader) -> None:
        """Positions: committed ones (after the fence, so an aborted run's are gone), else the log start."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap, client_id="kshare-redrive", **self._options)
        await admin.start()
        try:
            committed = await _retrying(lambda: admin.list_consumer_group_offsets(self.name))
        except KafkaError as exc:
            raise RedriveError(f"cannot read the progress of redrive {self.name!r}: {exc}") from exc
        finally:
            await admin.close()
        bounds = await dlq.bounds(self.request.dlq_topic)
        status = self.status
        for partition, (begin, end) in sorted(bounds.items()):
            done = committed.get(TopicPartition(self.request.dlq_topic, partition))
            meta = read_metadata(done.metadata) if done is not None else None
            position = max(begin, done.offset if done is not None and done.offset >= 0 else begin)
            if meta is not None and position < meta["until"]:
                until = meta["until"]  # an unfinished run: the same end
                status.resumed = True
            else:
                until = end
            status.partitions.append(PartitionProgress(partition, position, position, until))

    async def _copy(self, producer: AIOKafkaProducer, dlq: TopicReader, source: TopicReader) -> None:
        status, request = self.status, self.request
        chunk = max(1, min(MAX_CHUNK, int(request.rate)))
        loop = asyncio.get_running_loop()
        began = loop.time()
        for progress in status.partitions:
            while progress.position < progress.until and not self._stop.is_set():
                letters, position = await dlq.dead_letters(request.dlq_topic, progress.partition, progress.position,
                                                           chunk, end=progress.until)
                if position <= progress.position:
                    raise RedriveError(f"{request.dlq_topic}-{progress.partition}: no progress at offset "
                                       f"{progress.position} (below the end {progress.until} when the redrive "
                                       f"started)")
                mine = [d for d in letters if d.group == request.group and d.context_complete]
                originals = await self._originals(source, mine)
                redriven = missing = 0
                stopped_at: DeadLetter | None = None
                async with producer.transaction():
                    for letter in mine:
                        original = originals.get((letter.source_topic, letter.source_partition, letter.source_offset))
                        if letter.headers_only and original is None:
                            if not request.skip_missing:
                                stopped_at, position = letter, letter.offset  # it and the rest stay
                                break
                            missing += 1
                            continue
                        await self._send(producer, letter, original)
                        redriven += 1
                    if position > progress.position:
                        tp = TopicPartition(request.dlq_topic, progress.partition)
                        meta = _metadata(request, progress.until, status.started_ms)
                        await producer.send_offsets_to_transaction({tp: (position, meta)}, self.name)
                status.redriven += redriven
                status.missing += missing
                status.passed_over += sum(1 for d in letters if d.offset < position
                                          and not (d.group == request.group and d.context_complete))
                progress.position = position
                if stopped_at is not None:
                    raise RedriveError(self._missing_line(stopped_at))
                # rate: never ahead of `rate` records per second since this run began
                ahead = status.redriven / request.rate - (loop.time() - began)
                if ahead > 0:
                    try:
                        await asyncio.wait_for(self._stop.wait(), ahead)
                    except TimeoutError:
                        pass

    def _missing_line(self, letter: DeadLetter) -> str:
        return (f"dead letter {letter.topic}/{letter.partition}/{letter.offset} has no copy of its record "
                f"(errors.deadletterqueue.copy.record.enable was false) and the source record "
                f"{letter.source_topic}-{letter.source_partition} offset {letter.source_offset} is no longer in the "
                f"log; the redrive stopped before it (run it again with skip_missing to pass such records over)")

    async def _originals(self, source: TopicReader, letters: list[DeadLetter]) -> dict[tuple, Any]:
        """The source records of the headers-only dead letters (read in runs of close offsets)."""
        wanted: dict[tuple[str, int], list[int]] = {}
        for d in letters:
            if d.headers_only:
                assert d.source_topic is not None and d.source_partition is not None and d.source_offset is not None
                wanted.setdefault((d.source_topic, d.source_partition), []).append(d.source_offset)
        out: dict[tuple, Any] = {}
        for (topic, partition), offsets in wanted.items():
            offsets = sorted(set(offsets))
            runs: list[list[int]] = [[offsets[0]]]
            for o in offsets[1:]:
                if o - runs[-1][-1] <= 64:
                    runs[-1].append(o)
                else:
                    runs.append([o])
            for run in runs:
                records, _ = await source.read(topic, partition, run[0], run[-1] - run[0] + 1, end=run[-1] + 1)
                want = set(run)
                out.update({(topic, partition, r.offset): r for r in records if r.offset in want})
        return out

    async def _target(self, letter: DeadLetter) -> tuple[str, int]:
        topic = self.request.target or letter.source_topic
        assert topic is not None and letter.source_partition is not None
        if topic not in self._allowed:
            allowed = True if self._authorize is None else await self._authorize(topic)
            self._allowed[topic] = allowed
        if not self._allowed[topic]:
            raise RedriveError(f"not authorized to write to topic {topic!r} (WRITE on TOPIC {topic})")
        if topic not in self._partitions:
            try:
                self._partitions[topic] = len(await self._producer_partitions(topic))
            except (KafkaError, ReadError) as exc:
                raise RedriveError(f"target topic {topic!r}: {exc}") from exc
        n = self._partitions[topic]
        if n <= 0:
            raise RedriveError(f"target topic {topic!r} does not exist")
        return topic, letter.source_partition % n

    async def _producer_partitions(self, topic: str) -> list[int]:
        reader = TopicReader(self._bootstrap, self._options, client_id="kshare-redrive-meta")
        try:
            return await reader.partitions(topic)
        finally:
            await reader.close()

    async def _send(self, producer: AIOKafkaProducer, letter: DeadLetter, original: Any | None) -> None:
        topic, partition = await self._target(letter)
        if original is not None:
            key, value, headers = original.key, original.value, redriven_headers(letter, list(original.headers or ()))
        else:
            key, value, headers = letter.key, letter.value, redriven_headers(letter)
        await producer.send(topic, key=key, value=value, headers=headers, partition=partition)


async def progress(bootstrap_servers: str, client_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every redrive the backend has a position for: its request (from the kept metadata) and how
    far it got — ``unfinished`` ones stopped before their end (killed, stopped, failed)."""
    options = dict(client_options or {})
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="kshare-redrive", **options)
    await admin.start()
    try:
        groups = [g[0] for g in await admin.list_consumer_groups() if str(g[0]).startswith(PREFIX)]
        out = []
        for name in sorted(groups):
            committed = await _retrying(functools.partial(admin.list_consumer_group_offsets, name))
            metas = {tp.partition: (om.offset, read_metadata(om.metadata)) for tp, om in committed.items()}
            first = next((m for _o, m in metas.values() if m is not None), None)
            if first is None:
                continue
            left = sum(max(0, m["until"] - o) for o, m in metas.values() if m is not None)
            out.append({"name": name, "group": first.get("group"), "dlq_topic": first.get("dlq"),
                        "target": first.get("target", ""), "rate": first.get("rate"),
                        "skip_missing": bool(first.get("skip_missing")), "by": first.get("by", ""),
                        "started": first.get("started"), "left": left, "unfinished": left > 0})
        return out
    finally:
        await admin.close()
