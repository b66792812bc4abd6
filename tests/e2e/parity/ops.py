"""The operations of a differential sequence. Each ``run(side)`` returns a normalised observation.

An operation's ``repr`` is a line of Python that rebuilds it, so a failing sequence prints as a
replayable list (``run_sequence([Join('a', ('pa',)), Settle(), Fetch('a'), ...])``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.alter_share_group_offsets.v0 import request as alter_req
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_share_group_offsets.v0 import request as delete_req
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_share_group_offsets.v1 import request as offsets_req
from kio.schema.incremental_alter_configs.v1 import request as iac_req
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.share_acknowledge.v2 import request as ack2
from kio.schema.share_fetch.v2 import request as fetch2
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from .model import ACCEPT, Member, Side, acquired_view

GROUP_RESOURCE = 32
GROUP_CONFIG_SOURCE = 8  # DescribeConfigs ConfigSource GROUP_CONFIG
NEXT_EPOCH_WRAP = 2**31 - 1


def _assignment(side: Side, answer: Any) -> dict[str, tuple[int, ...]] | None:
    if answer.assignment is None:
        return None
    return {side.topic_name(tp.topic_id): tuple(sorted(int(p) for p in tp.partitions))
            for tp in answer.assignment.topic_partitions if tp.partitions}


#: Retriable coordinator errors a client retries: a fresh broker is still loading its group
#: coordinator (the first test of a session saw COORDINATOR_LOAD_IN_PROGRESS on Kafka 4.3).
COORDINATOR_BUSY = (14, 15)


def _heartbeat(side: Side, m: Member, epoch: int, topics: tuple[str, ...] | None) -> Any:
    deadline = time.monotonic() + 30
    while True:
        answer = m.wire.call(ShareGroupHeartbeatRequest(  # type: ignore[union-attr]
            group_id=side.group, member_id=m.member_id, member_epoch=epoch, rack_id=None,
            subscribed_topic_names=None if topics is None else tuple(side.real(t) for t in topics)))
        if answer.error_code not in COORDINATOR_BUSY or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


@dataclass(frozen=True)
class Join:
    member: str
    topics: tuple[str, ...]

    def run(self, side: Side) -> Any:
        m = side.member(self.member)
        for t in self.topics:
            side.topic_id(t)
        answer = _heartbeat(side, m, 0, self.topics)
        side.settled = False
        if answer.error_code == 0:
            m.epoch, m.subscribed = int(answer.member_epoch), self.topics
            m.assignment = _assignment(side, answer) or {}
        return {"error": int(answer.error_code), "member_id": answer.member_id == m.member_id,
                "epoch": int(answer.member_epoch), "assignment": dict(sorted(m.assignment.items())),
                "interval_ms": answer.heartbeat_interval.total_seconds() * 1000}


@dataclass(frozen=True)
class Heartbeat:
    """A heartbeat with the member's current epoch, or a stale/ahead/zero one, or from a stranger."""

    member: str
    epoch: str = "current"  # current | stale | ahead | unknown-member

    def run(self, side: Side) -> Any:
        m = side.member(self.member)
        epoch = {"current": m.epoch, "stale": m.epoch - 1, "ahead": m.epoch + 5,
                 "unknown-member": max(m.epoch, 1)}[self.epoch]
        if self.epoch == "unknown-member":
            m = Member("stranger-" + m.member_id[:10], wire=m.wire)
        answer = _heartbeat(side, m, epoch, None)
        if answer.error_code != 0:
            return {"error": int(answer.error_code)}
        if self.epoch == "current":
            m.epoch = int(answer.member_epoch)
            assigned = _assignment(side, answer)
            if assigned is not None:
                m.assignment = assigned
        return {"error": 0, "epoch": int(answer.member_epoch)}


@dataclass(frozen=True)
class Leave:
    member: str

    def run(self, side: Side) -> Any:
        m = side.member(self.member)
        answer = _heartbeat(side, m, -1, None)
        side.settled = False
        if answer.error_code == 0:
            m.epoch, m.assignment, m.subscribed = 0, {}, ()
        return {"error": int(answer.error_code), "epoch": int(answer.member_epoch)}


