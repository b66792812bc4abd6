"""Forwarding: a request the sidecar does not serve itself goes to the backend broker that would.

Clients see one broker, the sidecar (docs/architecture.md, "Pass-through"). So:

- With one backend broker (or when every partition / key of a request maps to one broker), the
  client's frame is written upstream as it came — only the correlation id is swapped — and the
  answer comes back the same way: records are never decoded, nor even copied into kio objects.
- A partition-scoped request spanning several backend leaders is decoded (kio), split per leader,
  and the answers merged (:mod:`.routes`); coordinator-scoped requests go to the backend's
  coordinator for their group or transactional id.
- Fetch is forwarded *sessionless* when it must be split (a KIP-227 fetch session lives on one
  broker; the client's session with "the sidecar" cannot be mapped onto several). The answer's
  session id 0 tells the client to keep sending full fetches.
- A backend broker that cannot be reached turns into the retriable error a broker would give
  (NOT_LEADER_OR_FOLLOWER per partition, NOT_COORDINATOR per key), or — when an API has no
  error form for it — a closed connection, which clients retry like a broker restart.

Every forwarded frame is bounds-checked by the dispatcher first (``codec.check_request``): a
malformed frame closes the client's connection here, as Kafka would, and never reaches the
backend.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ..auth import ANONYMOUS
from ..backend.brokerconn import BrokerConn, BrokerConnClosed, BrokerConnError
from ..protocol.constants import ApiKey
from ..ratelog import backend_failures
from ..wire import codec
from ..wire.errors import CloseConnection
from . import leaders as leader_hints
from . import produce
from . import reserved as reserved_keys
from . import routes
from .reserved import Reserved
from .pool import GROUP_KEY, TXN_KEY, BackendPool, BackendUnavailable, CoordinatorError, Upstream, decode, encode

log = logging.getLogger("kshare.forward")
failures = backend_failures(log)

_RETRY_COORDINATOR = {int(ErrorCode.not_coordinator), int(ErrorCode.coordinator_not_available)}
_RETRY_LEADER = {int(ErrorCode.not_leader_or_follower), int(ErrorCode.leader_not_available),
                 int(ErrorCode.fenced_leader_epoch), int(ErrorCode.unknown_leader_epoch)}
_PRODUCE, _FETCH = ApiKey.PRODUCE, ApiKey.FETCH
_NO_ID = uuid.UUID(int=0)


#: APIs decoded to check they leave kshare's state alone (small admin / transactional requests).
_GUARDED = frozenset({19, 20, 21, 22, 24, 25, 26, 28, 33, 37, 61, 65})
_TXN_FIELDS = ("transactional_id", "v3_and_below_transactional_id")
_NAMES = routes.KeySpec("names", None, "responses", "name")


@dataclasses.dataclass(frozen=True)
class _Names:
    names: tuple[str, ...]


#: The client connection of the request being forwarded (each request runs in its own task): leader
#: hints name the sidecar as the listener *that* client connected on knows it.
_CLIENT: contextvars.ContextVar[Any] = contextvars.ContextVar("kshare_forward_client", default=None)


class Forwarder:
    """The dispatcher's handler for every forwarded API (``raw`` registry entries)."""

    def __init__(self, pool: BackendPool, reserved: Reserved | None = None,
                 node: Callable[[Any], Any] | None = None) -> None:
        self.pool = pool
        self.reserved = reserved
        #: (client connection or None) -> the sidecar's NodeIdentity on that connection's listener:
        #: leader hints are rewritten to it
        self.node = node
        #: passthrough.credentials = client: forward as the client's own principal — a PLAIN
        #: client's kept password (``conn.backend_credentials``) or, for any other authenticated
        #: principal, a delegation token owned by it (``tokens``, passthrough/tokens.py); a client
        #: with neither (anonymous) gets its connection closed
        self.client_credentials = False
        self.tokens: Any = None  # passthrough.tokens.DelegationTokens
        #: (names, backend topic ids) -> None: told of every topic a forwarded DeleteTopics deleted,
        #: before the client is answered (the backend's topic cache forgets them: Backend.forget_deleted)
        self.topics_deleted: Callable[[list[str], list[uuid.UUID]], Awaitable[None]] | None = None
        self._upstreams: dict[int, Upstream] = {}

    # -- entry point -----------------------------------------------------------------------------
    async def __call__(self, conn: Any, frame: bytes, release: Callable[[], None]) -> bytes | None:
        """Forward one request frame (already bounds-checked by the dispatcher)."""
        peeked = codec.peek(frame)
        api_key, version = peeked.api_key, peeked.api_version
        upstream = self._upstream(conn)
        _CLIENT.set(conn)
        kind, spec = routes.route(api_key, version)
        try:
            if self.reserved is not None and self._touches_reserved(frame, api_key, version):
                return await self._refuse(upstream, frame, api_key, version, kind, spec)
            answer = await self._route(upstream, frame, api_key, version, kind, spec, release)
            if api_key == ApiKey.DELETE_TOPICS and answer is not None and self.topics_deleted is not None:
                await self._deleted(answer, version)
            elif api_key == ApiKey.LIST_TRANSACTIONS and answer is not None and self.reserved is not None:
                answer = self._listed(answer, version)
            return answer
        except BrokerConnClosed as exc:  # the client went away mid-request: its upstreams are closed
            log.debug("api key %d v%d: client gone before the backend answered: %s", api_key, version, exc)
            return None
        except (BackendUnavailable, BrokerConnError, TimeoutError) as exc:
            failures.log(f"forward-{api_key}", logging.WARNING, "api key %d v%d: backend unavailable: %s",
                         api_key, version, exc)
            return self._unavailable(frame, api_key, version, kind, spec)

    async def _deleted(self, answer: bytes, version: int) -> None:
        """A DeleteTopics answer: the topics it deleted (error code 0), by name and (v6+) id."""
        assert self.topics_deleted is not None
        try:
            body = decode(ApiKey.DELETE_TOPICS, version, answer[4:])
        except Exception:  # noqa: BLE001 - the client gets the bytes either way
            log.debug("DeleteTopics v%d: answer not decoded, the topic cache keeps its age", version, exc_info=True)
            return
        done = [r for r in body.responses if r.error_code == ErrorCode.none]
        await self.topics_deleted([str(r.name) for r in done if r.name],
                                  [r.topic_id for r in done if getattr(r, "topic_id", None) not in (None, _NO_ID)])

    def _listed(self, answer: bytes, version: int) -> bytes:
        """A ListTransactions answer without kshare's state writers (reserved.py)."""
        assert self.reserved is not None
        header, body = codec.decode_response(bytes(memoryview(answer)[4:]),
                                             codec.response_class(ApiKey.LIST_TRANSACTIONS, version))
        kept = self.reserved.listed(body)
        return answer if kept is None else codec.encode_response(kept, header.correlation_id)

    def upstream(self, conn: Any) -> Upstream:
        """The client connection's backend connections (passthrough/sessions.py sends on them too)."""
        return self._upstream(conn)

    def _upstream(self, conn: Any) -> Upstream:
        conn_id = getattr(conn, "conn_id", 0)
        upstream = self._upstreams.get(conn_id)
        if upstream is None:
            upstream = self._upstreams[conn_id] = self._new_upstream(conn, conn_id)
            if conn is not None:
                conn.add_close_callback(lambda _c: self._closed(conn_id))
        return upstream

    def _new_upstream(self, conn: Any, conn_id: int) -> Upstream:
        if not self.client_credentials:
            return self.pool.upstream()
        credentials = getattr(conn, "backend_credentials", None)
        if credentials is not None:
            return self.pool.upstream(credentials)
        principal = str(getattr(conn, "principal", None) or ANONYMOUS)
        if principal == ANONYMOUS or self.tokens is None:
            why = ("an anonymous client has no principal of its own at the backend" if principal == ANONYMOUS
                   else "only SASL PLAIN clients (delegation tokens are not set up)")
            failures.log("no-client-credentials", logging.WARNING, "conn %d: pass-through refused for %s: "
                         "passthrough.credentials = client: %s", conn_id, principal, why)
            raise CloseConnection(f"pass-through needs the client's own credentials ({principal})")
        source = self.tokens.acquire(principal)
        return self.pool.upstream(principal=principal, security=self.tokens.token_security(source),
                                  release=source.release)

    async def _closed(self, conn_id: int) -> None:
        upstream = self._upstreams.pop(conn_id, None)
        if upstream is not None:
            await upstream.close()

    async def close(self) -> None:
        for conn_id in list(self._upstreams):
            await self._closed(conn_id)

    # -- routing -------------------------------------------------------------------------------
    async def _route(self, up: Upstream, frame: bytes, api_key: int, version: int, kind: routes.Route,
                     spec: Any, release: Callable[[], None]) -> bytes | None:
        single = self.pool.single_node
        if kind is routes.Route.ALL and single is None:
            return await self._to_all(up, frame, api_key, version)
        if kind is routes.Route.LEADER and single is None:
            return await self._split_partitions(up, frame, api_key, version, spec)
        if kind in (routes.Route.GROUP, routes.Route.TXN):
            return await self._to_coordinator(up, frame, api_key, version, kind, spec, release)
        node = single if single is not None else self.pool.any_node()
        expect = not (api_key == _PRODUCE and produce.acks(frame, version) == 0)
        answer = await self._raw(up.conn(node), frame, release, expect=expect)
        if answer is not None and leader_hints.hinted(api_key, version):
            return self._own_leader_hints_raw(answer, api_key, version)
        return answer

    def _own_leader_hints_raw(self, answer: bytes, api_key: int, version: int) -> bytes:
        """A raw answer whose leader hints could name a backend broker, rewritten to name the
        sidecar (:mod:`.leaders`); left as bytes when it cannot."""
        hosts = tuple(host.encode() for host, _ in self.pool.brokers.values())
        if self.node is None or not leader_hints.may_name_backend(answer, hosts):
            return answer
        header, body = codec.decode_response(bytes(memoryview(answer)[4:]), codec.response_class(api_key, version))
        rewritten = self._own_leader_hints(body)
        if rewritten is body:
            return answer
        return codec.encode_response(rewritten, header.correlation_id)

    def _own_leader_hints(self, body: Any) -> Any:
        if self.node is None:
            return body
        n = self.node(_CLIENT.get())
        return leader_hints.point_at_sidecar(body, n.node_id, n.host, n.port, n.rack)

    async def _raw(self, conn: BrokerConn, frame: bytes, release: Callable[[], None], *,
                   expect: bool = True) -> bytes | None:
        """The frame as it came, the answer as it comes: no decoding, one copy each way."""
        fut = await conn.send(frame, expect_response=expect, framed=True)
        release()  # written upstream in order: the client's next request may go out now
        return await fut

    async def _to_coordinator(self, up: Upstream, frame: bytes, api_key: int, version: int,
                              kind: routes.Route, spec: routes.KeySpec, release: Callable[[], None]) -> bytes | None:
        single = self.pool.single_node
        if single is not None:  # the only broker coordinates everything: no keys to look at
            return await self._raw(up.conn(single), frame, release)
        key_type = GROUP_KEY if kind is routes.Route.GROUP else TXN_KEY
        decoded = codec.decode_request(frame)
        keys = routes.request_keys(decoded.body, spec)
        if any(k is None for k in keys):  # InitProducerId without a transactional id
            return await self._raw(up.conn(self.pool.any_node()), frame, release)
        try:
            nodes = {k: await self.pool.coordinator(key_type, k) for k in keys}
        except CoordinatorError as exc:
            return self._error(decoded, kind, spec, exc.code)
        if len(set(nodes.values())) <= 1:
            node = next(iter(nodes.values())) if nodes else self.pool.any_node()
            answer = await self._raw(up.conn(node), frame, release)
            assert answer is not None
            self._notice_coordinator_errors(answer, api_key, version, key_type, keys)
            return answer
        parts = routes.split_keys(decoded.body, spec, nodes.__getitem__)
        responses = await self._send_parts(up, decoded, parts)
        assert spec.resp_list is not None  # several coordinators: several keys, so a batched API
        merged = routes.merge_lists(responses, spec.resp_list)
        for code in routes.error_codes(merged):
            if code in _RETRY_COORDINATOR:
                for key in keys:
                    self.pool.forget_coordinator(key_type, key)
                break
        return codec.encode_response(merged, decoded.correlation_id)

    def _notice_coordinator_errors(self, answer: bytes, api_key: int, version: int, key_type: int,
                                   keys: list[Any]) -> None:
        try:
            body = decode(api_key, version, answer[4:])
        except Exception:  # noqa: BLE001 - the client gets the bytes either way
            return
        if any(code in _RETRY_COORDINATOR for code in routes.error_codes(body)):
            for key in keys:
                self.pool.forget_coordinator(key_type, key)

    async def _split_partitions(self, up: Upstream, frame: bytes, api_key: int, version: int,
                                spec: routes.PartitionSpec, *, refuse: Callable[[Any], bool] | None = None,
                                refused: tuple[ErrorCode, str | None] = (ErrorCode.invalid_topic_exception, None)
                                ) -> bytes | None:
        decoded = codec.decode_request(frame)
        body = decoded.body
        if api_key == _FETCH:
            body = _sessionless(body)
        leaders: dict[tuple[Any, int], int | None] = {}
        orphan, refused_node = -1, -2
        single = self.pool.single_node
        for topic in getattr(body, spec.req_topics):
            key = routes.topic_key(topic)
            for part in getattr(topic, spec.req_parts):
                index = int(part) if spec.req_part_index is None else int(getattr(part, spec.req_part_index))
                if refuse is not None and refuse(key):
                    leaders[(key, index)] = refused_node
                else:
                    leaders[(key, index)] = single if single is not None else await self.pool.leader(key, index)

        def leader_of(t: Any, index: int) -> int:
            node = leaders[(t, index)]
            return orphan if node is None else node

        parts = routes.split_partitions(body, spec, leader_of)
        expect = not (api_key == _PRODUCE and int(getattr(body, "acks", 1)) == 0)
        responses = []
        if refused_node in parts:
            error = routes.partition_error_response(decoded.response_class, parts.pop(refused_node), spec, *refused)
            if error is not None:
                responses.append(error)
        if orphan in parts:
            error = routes.partition_error_response(decoded.response_class, parts.pop(orphan), spec,
                                                    ErrorCode.not_leader_or_follower)
            self.pool.forget_leaders()
            if error is not None:
                responses.append(error)
        if parts:
            responses += await self._send_parts(up, decoded, parts, spec=spec, expect=expect)
        if not expect:
            return None
        merged = routes.merge_partitions(responses, spec)
        if any(code in _RETRY_LEADER for code in routes.error_codes(merged)):
            self.pool.forget_leaders()
        if leader_hints.hinted(api_key, version):
            merged = self._own_leader_hints(merged)
        return codec.encode_response(merged, decoded.correlation_id)

    async def _send_parts(self, up: Upstream, decoded: codec.DecodedRequest, parts: dict[int, Any], *,
                          spec: routes.PartitionSpec | None = None, expect: bool = True) -> list[Any]:
        client_id = getattr(decoded.header, "client_id", None)
        api_key, version = decoded.api_key, decoded.api_version

        async def one(node: int, body: Any) -> Any:
            try:
                conn = up.conn(node)
                fut = await conn.send(encode(body, client_id), expect_response=expect)
                answer = await fut
                return None if answer is None else decode(api_key, version, answer)
            except (BrokerConnError, TimeoutError) as exc:
                if spec is None:
                    raise
                failures.log(f"forward-part-{api_key}", logging.WARNING, "api key %d v%d: part for broker %d "
                             "failed, answered NOT_LEADER_OR_FOLLOWER: %s", api_key, version, node, exc)
                self.pool.forget_leaders()
                return routes.partition_error_response(decoded.response_class, body, spec,
                                                       ErrorCode.not_leader_or_follower)

        answers = await asyncio.gather(*(one(n, b) for n, b in parts.items()))
        return [a for a in answers if a is not None]

    async def _to_all(self, up: Upstream, frame: bytes, api_key: int, version: int) -> bytes:
        decoded = codec.decode_request(frame)
        parts = {node: decoded.body for node in sorted(self.pool.brokers)}
        responses = await self._send_parts(up, decoded, parts)
        field = "transaction_states"
        merged = routes.merge_lists(responses, field)
        return codec.encode_response(merged, decoded.correlation_id)

    # -- kshare's own state (see reserved.py) ---------------------------------------------------
    def _touches_reserved(self, frame: bytes, api_key: int, version: int) -> bool:
        reserved = self.reserved
        assert reserved is not None
        if api_key == _PRODUCE:
            return any(reserved.topic(t) for t in produce.topic_keys(frame, version))
        if api_key in _GUARDED:
            body = codec.decode_request(frame).body
            if reserved.refused(api_key, version, body) is not None:
                return True
            return any(reserved.txn(getattr(body, f, None)) for f in _TXN_FIELDS)
        return False

    async def _refuse(self, up: Upstream, frame: bytes, api_key: int, version: int, kind: routes.Route,
                      spec: Any) -> bytes | None:
        reserved = self.reserved
        assert reserved is not None
        if api_key == _PRODUCE:  # the state topic's partitions refused, the rest forwarded
            return await self._split_partitions(up, frame, api_key, version, spec, refuse=reserved.topic)
        if api_key == ApiKey.DESCRIBE_PRODUCERS:  # the same, answered as for an unknown topic
            return await self._split_partitions(up, frame, api_key, version, spec, refuse=reserved.topic,
                                                refused=(ErrorCode.unknown_topic_or_partition, reserved_keys.NOT_HOSTED))
        decoded = codec.decode_request(frame)
        body = decoded.body
        if api_key == ApiKey.DESCRIBE_TRANSACTIONS:
            return await self._describe_transactions(up, decoded, spec)
        code = reserved.refused(api_key, version, body) or ErrorCode.transactional_id_authorization_failed
        log.info("api key %d v%d client %r: refused %s: it touches kshare's share state", api_key, version,
                 getattr(decoded.header, "client_id", None), code.name)
        if api_key in reserved_keys.TOPIC_KEYED:
            response = routes.keyed_error_response(decoded.response_class, body, reserved_keys.TOPIC_KEYED[api_key], code)
        elif api_key == ApiKey.DELETE_TOPICS:
            names = body.topic_names if hasattr(body, "topic_names") else tuple(t.name for t in body.topics)
            response = routes.keyed_error_response(decoded.response_class, _Names(tuple(names)), _NAMES, code)
        elif api_key == ApiKey.ALTER_CONFIGS:
            item = routes.item_class(decoded.response_class, "responses")
            assert item is not None  # AlterConfigs' responses are entities in every version
            response = routes.error_entity(decoded.response_class, ErrorCode.none, responses=tuple(
                routes.error_entity(item, code, resource_type=r.resource_type, resource_name=r.resource_name,
                                    error_message="reserved for kshare's share state") for r in body.resources))
        elif kind is routes.Route.LEADER or api_key in routes.MIRRORED:
            response = routes.partition_error_response(decoded.response_class, body,
                                                       routes.PARTITIONS.get(api_key) or routes.MIRRORED[api_key], code)
        else:
            response = self._error_entity(decoded, kind, spec, code)
        if response is None:
            raise CloseConnection(f"api key {api_key} v{version}: {code.name}")
        return codec.encode_response(response, decoded.correlation_id)

    async def _describe_transactions(self, up: Upstream, decoded: codec.DecodedRequest, spec: routes.KeySpec) -> bytes:
        """The state writers' ids answered TRANSACTIONAL_ID_NOT_FOUND, as ids the backend does not
        know; the others asked at the backend, whose answer is joined to it as bytes
        (reserved.join_described)."""
        assert self.reserved is not None
        body, version = decoded.body, decoded.api_version
        ids = tuple(body.transactional_ids)
        hidden = tuple(t for t in ids if self.reserved.txn(t))
        rest = tuple(t for t in ids if not self.reserved.txn(t))
        item = routes.item_class(decoded.response_class, "transaction_states")
        assert item is not None
        refused = routes.error_entity(decoded.response_class, ErrorCode.none, transaction_states=tuple(
            routes.error_entity(item, ErrorCode.transactional_id_not_found, transactional_id=t, producer_id=0,
                                producer_epoch=0) for t in hidden))  # Kafka's answer, to the field
        answer = codec.encode_response(refused, decoded.correlation_id)
        if not rest:
            return answer
        frame = codec.encode_request(dataclasses.replace(body, transactional_ids=rest), decoded.correlation_id,
                                     getattr(decoded.header, "client_id", None))[4:]  # as the dispatcher's
        backend = await self._to_coordinator(up, frame, decoded.api_key, version, routes.Route.TXN, spec, lambda: None)
        assert backend is not None
        return reserved_keys.join_described(backend, answer)

    # -- errors ----------------------------------------------------------------------------------
    def _unavailable(self, frame: bytes, api_key: int, version: int, kind: routes.Route, spec: Any) -> bytes:
        """The backend is unreachable: a retriable answer, or a closed connection."""
        decoded = codec.decode_request(frame)
        if kind is routes.Route.LEADER:
            self.pool.forget_leaders()
            response = routes.partition_error_response(decoded.response_class, decoded.body, spec,
                                                       ErrorCode.not_leader_or_follower)
        elif kind in (routes.Route.GROUP, routes.Route.TXN):
            response = self._error_entity(decoded, kind, spec, ErrorCode.coordinator_not_available)
        else:
            response = routes.top_level_error_response(decoded.response_class, ErrorCode.request_timed_out)
        if response is None:
            raise CloseConnection(f"api key {api_key} v{version}: the backend is unavailable")
        return codec.encode_response(response, decoded.correlation_id)

    def _error(self, decoded: codec.DecodedRequest, kind: routes.Route, spec: Any, code: ErrorCode) -> bytes:
        response = self._error_entity(decoded, kind, spec, code)
        if response is None:
            raise CloseConnection(f"api key {decoded.api_key} v{decoded.api_version}: {code.name}")
        return codec.encode_response(response, decoded.correlation_id)

    def _error_entity(self, decoded: codec.DecodedRequest, kind: routes.Route, spec: Any, code: ErrorCode) -> Any:
        mirrored = routes.MIRRORED.get(decoded.api_key)
        if mirrored is not None:
            return routes.partition_error_response(decoded.response_class, decoded.body, mirrored, code)
        if isinstance(spec, routes.KeySpec) and spec.resp_list is not None:
            return routes.keyed_error_response(decoded.response_class, decoded.body, spec, code)
        return routes.top_level_error_response(decoded.response_class, code)


def _sessionless(body: Any) -> Any:
    """A Fetch without a KIP-227 session: full fetch, nothing forgotten."""
    changes: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(body)}
    if "session_id" in names:
        changes["session_id"] = 0
    if "session_epoch" in names:
        changes["session_epoch"] = -1
    if "forgotten_topics_data" in names:
        changes["forgotten_topics_data"] = ()
    return dataclasses.replace(body, **changes) if changes else body
