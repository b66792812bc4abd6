"""The two ways Kafka names a partition, under Kafka's own names.

Why: the backend reads user topics by *name* (Fetch v12 and ListOffsets take names), while share
groups address share-partitions by *topic id* (ShareFetch, ShareAcknowledge and the share state
are keyed by ``Uuid``). Both used to be called ``TopicPartition``; Kafka calls the second
``TopicIdPartition``, and so do we.
"""

from __future__ import annotations

import uuid
from typing import TypeAlias

#: (topic name, partition index) — Kafka's ``TopicPartition``.
TopicPartition: TypeAlias = tuple[str, int]

#: (topic id, partition index) — Kafka's ``TopicIdPartition`` (without the name it also carries).
TopicIdPartition: TypeAlias = tuple[uuid.UUID, int]
