"""kshare's side of a move: its state of a group, read from the state topic.

Read with the persister's own replay (:meth:`~kshare_sidecar.persist.base.BasePersister.replay_view`:
the codec, the skip rule and the stale-record rule a sidecar recovers with), never taken over: a
sidecar serving the topic meanwhile is not disturbed, and what is read is what a sidecar started
now would restore. Writes to kshare's state are never made here: they go through a running
sidecar's admin APIs (migrate/moves.py), so its persister writes them under its own fencing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..persist.codec import KIND_GROUP, KIND_MEMBER, KIND_PARTITION, KIND_TOPIC_ID
from ..persist.model import PartitionState
from ..persist.ownership import group_home, share_partition_home
from ..persist.records import GroupRecord, MemberRecord


@dataclass(slots=True)
class KshareGroup:
    """One group as kshare's state topic holds it."""

    group: str
    record: GroupRecord | None = None
    members: dict[str, MemberRecord] = field(default_factory=dict)
    partitions: dict[tuple[str, int], PartitionState] = field(default_factory=dict)  # (topic id, p)

    @property
    def exists(self) -> bool:
        return self.record is not None or bool(self.partitions) or bool(self.members)

    @property
    def configs(self) -> Mapping[str, Any]:
        return self.record.configs if self.record is not None else {}

    def member_lines(self) -> list[str]:
        return [f"{m.client_id or '?'} ({member_id}) on {m.client_host or '?'}"
                for member_id, m in sorted(self.members.items())]


class KshareState:
    """The state topic seen through a persister that is never started (``TopicPersister`` built
    from the sidecar's options; ``adopt_topic`` takes the existing topic's partition count)."""

    def __init__(self, persister: Any) -> None:
        self.persister = persister
        self._opened = False
        self.topic_names: dict[str, str] = {}  # topic id -> name, from the topic-id map

    async def open(self) -> None:
        if not self._opened:
            await self.persister.adopt_topic()
            self._opened = True

    async def read(self, groups: Iterable[str], *, narrow: Mapping[str, KshareGroup] | None = None
                   ) -> dict[str, KshareGroup]:
        """The state of ``groups``. ``narrow``: a previous read, whose groups' state partitions
        alone are replayed again (a drain wait re-reads often; the whole topic once)."""
        await self.open()
        wanted = list(dict.fromkeys(groups))
        partitions = None
        if narrow is not None:
            n = self.persister.partitions
            homes = {group_home(g, n) for g in wanted}
            homes |= {share_partition_home(tid, p, n) for g in narrow.values() for tid, p in g.partitions}
            partitions = sorted(homes)
        entities = await self.persister.replay_view(partitions)
        out = {g: KshareGroup(g) for g in wanted}
        for (kind, ident), entity in entities.items():
            if kind == KIND_TOPIC_ID:
                self.topic_names[str(entity)] = ident
            elif kind == KIND_GROUP and ident in out:
                out[ident].record = entity
            elif kind == KIND_MEMBER and ident[0] in out:
                out[ident[0]].members[ident[1]] = entity
            elif kind == KIND_PARTITION and ident.group_id in out:
                out[ident.group_id].partitions[(ident.topic_id, ident.partition)] = entity.state
        return out

    async def close(self) -> None:
        await self.persister.close()


__all__ = ["KshareGroup", "KshareState"]