@dataclass(frozen=True)
class Settle:
    """Heartbeat every joined member until the side's assignments and epochs stop changing.

    First it waits until the group's share-partitions are initialized: Kafka initializes the
    partitions of newly subscribed topics (InitializeShareGroupState) *after* answering the
    heartbeat that subscribed to them, and assigns them at the next heartbeat once that is done
    — one group epoch later. A real client heartbeats seconds later, long after; a Settle right
    behind the join would race the initialization, and which group epochs a member passes
    through (its previous epoch) would be timing. DescribeShareGroupOffsets of all topics lists
    exactly the initialized partitions on both targets.
    """

    budget_s: float = 20.0

    def run(self, side: Side) -> Any:
        deadline, stable, last = time.monotonic() + self.budget_s, 0, None
        _await_initialized(side, min(deadline, time.monotonic() + 5))
        while time.monotonic() < deadline:
            if last is not None:  # this round's heartbeats may have asked for initialization (a new topic)
                _await_initialized(side, min(deadline, time.monotonic() + 5))
            view = {}
            for name, m in sorted(side.members.items()):
                if not m.subscribed:
                    continue
                answer = _heartbeat(side, m, m.epoch, None)
                if answer.error_code != 0:
                    view[name] = f"error {int(answer.error_code)}"
                    continue
                m.epoch = int(answer.member_epoch)
                assigned = _assignment(side, answer)
                if assigned is not None:
                    m.assignment = assigned
                view[name] = {"epoch": m.epoch, "assignment": dict(sorted(m.assignment.items()))}
            covered = all(isinstance(v, dict) for v in view.values())
            stable = stable + 1 if view == last and covered else 0
            last = view
            # Wait for an assignment when there is something to assign (an existing topic).
            assignable = any(side.partitions(t) for m in side.members.values() for t in m.subscribed)
            if stable >= 3 and (not assignable or any(v["assignment"] for v in view.values() if isinstance(v, dict))):
                break
            time.sleep(0.4)
        side.settled = True
        return last


def _await_initialized(side: Side, deadline: float) -> None:
    """Wait (within ``deadline``) until every partition of the existing topics the members
    subscribe to is initialized for the group, i.e. listed by DescribeShareGroupOffsets. (A topic
    created since the last heartbeat is initialized only after the next one: hence the bound.)"""
    wanted = {(t, p) for m in side.members.values() for t in m.subscribed for p in range(side.partitions(t) or 0)}
    if not wanted:
        return
    while time.monotonic() < deadline:
        answer = side.admin.call(offsets_req.DescribeShareGroupOffsetsRequest(groups=(
            offsets_req.DescribeShareGroupOffsetsRequestGroup(group_id=side.group, topics=None),)))
        (g,) = answer.groups
        listed = {(side.symbolic(t.topic_name), int(p.partition_index)) for t in g.topics for p in t.partitions}
        if wanted <= listed:
            return
        time.sleep(0.05)


