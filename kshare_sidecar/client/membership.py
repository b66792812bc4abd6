"""ShareGroupHeartbeat state of one member (pure, unit-tested).

Why: the member protocol (KIP-848 as used by KIP-932) is a small state machine — join with epoch
0 and the full subscription, then heartbeat with the epoch the coordinator returned, at the
interval it returned, sending the subscription again only when it changed; UNKNOWN_MEMBER_ID and
FENCED_MEMBER_EPOCH rejoin with epoch 0 *keeping the member id*; coordinator errors move to
another coordinator; anything unexpected is fatal (share-protocol.md §4.4). Keeping it free of
I/O lets the asyncio layer stay a loop around :meth:`request` and :meth:`on_response`.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

LEAVE_EPOCH = -1

REJOIN_ERRORS = frozenset({ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch})
COORDINATOR_ERRORS = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                                ErrorCode.coordinator_load_in_progress})
RETRY_ERRORS = frozenset({ErrorCode.request_timed_out, ErrorCode.network_exception})


class Outcome(enum.Enum):
    OK = "ok"
    REJOIN = "rejoin"  # send a join (epoch 0) at once
    COORDINATOR = "coordinator"  # find the coordinator again, then retry
    RETRY = "retry"  # try again after a backoff
    FATAL = "fatal"


@dataclass(frozen=True)
class HeartbeatFields:
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...] | None  # None = unchanged since last sent


class Membership:
    def __init__(self, member_id: str | None = None) -> None:
        self.member_id = member_id or str(uuid.uuid4())
        self.epoch = 0
        self.subscription: tuple[str, ...] = ()
        self._sent: tuple[str, ...] | None = None
        self.interval_ms = 5000
        #: topic id -> partition indexes, as last returned by the coordinator
        self.assignment: dict[uuid.UUID, frozenset[int]] = {}
        self.error: tuple[ErrorCode, str | None] | None = None

    @property
    def joined(self) -> bool:
        return self.epoch > 0

    def subscribe(self, topics: list[str] | tuple[str, ...]) -> None:
        self.subscription = tuple(sorted(set(topics)))

    def request(self) -> HeartbeatFields:
        """Fields of the next heartbeat (full on join and when the subscription changed)."""
        full = self.epoch == 0 or self._sent != self.subscription
        return HeartbeatFields(self.member_id, self.epoch, self.subscription if full else None)

    def leave_request(self) -> HeartbeatFields:
        return HeartbeatFields(self.member_id, LEAVE_EPOCH, None)

    def on_response(self, sent: HeartbeatFields, error: ErrorCode, message: str | None, member_epoch: int,
                    interval_ms: int, assignment: dict[uuid.UUID, frozenset[int]] | None) -> Outcome:
        if error == ErrorCode.none:
            if sent.subscribed_topic_names is not None:
                self._sent = sent.subscribed_topic_names
            self.epoch = member_epoch
            if interval_ms > 0:
                self.interval_ms = interval_ms
            if assignment is not None:
                self.assignment = assignment
            return Outcome.OK
        if error in REJOIN_ERRORS:
            self.rejoin()
            return Outcome.REJOIN
        if error in COORDINATOR_ERRORS:
            return Outcome.COORDINATOR
        if error in RETRY_ERRORS:
            return Outcome.RETRY
        self.error = (error, message)
        return Outcome.FATAL

    def rejoin(self) -> None:
        """Epoch 0 with the same member id; the assignment is void until the join answers (the
        records already acquired stay ours until acknowledged or their locks expire)."""
        self.epoch = 0
        self._sent = None
        self.assignment = {}

    def left(self) -> None:
        self.epoch = 0
        self._sent = None
        self.assignment = {}
