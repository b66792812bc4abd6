"""What a move carries and what it cannot, computed from the two sides' state (pure).

Native Kafka's admin APIs carry one number per share-partition, its start offset (SPSO), and the
group's configs. Everything else about the in-flight window is lost in a move:

- records acknowledged or archived *above* the start offset (a record before them is still in
  flight) are done on the source side but lie past the start offset the target gets: the target
  delivers them again. That count is the move's cost, and :attr:`PartitionPlan.redelivered`;
- records released (AVAILABLE with a delivery count) are delivered by either side anyway, but
  their delivery counts start over on the target (neither side's admin API writes a count);
- kshare's own group configs (share.assignor, release backoff, key ordering) have no native
  equivalent.

On kshare's side the window is read from the share-partition's snapshot (``summarize``: what is
acknowledged or archived at or above the start offset); on native Kafka's from
DescribeShareGroupOffsets v1: lag = end offset - start offset - (acknowledged or archived at or
above it) (KIP-1226), so that count is end - start - lag.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..config import GROUP_CONFIG_NAMES, group_config_setting
from ..persist.model import PartitionState
from ..persist.records import summarize

#: kshare's group config that says where a group is served (docs/migration.md); never carried.
COORDINATOR_CONFIG = "share.coordinator"


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """One share-partition's move. ``start_offset`` -1: never set on the source (the target
    resolves it from share.auto.offset.reset at the first fetch, as the source would have)."""

    topic: str
    partition: int
    start_offset: int
    redelivered: int = 0  # acknowledged or archived above the start offset: delivered again
    counts_reset: int = 0  # released records whose delivery counts start over on the target
    end_offset: int | None = None
    error: str | None = None  # the target refused this share-partition (--execute)


@dataclass(slots=True)
class GroupPlan:
    """One group's move, as the dry run prints it and --execute carries it out."""

    group: str
    direction: str  # "to-native" | "from-native"
    source: str
    target: str
    partitions: list[PartitionPlan] = field(default_factory=list)
    carried: dict[str, str] = field(default_factory=dict)  # configs written to the target
    not_carried: dict[str, str] = field(default_factory=dict)  # key -> why not
    refusal: str | None = None  # one line: why nothing moves, and what to do
    notes: list[str] = field(default_factory=list)
    moved: bool = False

    @property
    def redelivered(self) -> int:
        return sum(p.redelivered for p in self.partitions)

    @property
    def counts_reset(self) -> int:
        return sum(p.counts_reset for p in self.partitions)

    def offsets(self) -> dict[str, dict[int, int]]:
        """topic -> partition -> start offset, for the target's AlterShareGroupOffsets (unset
        start offsets are left to the target's share.auto.offset.reset)."""
        out: dict[str, dict[int, int]] = {}
        for p in self.partitions:
            if p.start_offset >= 0:
                out.setdefault(p.topic, {})[p.partition] = p.start_offset
        return out

    def as_json(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "partitions"},
                "partitions": [asdict(p) for p in self.partitions],
                "redelivered": self.redelivered, "counts_reset": self.counts_reset}


def kshare_partition(topic: str, partition: int, state: PartitionState) -> PartitionPlan:
    """A kshare share-partition snapshot as its move to native Kafka."""
    summary = summarize(state)
    return PartitionPlan(topic, partition, state.start_offset, summary.completed_count, summary.redelivering_count)


def native_partition(topic: str, partition: int, start_offset: int, lag: int, end_offset: int,
                     end_before: int | None = None) -> PartitionPlan:
    """A native share-partition (DescribeShareGroupOffsets v1 and the log end) as its move to kshare.

    Kafka's persisted start offset may lag behind records it has all acknowledged (seen on 4.3.1:
    start 10, lag 0 after 10..19 were accepted). Lag 0 says every record up to the end Kafka
    counted to is done, so the start offset moves to ``end_before``, the end read *before* the
    describe (never past a record produced after Kafka counted) and nothing is delivered again."""
    if start_offset < 0:
        return PartitionPlan(topic, partition, -1, end_offset=end_offset)
    if lag < 0:  # unknown lag: the window cannot be counted
        return PartitionPlan(topic, partition, start_offset, end_offset=end_offset,
                             error="the native cluster did not report its lag")
    if lag == 0 and end_before is not None:
        return PartitionPlan(topic, partition, max(start_offset, end_before), 0, end_offset=end_offset)
    return PartitionPlan(topic, partition, start_offset, max(0, end_offset - start_offset - lag), end_offset=end_offset)


def configs_to_native(own: Mapping[str, Any], kshare_values: Mapping[str, Any],
                      native_values: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """What the native group gets: (carried as text, not carried -> why). A share-group config is
    carried when the group overrides it in kshare or its effective value there (the sidecar-wide
    default) differs from the native cluster's, so the group behaves the same after the move —
    share.auto.offset.reset above all, which decides where a share-partition without a start offset
    begins. kshare's own keys have no native equivalent."""
    carried: dict[str, str] = {}
    not_carried: dict[str, str] = {}
    for key in sorted({*own, *kshare_values}):
        if key == COORDINATOR_CONFIG or not _share_key(key):
            continue
        value = _text(key, own[key] if key in own else kshare_values[key])
        if key not in native_values:
            if key in own:
                not_carried[key] = f"{value}: kshare's own, the native cluster has no such group config"
        elif key in own or value != native_values[key]:
            carried[key] = value
    return carried, not_carried


def configs_from_native(own: Mapping[str, str], native_values: Mapping[str, str],
                        kshare_values: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """What kshare's group gets, by the same rule as :func:`configs_to_native` the other way: a
    native key kshare does not know stays behind when the group overrides it."""
    carried: dict[str, str] = {}
    not_carried: dict[str, str] = {}
    for key in sorted({*own, *native_values}):
        value = own[key] if key in own else native_values[key]
        if key not in GROUP_CONFIG_NAMES:
            if key in own:
                not_carried[key] = f"{value}: kshare has no such group config"
        elif key in own or (_share_key(key) and value != _text(key, kshare_values.get(key, ""))):
            carried[key] = value
    return carried, not_carried


def _share_key(key: str) -> bool:
    """A share group's behaviour: ``share.*`` and the dead-letter keys (not consumer.* / streams.*)."""
    return key.startswith(("share.", "errors.deadletterqueue."))


def _text(key: str, value: Any) -> str:
    """A stored override as Kafka writes it: booleans lowercase (records keep ``True``)."""
    try:
        kind = group_config_setting(key).kind
    except KeyError:
        kind = str
    if kind is bool or isinstance(value, bool):
        return "true" if str(value).strip().lower() in ("true", "1") else "false"
    return str(value)


__all__ = ["COORDINATOR_CONFIG", "GroupPlan", "PartitionPlan", "configs_from_native", "configs_to_native",
           "kshare_partition", "native_partition"]
