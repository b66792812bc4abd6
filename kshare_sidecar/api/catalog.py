"""Where Metadata gets topics from: a small async protocol the backend layer satisfies.

Handlers only need names, stable topic IDs and partition counts (``log.types.TopicInfo``); how
the backend discovers them, caches them or notices a recreated topic is its business. The
in-memory catalog serves unit tests and the dev server.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping
from typing import Protocol, runtime_checkable

from ..backend.types import TopicInfo


@runtime_checkable
class TopicCatalog(Protocol):
    """Read-only view of the backend's topics."""

    async def describe_topics(self, names: Collection[str] | None) -> Mapping[str, TopicInfo]:
        """Topics by name; ``None`` means all topics. Unknown names are simply absent.

        Must never create topics (Metadata's ``allow_auto_topic_creation`` is ignored).
        """
        ...

    async def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        """The topic with this ID, or ``None`` (unknown or deleted)."""
        ...


class InMemoryTopicCatalog:
    """A fixed (but mutable) set of topics; for tests and the dev server."""

    def __init__(self, topics: Iterable[TopicInfo] = ()) -> None:
        self._by_name: dict[str, TopicInfo] = {}
        for topic in topics:
            self.add(topic)

    def add(self, topic: TopicInfo) -> None:
        self._by_name[topic.name] = topic

    def remove(self, name: str) -> None:
        self._by_name.pop(name, None)

    async def describe_topics(self, names: Collection[str] | None) -> Mapping[str, TopicInfo]:
        if names is None:
            return dict(self._by_name)
        return {n: self._by_name[n] for n in names if n in self._by_name}

    async def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for topic in self._by_name.values():
            if topic.topic_id == topic_id:
                return topic
        return None
