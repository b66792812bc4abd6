"""Share-partitions in memory: load (claiming ownership), initialize, expire locks, wake.

Every state change that must survive a restart is written through share/state_writes.py, which
serialises the writes of each share-partition (each is a complete snapshot).

After a commit whose outcome was unknown (or a fencing), the persister re-reads the truth and
names the share-partitions whose durable state differs from what this sidecar believed: their
slots are retired (``dead``; no further write from them) and reload from the durable state on
the next request, so a snapshot built from non-durable state is never written.

What this sidecar leads, within its lease, and planned handovers: share/leadership.py.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from ..config.sections import GroupConfig
from ..metrics import LOAD_TIME as _LOAD_TIME
from ..persist.errors import PersistError, UnknownSharePartitionError
from ..persist.model import SharePartitionKey
from ..persist.records import UNSET_OFFSET, InitializeItem
from .engine.config import Extensions, ShareConfig
from .engine.extended import ExtendedSharePartition
from .engine.keyorder import KeyIndex
from .engine.partition import SharePartition
from ..timeutil import parse_iso_duration_ms, wall_ms
from .leadership import Leadership, PartitionError, _name
from .reload_memory import ReloadMemory
from .slot import IdleEviction, Slot
from .watch import MetricWatch
from .state_writes import StateWrites

log = logging.getLogger("kshare.partitions")


def owner_epoch(now_wall_ms: int) -> int:
    """Fallback owner epoch for a persister that does not take one from its backend (plugins):
    seconds since 2020. Clock skew can reorder it; the built-in persisters never use it."""
    return now_wall_ms // 1000 - 1_577_836_800


class SharePartitionCache(Leadership, IdleEviction, StateWrites, MetricWatch):
    """Owns every `SharePartition` this sidecar serves (idle ones are dropped: share/slot.py)."""

    def __init__(self, *, persister, backend, clock: Callable[[], int], wall: Callable[[], int] = wall_ms,
                 group_config: Callable[[str], dict], epoch: int | None = None, idle_eviction_ms: int = 0) -> None:
        """``clock``: the monotonic milliseconds the engine runs on; ``wall``: the wall-clock
        milliseconds of what is persisted (both from app.py's one ``timeutil.Clock``)."""
        self.persister = persister
        self.backend = backend
        self.clock = clock
        self.wall = wall
        self.group_config = group_config
        backend_epoch = persister.owner_epoch
        self.epoch = epoch if epoch is not None else backend_epoch if backend_epoch is not None else owner_epoch(wall())
        self.slots: dict[SharePartitionKey, Slot] = {}
        self._init_watch()
        self._loading: dict[SharePartitionKey, asyncio.Task] = {}
        #: share.partition.idle.eviction.ms (0: never): idle share-partitions are dropped from
        #: memory, so what a sidecar holds follows what is consumed, not everything ever fetched
        self.idle_eviction_ms = idle_eviction_ms
        #: share-partitions dropped while idle -> the SPSO they had if their durable start offset
        #: was still unset (reloading must not resolve share.auto.offset.reset again: `latest`
        #: would skip what was produced meanwhile), else None. An acknowledgement loads them again,
        #: as one does a loaded share-partition (INVALID_RECORD_STATE, not UNKNOWN_TOPIC_OR_PARTITION).
        self.evicted: dict[SharePartitionKey, int | None] = {}
        self._sweeper: asyncio.Task | None = None
        # (deadline, tie-breaker, key): keys have no order, so equal deadlines must never compare them
        self._deadlines: list[tuple[int, int, SharePartitionKey]] = []
        #: per share-partition, the earliest deadline it has in the heap: one entry wakes the timer,
        #: which tracks the share-partition again (an entry per acquisition woke it once per ShareFetch
        #: a lock duration later, in any run longer than that)
        self._tracked: dict[SharePartitionKey, int] = {}
        self._seq = itertools.count()
        self._rearm = asyncio.Event()
        self._timer: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        #: called after a share-partition changed (acks, expiry, release, load): the dead-letter
        #: service drains new dead-letter holds from here (share/dead_letter.py)
        self.on_change: Callable[[Slot], None] | None = None
        persister.reload_listeners.append(self.retire)
        self.reload_memory = ReloadMemory()
        persister.superseded_listeners.append(lambda _reason: self.retire(list(self.slots), keep_counts=False))
        #: a cluster of sidecars: this sidecar leads only the share-partitions whose
        #: state partition it owns, each at that partition's owner epoch
        self.cluster = persister.cluster
        if self.cluster:
            persister.acquired_listeners.append(self._ownership_changed)
            persister.released_listeners.append(self._ownership_changed)
            persister.handover_hooks.append(self.hand_over)
        #: the lease service is bounded by (cluster/lease.py); None: always serving (tests, embedders)
        self.lease: Any = None
        self._handing_over: set[int] = set()  # state partitions whose handover is being written
        self.handed_over = 0  # records released by planned handovers (tests, metrics)
        #: the sidecar is stopping: no acquisition, no long poll (acknowledgements still apply)
        self.quiescing = False

    def retire(self, keys: Iterable[SharePartitionKey], *, keep_counts: bool = True) -> None:
        """Drop the slots of ``keys`` (their durable state differs from memory); they reload on
        demand — an acknowledgement loads them too, as after an idle eviction — counting their
        records at least as often as memory did and leaving the records members hold with them
        (share/reload_memory.py; ``keep_counts=False``: this sidecar is superseded, nothing is kept)."""
        for key in keys:
            self.evicted.pop(key, None)
            slot = self.drop_slot(key) if key in self.slots else None
            if slot is not None:
                if keep_counts:
                    self.reload_memory.keep(key, slot.partition)
                    self.evicted[key] = slot.partition.spso if slot.start_unset else None
                slot.dead = True
                slot.wake()
                log.warning("share-partition %s reloads from the state topic (memory differed from durable state)",
                            _name(key, slot.topic))

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._timer = asyncio.create_task(self._expiry_loop(), name="kshare-lock-expiry")
        if self.idle_eviction_ms > 0:
            self._sweeper = asyncio.create_task(self._eviction_loop(), name="kshare-idle-eviction")

    async def close(self) -> None:
        for task in (self._timer, self._sweeper):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # -- loading -----------------------------------------------------------------------------
    async def get(self, group_id: str, topic_id: uuid.UUID, partition: int, topic: str) -> Slot:
        key = SharePartitionKey(group_id, str(topic_id), partition)
        if not self.leads(topic_id, partition):  # a loaded slot too: past the lease it serves nothing
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"partition {topic}-{partition} is led by another sidecar" if self.cluster
                                 else f"partition {topic}-{partition}: the backend has not answered for longer "
                                      f"than this sidecar's lease")
        slot = self.slots.get(key)
        if slot is not None:
            slot.last_used = self.clock()
            self.watch(slot)
            return slot
        task = self._loading.get(key)
        if task is None:
            task = self._loading[key] = asyncio.create_task(self._load(key, topic))
            task.add_done_callback(lambda _t: self._loading.pop(key, None))  # `key` is not rebound
        return await asyncio.shield(task)

    def loaded(self, group_id: str, topic_id: uuid.UUID, partition: int) -> Slot | None:
        slot = self.slots.get(SharePartitionKey(group_id, str(topic_id), partition))
        if slot is not None:
            slot.last_used = self.clock()
            self.watch(slot)
        return slot

    async def slot_for(self, group_id: str, topic_id: uuid.UUID, partition: int, *, load: bool = True) -> Slot:
        """The share-partition, loaded on demand for a fetch. An acknowledgement (``load=False``)
        does not load one: like Kafka's SharePartitionManager, which answers UNKNOWN_TOPIC_OR_PARTITION
        for a share-partition nothing was fetched from (not in its cache; found by the long parity
        run — kshare loaded it and answered INVALID_RECORD_STATE)."""
        slot = self.serving_slot(group_id, topic_id, partition)
        if slot is not None:
            cached = getattr(self.backend, "topic_by_id", None)
            if cached is not None and cached(topic_id) is None:  # deleted (or recreated under a new id)
                raise PartitionError(ErrorCode.unknown_topic_id, f"topic id {topic_id} no longer exists")
            return slot
        if not self.serving:  # past the lease: no backend lookup (it may be what is cut off)
            raise PartitionError(ErrorCode.not_leader_or_follower, "this sidecar's lease lapsed: it serves nothing")
        info = await self.backend.resolve_topic_id(topic_id)
        if info is None:
            raise PartitionError(ErrorCode.unknown_topic_id, f"unknown topic id {topic_id}")
        if not 0 <= partition < info.partitions:
            raise PartitionError(ErrorCode.unknown_topic_or_partition, f"{info.name} has no partition {partition}")
        if not self.leads(topic_id, partition):  # a cluster: the leader's answer comes first
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"partition {info.name}-{partition} is led by another sidecar")
        if not load and not self.loading(group_id, topic_id, partition):
            raise PartitionError(ErrorCode.unknown_topic_or_partition, f"share-partition {info.name}-{partition} of "
                                 f"group {group_id} is not loaded: nothing was fetched from it")
        return await self.get(group_id, topic_id, partition, info.name)

    def share_config(self, group_id: str) -> ShareConfig:
        group = GroupConfig.of(self.group_config(group_id))
        return ShareConfig(record_lock_duration_ms=group.record_lock_duration_ms,
                           delivery_count_limit=group.delivery_count_limit,
                           max_record_locks=group.partition_max_record_locks)

    def extensions(self, group_id: str) -> Extensions:
        """kshare's extensions the group opted into (docs/extensions.md)."""
        group = GroupConfig.of(self.group_config(group_id))  # a partial mapping (tests, embedders): none of them
        return Extensions(dead_letter=bool(group.deadletter_topic_name), backoff_ms=group.release_backoff_ms,
                          backoff_multiplier=group.release_backoff_multiplier,
                          backoff_max_ms=group.release_backoff_max_ms, key_ordering=group.key_ordering)

    def reconfigure_group(self, group_id: str) -> int:
        """The group's configs changed: every loaded share-partition of it takes them now, as
        Kafka's SharePartition reads them on every use (lock duration at the next acquisition,
        delivery count limit at the next release or expiry, record-lock cap at the next fetch;
        kshare's extensions likewise). Called by the group's coordinator at the change and, in a
        cluster, by every sidecar when the group's record reaches it (cluster.GroupConfigTail).
        Returns how many share-partitions changed."""
        slots = [slot for key, slot in self.slots.items() if key.group_id == group_id]
        if not slots:
            return 0
        config, ext = self.share_config(group_id), self.extensions(group_id)
        changed = 0
        for slot in slots:
            sp = slot.partition
            touched = sp.config != config
            if touched:
                sp.reconfigure(config)
            if isinstance(sp, ExtendedSharePartition):
                if sp.ext != ext:
                    touched = True
                    sp.holds_indexed = False  # holds made while keys were not ordered: learn them
                sp.ext = ext
            elif ext.enabled:
                # a plain share-partition gains kshare's extensions: the extended engine is the same
                # window with extra decisions (its holds start empty; key ordering covers the
                # records acquired from now on)
                sp.__class__ = ExtendedSharePartition
                assert isinstance(sp, ExtendedSharePartition)
                sp.ext, sp._wall, sp.key_index = ext, self.wall, KeyIndex()
                touched = True
            if touched:
                changed += 1
                slot.wake()  # a higher cap or limit may let a parked fetch acquire now
                self.track(slot)
                self._changed(slot)  # a dropped dead-letter topic: its held records are archived
        if changed:
            log.info("share group %s: %d loaded share-partition(s) took the changed configs", group_id, changed)
        return changed

    def _changed(self, slot: Slot) -> None:
        if self.on_change is not None:
            self.on_change(slot)

    async def initial_offset(self, group_id: str, topic: str, partition: int) -> int:
        """Resolve the first SPSO from ``share.auto.offset.reset`` (latest, earliest, by_duration)."""
        reset = GroupConfig.of(self.group_config(group_id)).auto_offset_reset
        if reset == "earliest":
            return await self.backend.list_offsets(topic, partition, "earliest")
        if reset.startswith("by_duration:"):
            ts = self.wall() - parse_iso_duration_ms(reset.removeprefix("by_duration:"))
            offset = await self.backend.list_offsets(topic, partition, ts)
            if offset is not None and offset >= 0:
                return offset
        return await self.backend.list_offsets(topic, partition, "latest")

    async def initialize(self, group_id: str, topic_id: uuid.UUID, topic: str, partition: int) -> None:
        """Give a share-partition state when it is first assigned, as Kafka's group coordinator
        does (InitializeShareGroupState), with the start offset *unset*: it is resolved from
        ``share.auto.offset.reset`` when the partition is first loaded for a fetch (see _load),
        so ``latest`` means "from the first fetch" and DescribeShareGroupOffsets shows -1 until
        then — both as in Kafka 4.3 (found by the differential harness, tests/e2e/parity)."""
        key = SharePartitionKey(group_id, str(topic_id), partition)
        if key in self.slots:
            return
        existing = (await self.persister.read([key]))[key]
        if not isinstance(existing, UnknownSharePartitionError):
            if isinstance(existing, PersistError):
                raise existing
            return
        await self.persister.initialize(key, 0, UNSET_OFFSET)

    async def initialize_many(self, group_id: str, parts: Iterable[tuple[uuid.UUID, int]]
                              ) -> dict[tuple[uuid.UUID, int], PersistError | None]:
        """:meth:`initialize` for many share-partitions of a group at once: one read of what is
        stored, one coalesced initialization of the rest (a group subscribing to a topic of 100
        partitions ran 100 tasks, each a read and a write; 1,000 groups joining at once held
        100,000 of them and their futures, half a gigabyte at the peak). Per share-partition,
        None or the PersistError it failed with."""
        keys = {SharePartitionKey(group_id, str(tid), p): (tid, p) for tid, p in parts}
        out: dict[tuple[uuid.UUID, int], PersistError | None] = {}
        todo: list[InitializeItem] = []
        for key, found in (await self.persister.read([k for k in keys if k not in self.slots])).items():
            if isinstance(found, UnknownSharePartitionError):
                todo.append(InitializeItem(key, 0, UNSET_OFFSET))
            else:
                out[keys[key]] = found if isinstance(found, PersistError) else None
        if todo:
            for key, err in (await self.persister.initialize_many(todo)).items():
                out[keys[key]] = err
        for key in keys:
            out.setdefault(keys[key], None)  # loaded: initialized long ago
        return out

    async def _load(self, key: SharePartitionKey, topic: str) -> Slot:
        started = time.perf_counter()
        try:
            epoch = self.epoch_for(key)
            try:
                state = await self.persister.read_one(key, leader_epoch=epoch)
            except UnknownSharePartitionError:
                start = await self.initial_offset(key.group_id, topic, key.partition)
                await self.persister.initialize(key, 0, start)
                state = await self.persister.read_one(key, leader_epoch=epoch)
            config = self.share_config(key.group_id)
            ext = self.extensions(key.group_id)
            remembered = self.evicted.get(key)
            kept = self.reload_memory.get(key)  # dropped once the load succeeds
            restored, unset = state, state.start_offset == UNSET_OFFSET
            if unset:
                # Resolved from share.auto.offset.reset now, and written with the first state
                # change (an acknowledgement, a release, a lock expiry), not at load: until then
                # DescribeShareGroupOffsets shows no start offset, as on Kafka 4.3.1 (found by the
                # long differential run), and a reload before it resolves the offset again, as Kafka's
                # — except after an idle eviction or a retirement, which must not show: the offset it had.
                start = remembered if remembered is not None else \
                    await self.initial_offset(key.group_id, topic, key.partition)
                restored = replace(state, start_offset=start, state_batches=())
            restored = self.reload_memory.raise_counts(kept, restored, _name(key, topic))
            # groups without extensions keep the plain engine (docs/extensions.md)
            sp = ExtendedSharePartition.restore_with(restored, self.clock, config, ext, self.wall) if ext.enabled \
                else SharePartition.restore(restored, self.clock, config)
            sp.leader_epoch = epoch
            self.reload_memory.hold_again(kept, sp, _name(key, topic), ordered=ext.key_ordering)
        except PersistError as exc:
            code = ErrorCode.not_leader_or_follower if exc.error_code == ErrorCode.not_coordinator else exc.error_code
            if not self.leads(uuid.UUID(key.topic_id), key.partition):
                # it failed because this sidecar let go meanwhile (a lapsed lease fails the write in
                # flight as COORDINATOR_NOT_AVAILABLE): answer what a lapsed sidecar answers, which
                # clients follow to the new leader; librdkafka hands any other code to the application
                code = ErrorCode.not_leader_or_follower
            raise PartitionError(code, f"share-partition {_name(key, topic)}: {exc}") from exc
        if self.cluster and not self.leads(uuid.UUID(key.topic_id), key.partition):
            # given up while it loaded (a handover, a lapsed lease): never serve what was read
            raise PartitionError(ErrorCode.not_leader_or_follower, f"share-partition {_name(key, topic)} is led by "
                                                                   f"another sidecar now")
        slot = self.slots[key] = Slot(key, topic, sp, last_used=self.clock(), start_unset=unset)
        self.watch(slot)
        self.evicted.pop(key, None)
        self.reload_memory.drop(key)
        _LOAD_TIME.observe(time.perf_counter() - started)
        log.info("loaded share-partition %s: SPSO %d, state epoch %d", _name(key, topic), sp.spso, sp.state_epoch)
        self.track(slot)  # restored holds (release backoff) have deadlines
        self._changed(slot)  # restored dead-letter holds are written now
        return slot

    def unload_group(self, group_id: str) -> list[Slot]:
        """Forget a group's share-partitions (after an admin reset/delete); they reload on demand."""
        gone = [s for k, s in self.slots.items() if k.group_id == group_id]
        for key in [k for k in self.evicted if k.group_id == group_id]:
            del self.evicted[key]
        self.reload_memory.forget(lambda k: k.group_id == group_id)
        for slot in gone:
            self.drop_slot(slot.key)
            slot.wake()
        return gone

    # -- acquisition locks -------------------------------------------------------------------
    def track(self, slot: Slot) -> None:
        """Register the share-partition's earliest lock deadline with the expiry timer."""
        deadline = slot.partition.next_lock_deadline()
        if deadline is None:
            return
        tracked = self._tracked.get(slot.key)
        if tracked is not None and tracked <= deadline:
            return  # its entry comes due first; the timer then tracks it again
        self._tracked[slot.key] = deadline
        if not self._deadlines or deadline < self._deadlines[0][0]:
            self._rearm.set()
        heapq.heappush(self._deadlines, (deadline, next(self._seq), slot.key))

    async def _expiry_loop(self) -> None:
        """Expire acquisition locks as their deadlines pass. Never dies: a failure is logged and the
        loop goes on, since without it no lock would ever expire again."""
        while True:
            try:
                self._expire_due()
            except Exception:
                log.exception("acquisition-lock expiry failed; continuing")
            self._rearm.clear()
            timeout = (self._deadlines[0][0] - self.clock()) / 1000 if self._deadlines else None
            try:
                await asyncio.wait_for(self._rearm.wait(), timeout=max(timeout, 0.001) if timeout is not None else None)
            except TimeoutError:
                pass

    def _expire_due(self) -> None:
        now = self.clock()
        due: set[SharePartitionKey] = set()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, key = heapq.heappop(self._deadlines)
            if self._tracked.get(key) == deadline:  # else superseded by an earlier entry, already due
                del self._tracked[key]
                due.add(key)
        for key in due:
            slot = self.slots.get(key)
            if slot is None:
                continue
            if slot.partition.expire(now):
                log.debug("acquisition locks expired on %s", _name(key, slot.topic))
                slot.wake()
                self.persist_soon(slot)
                self._changed(slot)
            self.track(slot)

    def release_member(self, group_id: str, member_id: str, partitions: Iterable[tuple[uuid.UUID, int]]) -> int:
        """A share session closed (epoch -1 or TCP disconnect): release the member's records."""
        released = 0
        for topic_id, p in partitions:
            slot = self.loaded(group_id, topic_id, p)
            if slot is None:
                continue
            n = slot.partition.release_member(member_id)
            if n:
                released += n
                slot.wake()
                self.persist_soon(slot)
                self.track(slot)  # holds made by the release (backoff) have deadlines
                self._changed(slot)
        return released
