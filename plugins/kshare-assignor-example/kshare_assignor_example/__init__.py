"""Example kshare plugin: the ``range`` assignor."""

from __future__ import annotations

from kshare_sidecar.assignors import AssignmentSpec, GroupAssignment
from kshare_sidecar.hookspecs import hookimpl


class RangeAssignor:
    """Per topic, split partitions into contiguous runs, one run per subscriber (sorted by id).

    With more subscribers than partitions, extra subscribers share partitions round the ring,
    so every member gets work and every partition has at least one member.
    """

    name = "range"

    def assign(self, spec: AssignmentSpec) -> GroupAssignment:
        result: dict[str, dict[str, set[int]]] = {m: {} for m in spec.members}
        for topic_id in sorted(spec.topics):
            count = spec.topics[topic_id].partition_count
            subs = spec.subscribers(topic_id)
            if count <= 0 or not subs:
                continue
            if len(subs) > count:
                for i, member in enumerate(subs):
                    result[member].setdefault(topic_id, set()).add(i % count)
                continue
            size, extra = divmod(count, len(subs))
            start = 0
            for i, member in enumerate(subs):
                n = size + (1 if i < extra else 0)
                result[member][topic_id] = set(range(start, start + n))
                start += n
        return GroupAssignment(result)


@hookimpl
def register_assignors(register):
    register("range", RangeAssignor, description="contiguous partition ranges per member (example plugin)")