def _coalesce(ranges: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Adjacent acquired ranges with one delivery count as one: how a broker cuts what it
    acquires into AcquiredRecords pieces (batch_size, log batches, one fetch or two) is its own."""
    out: list[tuple[int, int, int]] = []
    for first, last, count in sorted(ranges):
        if out and out[-1][1] + 1 == first and out[-1][2] == count:
            out[-1] = (out[-1][0], last, count)
        else:
            out.append((first, last, count))
    return out


def _ack_batches(offsets: list[int], ack_type: int) -> list[tuple[int, int, int]]:
    """Contiguous runs of ``offsets`` as (first, last, type)."""
    out: list[tuple[int, int, int]] = []
    for off in sorted(offsets):
        if out and out[-1][1] == off - 1:
            out[-1] = (out[-1][0], off, ack_type)
        else:
            out.append((off, off, ack_type))
    return out


def _pick(held: list[int], which: str) -> list[int]:
    held = sorted(held)
    if which == "first":
        return held[:1]
    if which == "half":
        return held[: max(1, len(held) // 2)]
    return held


def _next_session(m: Member) -> None:
    assert m.session_epoch is not None
    m.session_epoch = 1 if m.session_epoch >= NEXT_EPOCH_WRAP else m.session_epoch + 1


@dataclass(frozen=True)
class Fetch:
    """ShareFetch over the member's share session; optionally acknowledges what it holds first.

    An empty answer is repeated (same session, next epoch) within ``budget_s``: when records
    become fetchable is timing, which records are acquired is semantics. For the same reason a
    member with several partitions fetches until an answer comes back empty: a broker loads a
    share-partition's state on its first fetch, and which partitions are loaded by the time the
    first answer goes out is timing too.
    """

    member: str
    ack: int | None = None
    which: str = "all"
    max_records: int = 20
    batch_size: int = 20
    budget_s: float = 2.0

    def run(self, side: Side) -> Any:
        m = side.member(self.member)
        deadline = time.monotonic() + self.budget_s
        merged: dict[str, Any] = {}
        acks = {}
        if self.ack is not None:
            acks = {tp: _ack_batches(_pick(held, self.which), self.ack) for tp, held in m.acquired.items() if held}
        taken, max_records, max_wait_ms = 0, self.max_records, 500
        while True:
            answer, sent = self._once(side, m, acks, max_records, max_wait_ms)
            merged.setdefault("error", int(answer.error_code))
            if answer.error_code != 0:
                merged["error"] = int(answer.error_code)
                break
            got = False
            for t in answer.responses:
                topic = side.topic_name(t.topic_id)
                for p in t.partitions:
                    view = acquired_view(side, topic, p)
                    key = f"{topic}-{int(p.partition_index)}"
                    slot = merged.setdefault("partitions", {}).setdefault(
                        key, {"error": 0, "ack_error": 0, "acquired": [], "records": []})
                    slot["error"] = slot["error"] or view["error"]
                    slot["ack_error"] = slot["ack_error"] or view["ack_error"]
                    slot["acquired"] += view["acquired"]
                    slot["records"] += view["records"]
                    held = m.acquired.setdefault((topic, int(p.partition_index)), [])
                    held.extend(off for off, _ in view["records"])
                    got = got or bool(view["acquired"])
                    taken += sum(last - first + 1 for first, last, _ in view["acquired"])
            self._after_acks(m, acks, answer)
            acks = {}
            several = sum(len(ps) for ps in m.assignment.values()) > 1
            if time.monotonic() >= deadline or not m.assignment:
                break
            if got and not several:
                # How many records one answer acquires when more are available is the broker's
                # (Kafka reads its log for it; kshare may answer from its read cache, which can end
                # before the log does): top up to max_records — the remainder, at once — as a
                # client's next fetch would. Batch-aligned acquisition makes the sum the same.
                if taken >= self.max_records:
                    break
                max_records, max_wait_ms = self.max_records - taken, 0
                continue
            if not got and taken and not several:
                break  # topped up: nothing more available
            if several and not got and "partitions" in merged and any(
                    v["acquired"] for v in merged["partitions"].values()):
                break  # drained
        # A partition with nothing acquired and no error says nothing (Kafka lists them in a new
        # session's first answer, kshare does not): only those with content are compared.
        merged["partitions"] = {k: {**v, "acquired": _coalesce(v["acquired"])}
                                for k, v in sorted(merged.get("partitions", {}).items())
                                if v["acquired"] or v["error"] or v["ack_error"]}
        return merged

    def _once(self, side: Side, m: Member, acks: dict, max_records: int, max_wait_ms: int) -> tuple[Any, Any]:
        assigned = {(t, p) for t, ps in m.assignment.items() for p in ps}
        if m.session_epoch is None:
            epoch, wanted, forgotten = 0, assigned, set()
            acks = {}  # a new session carries no acknowledgements
        else:
            epoch = m.session_epoch
            wanted = (assigned - m.in_session) | set(acks)
            forgotten = m.in_session - assigned
        topics: dict[str, list] = {}
        for t, p in sorted(wanted):
            batches = tuple(fetch2.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=(k,))
                            for f, last, k in acks.get((t, p), ()))
            topics.setdefault(t, []).append(fetch2.FetchPartition(partition_index=p, acknowledgement_batches=batches))
        gone: dict[str, list[int]] = {}
        for t, p in sorted(forgotten):
            gone.setdefault(t, []).append(p)
        request = fetch2.ShareFetchRequest(
            group_id=side.group, member_id=m.member_id, share_session_epoch=epoch,
            max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
            max_records=max_records, batch_size=self.batch_size,
            topics=tuple(fetch2.FetchTopic(topic_id=side.topic_id(t), partitions=tuple(ps)) for t, ps in topics.items()),
            forgotten_topics_data=tuple(fetch2.ForgottenTopic(topic_id=side.topic_id(t), partitions=tuple(ps))
                                        for t, ps in gone.items()))
        answer = m.wire.call(request)  # type: ignore[union-attr]
        if answer.error_code == 0:
            if m.session_epoch is None:
                m.session_epoch, m.in_session = 1, set(assigned)
            else:
                _next_session(m)
                m.in_session = (m.in_session | wanted) - forgotten
        elif answer.error_code in (INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_NOT_FOUND):
            m.session_epoch, m.in_session = None, set()
        return answer, request

    @staticmethod
    def _after_acks(m: Member, acks: dict, answer: Any) -> None:
        done = {(t, p) for (t, p) in acks}
        for t, p in done:
            acked = {o for f, last, _ in acks[(t, p)] for o in range(f, last + 1)}
            held = m.acquired.get((t, p), [])
            m.acquired[(t, p)] = [o for o in held if o not in acked]


INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_NOT_FOUND = 123, 122


@dataclass(frozen=True)
class Acknowledge:
    """ShareAcknowledge of held records (``which``) with one type, in the member's session."""

    member: str
    ack: int = ACCEPT
    which: str = "all"
    close: bool = False

    def run(self, side: Side) -> Any:
        m = side.member(self.member)
        acks = {tp: _ack_batches(_pick(held, self.which), self.ack) for tp, held in m.acquired.items() if held}
        return _acknowledge(side, m, acks, close=self.close)


@dataclass(frozen=True)
class AckRange:
    """Acknowledge an arbitrary offset range (records not acquired, out of range, overlapping)."""

    member: str
    topic: str
    partition: int
    first: int
    last: int
    ack: int = 1

    def run(self, side: Side) -> Any:
        m = side.member(self.member)
        return _acknowledge(side, m, {(self.topic, self.partition): [(self.first, self.last, self.ack)]})


def _acknowledge(side: Side, m: Member, acks: dict, *, close: bool = False) -> Any:
    epoch = -1 if close else (m.session_epoch if m.session_epoch is not None else 0)
    topics: dict[str, list] = {}
    for (t, p), batches in sorted(acks.items()):
        topics.setdefault(t, []).append(ack2.AcknowledgePartition(partition_index=p, acknowledgement_batches=tuple(
            ack2.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=(k,)) for f, last, k in batches)))
    answer = m.wire.call(ack2.ShareAcknowledgeRequest(  # type: ignore[union-attr]
        group_id=side.group, member_id=m.member_id, share_session_epoch=epoch, is_renew_ack=False,
        topics=tuple(ack2.AcknowledgeTopic(topic_id=side.topic_id(t), partitions=tuple(ps)) for t, ps in topics.items())))
    if answer.error_code == 0:
        if close:
            m.session_epoch, m.in_session = None, set()
        elif m.session_epoch is not None:
            _next_session(m)
        Fetch._after_acks(m, acks, answer)
    elif answer.error_code in (INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_NOT_FOUND):
        m.session_epoch, m.in_session = None, set()
    parts = {f"{side.topic_name(t.topic_id)}-{int(p.partition_index)}": int(p.error_code)
             for t in answer.responses for p in t.partitions}
    return {"error": int(answer.error_code), "partitions": dict(sorted(parts.items()))}


