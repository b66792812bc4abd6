"""The Metadata handler's view of the backend: api.catalog.TopicCatalog over :class:`Backend`.

Why here: it is the backend's topics with the sidecar's internal ones (the state topic) left out;
``app.py`` hands it to the API registry, which knows it only by the TopicCatalog protocol.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection

from .backend import Backend
from .types import TopicInfo


class BackendCatalog:
    """The Metadata handler's view of the backend (api.catalog.TopicCatalog): internal topics hidden."""

    def __init__(self, backend: Backend, hidden: set[str]) -> None:
        self.backend = backend
        self.hidden = hidden

    async def describe_topics(self, names: Collection[str] | None) -> dict[str, TopicInfo]:
        topics = await self.backend.describe_topics(list(names) if names is not None else None)
        return {n: t for n, t in topics.items() if n not in self.hidden}

    async def refresh_topics(self, names: Collection[str]) -> None:
        await self.backend.refresh_topics(names)

    async def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        info = await self.backend.resolve_topic_id(topic_id)
        return None if info is None or info.name in self.hidden else info
