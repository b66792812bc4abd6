"""Share sessions (KIP-932): per (group, member) the partitions a member fetches and an epoch.

Epoch 0 opens a session (replacing any old one without releasing records), each later request
must carry exactly the next epoch (wrapping to 1), and -1 closes it. Closing — by epoch -1 or
by the TCP connection dropping — is what releases the member's acquired records; the caller
does that with the partitions this module hands back. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from ...protocol.errors import KafkaError
from ...protocol.types import TopicIdPartition

SessionKey = tuple[str, str]  # (group id, member id)

_MAX_EPOCH = 2**31 - 1


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


@dataclass
class ShareSession:
    key: SessionKey
    conn_id: int
    epoch: int = 1  # the epoch the next request must carry
    partitions: set[TopicIdPartition] = field(default_factory=set)
    #: which of its share-partitions goes first in the next fetch (each gets its turn)
    rotation: int = 0


class SessionError(KafkaError):
    """The share session rules refuse the request (its error code is the whole answer's)."""


class ShareSessionCache:
    """At most ``max_sessions`` sessions; no idle eviction (as Kafka): a full cache refuses new
    sessions and never evicts an existing one, so a client that opens thousands cannot push the
    others out. ``max_per_connection`` (kshare's own limit; Kafka has none) bounds what one TCP
    connection may hold: a Kafka client opens one session per connection, so a connection asking
    for more is refused like a full cache, and taking every session then needs as many
    connections as sessions (which max.connections.per.ip bounds)."""

    def __init__(self, max_sessions: int = 2000, max_per_connection: int | None = None) -> None:
        self.max_sessions = max_sessions
        self.max_per_connection = max_per_connection or max_sessions
        self.sessions: dict[SessionKey, ShareSession] = {}
        self._by_conn: dict[int, set[SessionKey]] = {}

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, key: SessionKey) -> ShareSession | None:
        return self.sessions.get(key)

    def open(self, key: SessionKey, conn_id: int) -> tuple[ShareSession, ShareSession | None]:
        """Epoch 0: a fresh session. Returns (new, replaced). Raises SHARE_SESSION_LIMIT_REACHED."""
        replaced = self._remove(key)
        problem = None
        if len(self.sessions) >= self.max_sessions:
            problem = f"share session limit {self.max_sessions} reached"
        elif len(self._by_conn.get(conn_id, ())) >= self.max_per_connection:
            problem = f"share session limit of {self.max_per_connection} per connection reached"
        if problem is not None:
            if replaced is not None:  # put it back: a full cache must not cost the member its session
                self._add(replaced)
            raise SessionError(ErrorCode.share_session_limit_reached, problem)
        session = ShareSession(key, conn_id)
        self._add(session)
        return session, replaced

    def advance(self, key: SessionKey, epoch: int, conn_id: int) -> ShareSession:
        """A request with ``epoch`` > 0 on an existing session; moves the expected epoch on."""
        session = self.sessions.get(key)
        if session is None:
            raise SessionError(ErrorCode.share_session_not_found, f"no share session for member {key[1]}")
        if epoch != session.epoch:
            raise SessionError(ErrorCode.invalid_share_session_epoch,
                               f"share session epoch {epoch} does not match the expected {session.epoch}")
        session.epoch = next_epoch(epoch)
        if session.conn_id != conn_id:  # a client reconnected: the session follows its connection
            self._by_conn.get(session.conn_id, set()).discard(key)
            session.conn_id = conn_id
            self._by_conn.setdefault(conn_id, set()).add(key)
        return session

    def close(self, key: SessionKey) -> ShareSession:
        """Epoch -1: remove the session; the caller releases its partitions' acquired records."""
        session = self._remove(key)
        if session is None:
            raise SessionError(ErrorCode.share_session_not_found, f"no share session for member {key[1]}")
        return session

    def close_connection(self, conn_id: int) -> list[ShareSession]:
        """The TCP connection dropped: every session it carried is closed."""
        return [s for key in list(self._by_conn.pop(conn_id, ())) if (s := self._remove(key)) is not None]

    def _add(self, session: ShareSession) -> None:
        self.sessions[session.key] = session
        self._by_conn.setdefault(session.conn_id, set()).add(session.key)

    def _remove(self, key: SessionKey) -> ShareSession | None:
        session = self.sessions.pop(key, None)
        if session is not None:
            keys = self._by_conn.get(session.conn_id)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_conn[session.conn_id]
        return session
