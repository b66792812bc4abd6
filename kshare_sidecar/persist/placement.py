"""Where each entity of the state topic lives: its state partition, under a placement.

The rules every part of the persister and its readers outside persist/ (the cluster view, the
state tail, migration) share; moving records between placements is persist/layout.py's.
"""

from __future__ import annotations

import zlib
from typing import Any

from kshare_sidecar.persist.codec import KIND_GROUP, KIND_LAYOUT, KIND_MEMBER, KIND_OWNER, KIND_PARTITION

EntityKey = tuple[str, Any]  # (kind, identity)


#: How share-partition records are spread over the state partitions. ``topic-partition`` (the
#: layout of every sidecar, :data:`LAYOUT`): by topic id and partition only, so every group's state
#: of one user partition is on one state partition — a cluster of sidecars leads a user
#: partition for all groups from the sidecar that owns that state partition, as a broker does, and a
#: single sidecar's state topic serves a cluster as it is. ``key``: by the whole key (group, topic,
#: partition) — what single sidecars of older builds wrote; read only to move it (persist/layout.py).
PLACEMENTS = ("key", "topic-partition")
LAYOUT = "topic-partition"
LEGACY_LAYOUT = "key"


def state_partition_for(kind: str, ident: Any, partitions: int, placement: str = LAYOUT) -> int:
    """Stable placement of an entity on the state topic's partitions (see :data:`PLACEMENTS`).
    Group records and topic-id entries are placed by their kind and name in both layouts, a group's
    member records with its group record (its coordinator owns them all); owner and layout records
    name their partition."""
    if kind in (KIND_OWNER, KIND_LAYOUT):
        return int(ident)
    if kind == KIND_MEMBER:
        kind, ident = KIND_GROUP, ident[0]
    if kind == KIND_PARTITION:
        if placement == "key":
            text = f"{ident.group_id}:{ident.topic_id}:{ident.partition}"
        else:
            return share_partition_home(ident.topic_id, ident.partition, partitions)
    else:
        text = f"{kind}:{ident}"
    return zlib.crc32(text.encode()) % partitions


def share_partition_home(topic_id: str, partition: int, partitions: int) -> int:
    """The state partition of every share-partition of user partition ``topic_id``-``partition``
    (placement ``topic-partition``): its owner is that user partition's share-partition leader."""
    return zlib.crc32(f"{topic_id}:{partition}".encode()) % partitions


def group_home(group_id: str, partitions: int) -> int:
    """The state partition of a group's record: its owner coordinates the group."""
    return state_partition_for(KIND_GROUP, group_id, partitions)