@dataclass(frozen=True)
class BadSession:
    """A ShareFetch with a session epoch the broker cannot accept."""

    member: str
    epoch: str = "ahead"  # ahead | unopened

    def run(self, side: Side) -> Any:
        m = side.member(self.member)
        epoch = (m.session_epoch or 0) + 5 if self.epoch == "ahead" else 1
        if self.epoch == "unopened" and m.session_epoch is not None:
            return {"skipped": "session open"}
        answer = m.wire.call(fetch2.ShareFetchRequest(  # type: ignore[union-attr]
            group_id=side.group, member_id=m.member_id, share_session_epoch=epoch,
            max_wait=timedelta(milliseconds=100), min_bytes=1, max_bytes=1 << 20, max_records=10,
            batch_size=10, topics=(), forgotten_topics_data=()))
        return {"error": int(answer.error_code)}


@dataclass(frozen=True)
class CloseSession:
    member: str

    def run(self, side: Side) -> Any:
        m = side.member(self.member)
        if m.session_epoch is None:
            return {"skipped": "no session"}
        answer = m.wire.call(fetch2.ShareFetchRequest(  # type: ignore[union-attr]
            group_id=side.group, member_id=m.member_id, share_session_epoch=-1,
            max_wait=timedelta(milliseconds=0), min_bytes=0, max_bytes=1 << 20, max_records=10,
            batch_size=10, topics=(), forgotten_topics_data=()))
        if answer.error_code == 0:
            m.session_epoch, m.in_session = None, set()
            m.acquired.clear()  # a closed session releases what it held
        return {"error": int(answer.error_code), "partitions": len(answer.responses)}


