"""Which share-partitions of a group are initialized, and what that means for its assignment.

Kafka 4.3 assigns a share-partition only once its state has been *initialized*
(InitializeShareGroupState at the share coordinator). A heartbeat that subscribes the group to a
topic whose partitions are not initialized yet gets an assignment without them and sets off their
initialization after answering; once that has completed, the next heartbeat of any member finds
"initialized partitions that nobody is assigned" and bumps the group epoch, so the new target
includes them. A joining member's epoch therefore moves twice (join, then initialization) — the
epoch sequence kshare reproduces, so that a member's *previous* epoch, which a heartbeat may
carry, is the same on both (found by the differential harness, tests/e2e/parity).

This module is Kafka's ``ShareGroupStatePartitionMetadata`` for one group (initialized and
initializing partitions by topic id) and the two questions GroupMetadataManager asks of it:
``initializedAssignmentPending`` and ``subscribedTopicsChangeMap``. Pure data; the coordinator
owns one per group and the group service performs the initialization it asks for.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Partitions = dict[uuid.UUID, frozenset[int]]


@dataclass
class ShareStateMetadata:
    """Initialized and initializing share-partitions of one group, by topic id."""

    initialized: Partitions = field(default_factory=dict)
    initializing: Partitions = field(default_factory=dict)
    #: bumped whenever ``initialized`` changes (the coordinator caches what it derives from it)
    version: int = field(default=0, compare=False)
    #: topic id -> the partition count every partition of which is initialized: a heartbeat asks
    #: :meth:`to_initialize` each time, and this answers it without building sets
    _complete: dict[uuid.UUID, int] = field(default_factory=dict, compare=False, repr=False)

    def _changed(self) -> None:
        self.version += 1
        self._complete.clear()

    def add_initialized(self, parts: Mapping[uuid.UUID, Iterable[int]]) -> None:
        """Kafka's initializeShareGroupState: the partitions move from initializing to initialized."""
        self._changed()
        for tid, ps in parts.items():
            ps = frozenset(ps)
            if ps:
                self.initialized[tid] = self.initialized.get(tid, frozenset()) | ps
            self._drop_initializing(tid, ps)

    def drop_initializing(self, parts: Mapping[uuid.UUID, Iterable[int]]) -> None:
        """Kafka's uninitializeShareGroupState: an initialization failed, ask again next time."""
        self._changed()
        for tid, ps in parts.items():
            self._drop_initializing(tid, frozenset(ps))

    def _drop_initializing(self, tid: uuid.UUID, ps: frozenset[int]) -> None:
        left = self.initializing.get(tid, frozenset()) - ps
        if left:
            self.initializing[tid] = left
        else:
            self.initializing.pop(tid, None)

    def forget(self, topic_id: uuid.UUID | None = None) -> None:
        """The state of a topic (or of every topic) was deleted: it must be initialized again."""
        self._changed()
        if topic_id is None:
            self.initialized.clear()
            self.initializing.clear()
        else:
            self.initialized.pop(topic_id, None)
            self.initializing.pop(topic_id, None)

    def assignable(self, topic_ids: Iterable[uuid.UUID]) -> Partitions:
        """Kafka's topicAssignablePartitionsMap restricted to ``topic_ids``: only initialized
        partitions may be assigned."""
        return {tid: self.initialized[tid] for tid in topic_ids if tid in self.initialized}

    def assignment_pending(self, subscribed: Mapping[uuid.UUID, str],
                           target_union: Mapping[uuid.UUID, set[int]], has_members: bool) -> bool:
        """Kafka's initializedAssignmentPending: is an initialized partition of a subscribed topic
        missing from the target (or the target holds other partitions of it)?

        ``subscribed``: topic id -> name of the topics the members subscribe to that exist;
        ``target_union``: topic id -> partitions assigned to anyone in the current target."""
        if not has_members or not self.initialized or not subscribed:
            return False
        for tid, parts in self.initialized.items():
            if tid in subscribed and target_union.get(tid) != set(parts):
                return True
        return False

    def to_initialize(self, subscribed: Mapping[uuid.UUID, int]) -> Partitions:
        """Kafka's subscribedTopicsChangeMap: partitions of subscribed topics (topic id ->
        partition count) neither initialized nor being initialized. They are marked initializing
        here (addInitializingTopicsRecords); the caller initializes them and reports back with
        :meth:`add_initialized` or :meth:`drop_initializing`."""
        out: Partitions = {}
        complete = self._complete
        for tid, count in subscribed.items():
            if complete.get(tid) == count:
                continue
            have = self.initialized.get(tid, frozenset()) | self.initializing.get(tid, frozenset())
            missing = frozenset(range(count)) - have
            if missing:
                out[tid] = missing
                self.initializing[tid] = self.initializing.get(tid, frozenset()) | missing
            elif tid not in self.initializing:
                complete[tid] = count
        return out
