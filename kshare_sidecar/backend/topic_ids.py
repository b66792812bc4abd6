"""Topic IDs for backends that have none (Redpanda, Metadata < v10, or a zero UUID).

Why: share-group RPCs name topics only by ID, and clients require IDs that stay the same for the
life of a topic and change when it is recreated. When the backend reports real IDs the backend
layer uses them as they are; otherwise it asks a :class:`TopicIdStore` to mint one and to keep
it, so every sidecar instance (and every restart) presents the same ID. The lead backs the store
with the persister's topic-id map in the state topic.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class TopicIdStore(Protocol):
    """Durable name → minted topic ID map."""

    async def get_or_create(self, name: str) -> uuid.UUID:
        """The ID recorded for ``name``; mint (uuid4), record and return one if there is none."""
        ...

    async def forget(self, name: str, topic_id: uuid.UUID) -> None:
        """Drop ``name``'s ID if it is still ``topic_id`` (the topic was seen deleted).

        The next ``get_or_create`` then mints a new ID, which is how a recreated topic gets a
        new one. Compare-and-delete so two sidecars racing cannot drop a fresh ID.
        """
        ...


class InMemoryTopicIdStore:
    """A process-local :class:`TopicIdStore` (tests, single-process dev)."""

    def __init__(self) -> None:
        self._ids: dict[str, uuid.UUID] = {}

    async def get_or_create(self, name: str) -> uuid.UUID:
        topic_id = self._ids.get(name)
        if topic_id is None:
            topic_id = self._ids[name] = uuid.uuid4()
        return topic_id

    async def forget(self, name: str, topic_id: uuid.UUID) -> None:
        if self._ids.get(name) == topic_id:
            del self._ids[name]

    def snapshot(self) -> dict[str, uuid.UUID]:
        return dict(self._ids)


class PersisterTopicIds:
    """The TopicIdStore the sidecar gives its Backend: the persister's topic-id map, so minted IDs
    are kept with the share state (any persister with ``topic_id`` and ``delete_topic_id``)."""

    def __init__(self, persister: Any) -> None:
        self.persister = persister

    async def get_or_create(self, name: str) -> uuid.UUID:
        return uuid.UUID(await self.persister.topic_id(name, create=True))

    async def forget(self, name: str, topic_id: uuid.UUID) -> None:
        """Compare-and-delete: only drop the mapping if it still names this (deleted) topic."""
        current = await self.persister.topic_id(name, create=False)
        if current is not None and uuid.UUID(current) == topic_id:
            await self.persister.delete_topic_id(name)