@dataclass(frozen=True)
class Produce:
    topic: str
    partition: int
    count: int

    def run(self, side: Side) -> Any:
        seq = getattr(side, "produced", 0) + 1
        error, base = side.produce(self.topic, self.partition,
                                   [f"{side.group}-{seq}-{i}".encode() for i in range(self.count)])
        if error == 0:
            side.produced = seq  # values name the n-th successful produce: retries do not shift them
            # The offset too: both clusters' topics see the same batches in the same order (as
            # the fetched offsets, compared since the start, show); the new topic is the sequence's own.
            return {"error": 0, "base_offset": base}
        return {"error": error}


@dataclass(frozen=True)
class Describe:
    def run(self, side: Side) -> Any:
        answer = side.admin.call(ShareGroupDescribeRequest(group_ids=(side.group,), include_authorized_operations=False))
        (g,) = answer.groups
        ids = {m.member_id: name for name, m in side.members.items()}
        members = {}
        for mem in g.members:
            view: dict[str, Any] = {"subscribed": sorted(side.symbolic(t) for t in mem.subscribed_topic_names)}
            if side.settled:
                view["assignment"] = {side.symbolic(tp.topic_name): sorted(tp.partitions)
                                      for tp in mem.assignment.topic_partitions}
                view["epoch"] = int(mem.member_epoch)
            members[ids.get(mem.member_id, "?")] = view
        epochs = {"group_epoch": int(g.group_epoch), "assignment_epoch": int(g.assignment_epoch)} \
            if side.settled else {}
        return {"error": int(g.error_code), "state": g.group_state, "assignor": g.assignor_name,
                **epochs, "members": dict(sorted(members.items()))}


@dataclass(frozen=True)
class DescribeOffsets:
    topics: tuple[str, ...] | None = None

    def run(self, side: Side) -> Any:
        # Only partitions that exist: Kafka 4.3.1 never answers a request naming one that does not
        # (docs/compatibility.md); kshare answers UNKNOWN_TOPIC_OR_PARTITION for it.
        req_topics = None if self.topics is None else tuple(
            offsets_req.DescribeShareGroupOffsetsRequestTopic(topic_name=side.real(t),
                                                              partitions=tuple(range(side.partitions(t) or 1)))
            for t in self.topics)
        answer = side.admin.call(offsets_req.DescribeShareGroupOffsetsRequest(groups=(
            offsets_req.DescribeShareGroupOffsetsRequestGroup(group_id=side.group, topics=req_topics),)))
        (g,) = answer.groups
        # The start offset itself is not compared: Kafka reports the SPSO of its last state
        # write, which it sends *before* moving the SPSO past the acks it carries, so it lags
        # one write behind; kshare writes the moved SPSO (docs/compatibility.md). Whether the
        # share-partition has state (-1 or not) and the lag are compared.
        parts = {f"{side.symbolic(t.topic_name)}-{int(p.partition_index)}": (int(p.error_code), int(p.start_offset) >= 0,
                                                                      int(p.lag))
                 for t in g.topics for p in t.partitions}
        return {"error": int(g.error_code), "partitions": dict(sorted(parts.items()))}


