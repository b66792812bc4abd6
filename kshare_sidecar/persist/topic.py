"""The compacted-topic persister (the default): share-group state in a topic on the backend.

A :class:`~kshare_sidecar.persist.base.BasePersister` over a
:class:`~kshare_sidecar.persist.topicstore.TopicStore`, built from one
:class:`~kshare_sidecar.persist.settings.TopicSettings`:

* One record per entity (share-partition snapshot, group record, topic-id entry), keyed by
  :mod:`kshare_sidecar.persist.codec`; deletes are tombstones.
* Writes are coalesced per state-topic partition (``linger_ms``); each batch is written by the
  partition's writer (persist/writers/: by default idempotent batches at the producer epoch of
  ``transactional.id`` ``<prefix>-<topic>-<partition>``, or one Kafka transaction per batch under
  that id): starting a second instance for the same partition bumps the producer epoch and the
  backend fences the first one, which then fails its writes with :class:`WriterFencedError` and
  re-reads ownership (never a silent loss). Callers proceed only after the commit (acks=all,
  idempotent) returned. A commit that times out is *not* a failure: the writer is never
  re-initialised to recover from it (that would fence a live owner); the persister waits for its
  outcome and re-reads the partition. (``idempotent`` mode, for backends without transactions, is
  fenced by replay and persist/writers/watch.py instead.)
* Recovery replays every partition with ``isolation_level=read_committed`` up to the
  last-stable offset before the persister is ``ready``.
"""

from __future__ import annotations

import dataclasses

from kshare_sidecar.persist.base import BasePersister
from kshare_sidecar.persist.records import RecoveryStats
from kshare_sidecar.persist.settings import DEFAULT_TOPIC, WRITE_MODES, WRITER_REFRESH_S, TopicSettings
from kshare_sidecar.persist.topicsetup import DEFAULT_TOPIC_CONFIGS
from kshare_sidecar.persist.topicstore import TopicStore
from kshare_sidecar.persist.writers.base import StateWriters

__all__ = ["DEFAULT_TOPIC", "DEFAULT_TOPIC_CONFIGS", "WRITER_REFRESH_S", "WRITE_MODES", "TopicPersister",
           "TopicSettings"]


class TopicPersister(BasePersister):
    """State in a compacted topic, written by per-partition fenced writers (``settings.write_mode``).

    ``writers``: the write strategy (default: the one ``settings.write_mode`` names; tests pass a
    subclass to hold or break writes)."""

    name = "topic"

    def __init__(self, settings: TopicSettings, *, writers: StateWriters | None = None) -> None:
        self.settings = settings
        self.topic_store = TopicStore(settings, writers)
        super().__init__(self.topic_store, linger_ms=settings.linger_ms, max_batch=settings.max_batch,
                         placement=settings.placement)

    @property
    def write_mode(self) -> str:
        return self.settings.write_mode

    def transactional_id(self, partition: int) -> str:
        return self.settings.transactional_id(partition)

    def single_twin(self) -> TopicPersister:
        """Same backend, topic and writers, owning every partition when started (persist/layout.py)."""
        return TopicPersister(dataclasses.replace(self.settings, partitions=self.partitions, create_topic=False))

    async def adopt_topic(self) -> None:
        """Take the existing state topic's partition count without creating anything (a tool
        reading the topic: `kshare state migrate`, `migrate-to-native`)."""
        await self.topic_store.adopt_topic()

    async def layout_report(self) -> RecoveryStats:
        """Without starting (nothing is taken over or written): the existing state topic's partition
        count is adopted and every partition read for its layout and misplaced records (`kshare
        state migrate`'s dry run; persist/layout.py)."""
        await self.adopt_topic()
        return await self.scan_layout()
