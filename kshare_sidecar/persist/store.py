"""What a persister needs from its backend: the one interface a new backend implements.

The parts of :class:`~kshare_sidecar.persist.base.BasePersister` (writer, replay, ownership,
cluster, layout) reach the backend only through a :class:`StateStore`: the memory log
(persist/memory.py) and the compacted topic (persist/topicstore.py, with one writer strategy
per ``state.write.mode``, persist/writers/). A plugin's persister is a ``BasePersister`` over its
own store, and gets the same fencing, coalescing and replay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kshare_sidecar.persist.ops import Record, ReplaySink


class StateStore:
    """A partitioned, compactable log of state records with one fenced writer per partition."""

    #: the state topic's name (the memory log's: the default topic's, so a cluster's names match)
    topic = "__kshare_state"
    #: the prefix of the writers' transactional ids (reserved from clients by the pass-through)
    transactional_id_prefix = "kshare-state"
    #: the replay's stale-record rule (replay.RULES): "owner" where the backend does not fence
    #: writers (non-transactional writes)
    replay_rule = "key"
    #: False where the backend does not fence a superseded writer (``state.write.mode=idempotent``):
    #: a mover then checks that nobody took over before it drops the originals (persist/layout.py)
    fences_writers = True
    #: how long a fenced writer that is still the newest owner waits before taking its partition
    #: back (a starting sidecar fences first and records its epoch just after)
    takeover_grace_s = 0.0

    def __init__(self, partitions: int = 1) -> None:
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        #: the partition count (an existing topic's is adopted when it is opened)
        self.partitions = partitions

    async def open(self, *, cluster: bool) -> None:
        """Connect; make sure the storage exists; fence older writers (of every partition unless
        ``cluster``: then writers are opened per partition when it is acquired)."""

    async def replay(self, sink: ReplaySink, partitions: Sequence[int] | None = None, *,
                     start: Mapping[int, int] | None = None) -> None:
        """Call ``sink(partition, offset, key, value)`` for every stored record of ``partitions``
        (all when None), up to the end (the last stable offset: committed records only);
        ``start``: from these offsets on instead of each partition's beginning (only passed
        when :meth:`replay_positions` gave them)."""
        raise NotImplementedError

    def replay_positions(self) -> Mapping[int, int] | None:
        """Where the last full replay ended on each partition, if the backend can resume a replay
        from there (None: recovery always replays everything)."""
        return None

    async def commit(self, partition: int, records: list[Record]) -> None:
        """Durably and atomically write ``records`` to ``partition``. Raise WriterFencedError
        when the backend has fenced this writer, CommitOutcomeUnknownError when the outcome is
        not known; any other exception is treated as unknown too."""
        raise NotImplementedError

    async def settle(self, partition: int) -> bool:
        """Wait until the last commit on ``partition`` is resolved (committed or aborted) without
        re-initialising the writer. False when the writer is unusable (fenced, fatal error)."""
        return True

    async def await_stable(self, partition: int) -> None:
        """Wait until every record written to ``partition`` so far is committed or aborted for
        readers (last stable offset at the high watermark seen now)."""

    async def reopen(self, partition: int) -> None:
        """Take ``partition`` over again: a new writer, fencing every other one."""

    async def release(self, partition: int) -> None:
        """Drop ``partition``'s writer (released, lost or dropped by a cluster member)."""

    def serving(self, persister: Any) -> None:
        """The persister started serving (after recovery and takeover): a store that watches the
        backend for other writers starts now (persist/writers/watch.py)."""

    def drop_connections(self) -> int:
        """Close the writers' backend connections (a lapsed cluster member); how many were closed."""
        return 0

    async def close(self) -> None:
        """Release backend resources."""

    def single_twin(self) -> StateStore:
        """A store like this one, on the same backend and topic, for a persister that owns every state
        partition (not a cluster member): what moves another layout's records home (persist/layout.py)."""
        raise NotImplementedError(f"the {type(self).__name__} store cannot move state records for a cluster")