@dataclass(frozen=True)
class AlterOffsets:
    topic: str
    partition: int
    offset: int

    def run(self, side: Side) -> Any:
        answer = side.admin.call(alter_req.AlterShareGroupOffsetsRequest(group_id=side.group, topics=(
            alter_req.AlterShareGroupOffsetsRequestTopic(topic_name=side.real(self.topic), partitions=(
                alter_req.AlterShareGroupOffsetsRequestPartition(partition_index=self.partition,
                                                                 start_offset=self.offset),)),)))
        parts = {f"{side.symbolic(t.topic_name)}-{int(p.partition_index)}": int(p.error_code)
                 for t in answer.responses for p in t.partitions}
        return {"error": int(answer.error_code), "partitions": parts}


@dataclass(frozen=True)
class DeleteOffsets:
    topic: str

    def run(self, side: Side) -> Any:
        answer = side.admin.call(delete_req.DeleteShareGroupOffsetsRequest(group_id=side.group, topics=(
            delete_req.DeleteShareGroupOffsetsRequestTopic(topic_name=side.real(self.topic)),)))
        return {"error": int(answer.error_code),
                "topics": {side.symbolic(t.topic_name): int(t.error_code) for t in answer.responses}}


@dataclass(frozen=True)
class DeleteGroup:
    def run(self, side: Side) -> Any:
        answer = side.admin.call(DeleteGroupsRequest(groups_names=(side.group,)))
        return {"error": [int(r.error_code) for r in answer.results]}


@dataclass(frozen=True)
class SetConfig:
    key: str
    value: str | None
    validate_only: bool = False

    def run(self, side: Side) -> Any:
        answer = side.admin.call(iac_req.IncrementalAlterConfigsRequest(validate_only=self.validate_only, resources=(
            iac_req.AlterConfigsResource(resource_type=GROUP_RESOURCE, resource_name=side.group, configs=(
                iac_req.AlterableConfig(name=self.key, config_operation=0 if self.value is not None else 1,
                                        value=self.value),)),)))
        errors = [int(r.error_code) for r in answer.responses]
        if errors == [0] and not self.validate_only:
            self._await_visible(side)
        return {"error": errors}

    def _await_visible(self, side: Side, timeout: float = 10.0) -> None:
        """Wait until a describe shows the change: Kafka applies group configs through its metadata log, so a
        describe sent right after the alter may still see the old value (a CI run caught exactly that);
        kshare applies them at once. Comparing describes only makes sense once both have settled."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = DescribeConfigs((self.key,)).run(side)["configs"].get(self.key)
            if shown is None:
                return
            value, _, source, _ = shown
            if (self.value is None and source != GROUP_CONFIG_SOURCE) or (self.value is not None and value == self.value):
                return
            time.sleep(0.05)


@dataclass(frozen=True)
class DescribeConfigs:
    keys: tuple[str, ...] | None = None

    def run(self, side: Side) -> Any:
        answer = side.admin.call(DescribeConfigsRequest(include_synonyms=False, include_documentation=False, resources=(
            DescribeConfigsResource(resource_type=GROUP_RESOURCE, resource_name=side.group,
                                    configuration_keys=self.keys),)))
        (r,) = answer.results
        return {"error": int(r.error_code),
                "configs": {c.name: (c.value, c.read_only, int(c.config_source), c.is_sensitive) for c in r.configs}}


@dataclass(frozen=True)
class ListGroups:
    types: tuple[str, ...] = ()
    states: tuple[str, ...] = ()

    def run(self, side: Side) -> Any:
        answer = side.admin.call(ListGroupsRequest(states_filter=self.states, types_filter=self.types))
        mine = [(g.group_state, g.group_type, g.protocol_type) for g in answer.groups if g.group_id == side.group]
        return {"error": int(answer.error_code), "group": mine}


@dataclass(frozen=True)
class Wait:
    """Let time pass (acquisition locks expire, sessions time out) — the same on both sides."""

    seconds: float

    def run(self, side: Side) -> Any:
        return None


@dataclass(frozen=True)
class FindCoordinator:
    """What every client does first; repeated while the coordinator is still loading (timing)."""

    budget_s: float = 30.0

    def run(self, side: Side) -> Any:
        from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

        deadline = time.monotonic() + self.budget_s
        while True:
            answer = side.admin.call(FindCoordinatorRequest(key_type=0, coordinator_keys=(side.group,)))
            (c,) = answer.coordinators
            if c.error_code == 0 or time.monotonic() > deadline:
                return {"error": int(c.error_code), "port": c.port > 0}
            time.sleep(0.2)
