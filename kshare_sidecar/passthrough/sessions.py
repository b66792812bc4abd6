"""One client's share session with "the sidecar", spread over the backend's brokers.

For a share group the backend serves (passthrough/native.py) when the backend has several brokers. The
client holds one share session, with the one broker it knows — the sidecar, leader of every
partition. On the backend a share session lives on one broker and covers the partitions that broker
leads. So the sidecar keeps, per client connection and (group, member), a session of its own on
each backend broker, with its own epochs: a client's ShareFetch or ShareAcknowledge is split by the
partitions' current leaders; every broker with a session gets its part (its partitions added,
forgotten and acknowledged; an incremental fetch that changes nothing still fetches from what its
session holds); the answers are merged. A broker whose session is lost (SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH, ...) or that cannot be reached answers its partitions with
NOT_LEADER_OR_FOLLOWER (retriable: the client refreshes its metadata and goes on) and is opened
afresh, at epoch 0, by the next request; the client's own session goes on. A partition whose leader
moved is forgotten at the old broker and added at the new one.

Cost: the merged answer waits for every broker's, so a long poll lasts as long as the slowest one
(up to the client's MaxWaitMs) even when another broker had records at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from ..backend.brokerconn import BrokerConnError
from ..protocol.constants import ApiKey
from ..wire import codec
from . import leaders as leader_hints
from . import routes
from .pool import BackendPool, BackendUnavailable, Upstream, decode, encode

log = logging.getLogger("kshare.forward.sessions")

Tp = tuple[uuid.UUID, int]
_SPEC = routes.PARTITIONS[ApiKey.SHARE_FETCH]  # ShareAcknowledge's is the same
_LOST = ErrorCode.not_leader_or_follower


@dataclasses.dataclass
class _Node:
    epoch: int = 0  # what its next request carries; 0 opens a session there
    parts: set[Tp] = dataclasses.field(default_factory=set)  # what its session holds


@dataclasses.dataclass
class _Session:
    parts: set[Tp] = dataclasses.field(default_factory=set)  # the client's session
    nodes: dict[int, _Node] = dataclasses.field(default_factory=dict)


class SplitSessions:
    """The raw handler of a marked group's ShareFetch and ShareAcknowledge on a backend of several
    brokers. ``upstream(conn)``: the client connection's backend connections (the forwarder's)."""

    def __init__(self, pool: BackendPool, upstream: Callable[[Any], Upstream],
                 node: Callable[[Any], Any] | None = None) -> None:
        self.pool = pool
        self.upstream = upstream
        self.node = node  # (client connection) -> the sidecar's NodeIdentity there: leader hints name it
        self._sessions: dict[tuple[int, str, str], _Session] = {}
        self._watched: set[int] = set()

    async def __call__(self, conn: Any, frame: bytes, release: Callable[[], None]) -> bytes:
        decoded = codec.decode_request(frame)
        body, fetch = decoded.body, decoded.api_key == ApiKey.SHARE_FETCH
        conn_id = getattr(conn, "conn_id", 0)
        key = (conn_id, body.group_id or "", body.member_id or "")
        self._watch(conn, conn_id)
        epoch = int(body.share_session_epoch)
        stale: set[int] = set()  # brokers of a session the client opens afresh: closed unless reopened
        if epoch == 0:
            old = self._sessions.get(key)
            stale = {n for n, ns in old.nodes.items() if ns.epoch} if old is not None else set()
            self._sessions[key] = _Session()
        session = self._sessions.get(key)
        if session is None:  # the sidecar never saw this session open (it restarted): the client opens it again
            release()
            return _top_level(decoded, ErrorCode.share_session_not_found, "the share session is not known here")
        entries = {(t.topic_id, int(p.partition_index)): (t, p) for t in body.topics for p in t.partitions}
        if fetch:
            session.parts |= set(entries)
            session.parts -= {(t.topic_id, int(p)) for t in body.forgotten_topics_data for p in t.partitions}
        leaders = {tp: await self._leader(tp) for tp in session.parts | set(entries)}
        parts, refused = self._plan(body, fetch, epoch, session, entries, leaders)
        for node in stale - set(parts):
            parts[node] = _sub_request(body, -1, [], set(), fetch)
        up = self.upstream(conn)
        sent: list[tuple[int, Any, asyncio.Future[Any] | None]] = []
        for node, sub in parts.items():  # written in order before the client's next request
            try:
                sent.append((node, sub, await up.conn(node).send(encode(sub, getattr(decoded.header, "client_id", None)))))
            except (BrokerConnError, TimeoutError, BackendUnavailable) as exc:
                log.info("share session part for broker %d not sent: %s", node, exc)
                sent.append((node, sub, None))
        release()
        if epoch == -1:
            self._sessions.pop(key, None)
        answers = list(refused)
        for node, sub, fut in sent:
            answers.append(await self._answer(decoded, session, node, sub, fut))
        merged = self._merge(decoded, answers)
        if self.node is not None:
            n = self.node(conn)
            merged = leader_hints.point_at_sidecar(merged, n.node_id, n.host, n.port, n.rack)
        return codec.encode_response(merged, decoded.correlation_id)

    def _plan(self, body: Any, fetch: bool, epoch: int, session: _Session, entries: dict[Tp, Any],
              leaders: dict[Tp, int | None]) -> tuple[dict[int, Any], list[Any]]:
        """Each broker's part of the request (node -> request body), and the answers of partitions
        that cannot be sent (no leader; acknowledgements for a broker without a session)."""
        led = {tp: n for tp, n in leaders.items() if n is not None}
        by_node: dict[int, set[Tp]] = {}
        for tp in session.parts:
            if tp in led:
                by_node.setdefault(led[tp], set()).add(tp)
        nodes = set(by_node) | {led[tp] for tp in entries if tp in led}
        open_ = {n for n, ns in session.nodes.items() if ns.epoch}
        if fetch:
            nodes |= open_  # what moved away from them is forgotten there
        if epoch == -1:  # closing: every open session, and acknowledgements wherever they go
            nodes = open_ | {led[tp] for tp in entries if tp in led}
        orphans = [entries[tp] for tp in entries if leaders[tp] is None]
        refused_entries: list[Any] = []
        out: dict[int, Any] = {}
        for node in sorted(nodes):
            ns = session.nodes.setdefault(node, _Node())
            now = by_node.get(node, set())
            mine = {tp: entries[tp] for tp in entries if led.get(tp) == node}
            forgotten: set[Tp] = set()
            if epoch == -1:
                if ns.epoch == 0:  # no session there to close or to acknowledge in
                    refused_entries += list(mine.values())
                    continue
                send_epoch, topics = -1, list(mine.values())
            elif ns.epoch == 0:  # opening: its whole share of the session, no acknowledgements
                if not fetch or not now:
                    refused_entries += list(mine.values())
                    continue
                send_epoch = 0
                topics = [(_topic_of(body, tp), _bare(body, tp)) for tp in sorted(now, key=str)]
                refused_entries += [e for tp, e in mine.items() if e[1].acknowledgement_batches]
            else:
                send_epoch, forgotten = ns.epoch, (ns.parts - now if fetch else set())
                added = {tp: (_topic_of(body, tp), _bare(body, tp)) for tp in now - ns.parts} if fetch else {}
                topics = list({**added, **mine}.values())
                if not topics and not forgotten and not (fetch and now):
                    continue
            ns.parts = set(now) if fetch else ns.parts
            ns.epoch = 0 if send_epoch == -1 else send_epoch + 1
            out[node] = _sub_request(body, send_epoch, topics, forgotten, fetch)
        if epoch == -1:
            session.nodes.clear()
        errors = [routes.partition_error_response(_resp_cls(body), _sub_request(body, epoch, entries_, set(), fetch),
                                                  _SPEC, code)
                  for entries_, code in ((orphans, _LOST), (refused_entries, ErrorCode.share_session_not_found))
                  if entries_]
        return out, errors

    async def _answer(self, decoded: codec.DecodedRequest, session: _Session, node: int, sub: Any,
                      fut: asyncio.Future[Any] | None) -> Any:
        answer = None
        if fut is not None:
            try:
                payload = await fut
                answer = decode(decoded.api_key, decoded.api_version, payload)
            except (BrokerConnError, TimeoutError) as exc:
                log.info("share session part for broker %d failed: %s", node, exc)
        if answer is not None and answer.error_code == ErrorCode.none:
            if any(int(p.error_code) in _LEADERSHIP for t in answer.responses for p in t.partitions):
                self.pool.forget_leaders()
            return answer
        code = ErrorCode(answer.error_code) if answer is not None else None
        log.info("share session on broker %d: %s; opened afresh at the next request", node,
                 code.name if code is not None else "unreachable")
        ns = session.nodes.get(node)
        if ns is not None:
            ns.epoch, ns.parts = 0, set()
        return routes.partition_error_response(decoded.response_class, sub, _SPEC, _LOST)

    def _merge(self, decoded: codec.DecodedRequest, answers: list[Any]) -> Any:
        answers = [a for a in answers if a is not None]
        if not answers:
            return routes.error_entity(decoded.response_class, ErrorCode.none)
        merged = routes.merge_partitions(answers, _SPEC)
        endpoints = tuple(e for a in answers for e in getattr(a, "node_endpoints", ()))
        if endpoints:  # named again as the sidecar by the caller
            merged = dataclasses.replace(merged, node_endpoints=endpoints)
        timeouts = [a.acquisition_lock_timeout for a in answers if hasattr(a, "acquisition_lock_timeout")
                    and a.acquisition_lock_timeout.total_seconds() > 0]
        if timeouts:
            merged = dataclasses.replace(merged, acquisition_lock_timeout=min(timeouts))
        return merged

    async def _leader(self, tp: Tp) -> int | None:
        try:
            return await self.pool.leader(tp[0], tp[1])
        except BackendUnavailable:
            return None

    def _watch(self, conn: Any, conn_id: int) -> None:
        if conn is not None and conn_id not in self._watched:
            self._watched.add(conn_id)
            conn.add_close_callback(lambda _c: self._forget(conn_id))

    def _forget(self, conn_id: int) -> None:
        self._watched.discard(conn_id)
        for key in [k for k in self._sessions if k[0] == conn_id]:
            del self._sessions[key]


_LEADERSHIP = {int(ErrorCode.not_leader_or_follower), int(ErrorCode.fenced_leader_epoch),
               int(ErrorCode.unknown_topic_or_partition)}


def _resp_cls(body: Any) -> type:
    return codec.response_class(int(type(body).__api_key__), int(type(body).__version__))


def _topic_of(body: Any, tp: Tp) -> Any:
    topic_cls = routes.item_class(type(body), "topics")
    assert topic_cls is not None
    return topic_cls(topic_id=tp[0], partitions=())


def _bare(body: Any, tp: Tp) -> Any:
    """A partition entry that adds ``tp`` without acknowledging anything."""
    topic_cls = routes.item_class(type(body), "topics")
    part_cls = routes.item_class(topic_cls, "partitions") if topic_cls is not None else None
    assert part_cls is not None
    return part_cls(partition_index=i32(tp[1]), acknowledgement_batches=())


def _sub_request(body: Any, epoch: int, entries: list[tuple[Any, Any]], forgotten: set[Tp], fetch: bool) -> Any:
    """``body`` for one broker: its session epoch, its partitions (grouped by topic), what it forgets."""
    topics: dict[uuid.UUID, tuple[Any, list[Any]]] = {}
    for topic, part in entries:
        topics.setdefault(topic.topic_id, (topic, []))[1].append(part)
    changes: dict[str, Any] = {"share_session_epoch": i32(epoch), "topics": tuple(
        dataclasses.replace(t, partitions=tuple(ps)) for t, ps in topics.values())}
    if fetch:
        gone: dict[uuid.UUID, list[int]] = {}
        for topic_id, p in sorted(forgotten, key=str):
            gone.setdefault(topic_id, []).append(p)
        forgotten_cls = routes.item_class(type(body), "forgotten_topics_data")
        assert forgotten_cls is not None
        changes["forgotten_topics_data"] = tuple(forgotten_cls(topic_id=t, partitions=tuple(i32(p) for p in ps))
                                                 for t, ps in gone.items())
    return dataclasses.replace(body, **changes)


def _top_level(decoded: codec.DecodedRequest, code: ErrorCode, message: str) -> bytes:
    response = routes.top_level_error_response(decoded.response_class, code)
    assert response is not None
    return codec.encode_response(dataclasses.replace(response, error_message=message), decoded.correlation_id)


__all__ = ["SplitSessions"]
