"""Share-session epochs of one consumer at one broker (pure, unit-tested).

Why: the broker keys a share session by (group, member) and checks every ShareFetch and
ShareAcknowledge against the epoch it expects. The rules (share-protocol.md §5):

- epoch 0 opens a session and lists every partition to fetch; acks are not allowed in it;
- then each request carries previous + 1, wrapping from 2**31-1 to 1;
- later ShareFetches list only partitions added since (plus ones carrying acks) and name the
  removed ones in ForgottenTopicsData;
- the client advances after any response that is not a session error; SHARE_SESSION_NOT_FOUND,
  INVALID_SHARE_SESSION_EPOCH and SHARE_SESSION_LIMIT_REACHED, and transport failures (a TCP
  disconnect closes the broker's session) reset it to 0;
- epoch -1 closes it (acks applied, the member's acquired records released).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

MAX_EPOCH = 2**31 - 1
FINAL_EPOCH = -1

SESSION_ERRORS = frozenset({ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch,
                            ErrorCode.share_session_limit_reached})


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_EPOCH or epoch < 0 else epoch + 1


@dataclass(frozen=True)
class FetchPlan:
    """What one ShareFetch carries: its epoch, the partitions it lists and the ones it forgets."""

    epoch: int
    listed: frozenset
    forgotten: frozenset
    wanted: frozenset


class ShareSession:
    """Client side of one share session (partitions are any hashable, e.g. (topic_id, index))."""

    def __init__(self) -> None:
        self.epoch = 0
        self.partitions: frozenset = frozenset()
        #: The transport generation this session lives on (see conn.NodeConn.generation).
        self.generation = -1

    @property
    def open(self) -> bool:
        return self.epoch > 0

    def fetch_plan(self, wanted: Iterable[Hashable], acking: Iterable[Hashable] = ()) -> FetchPlan:
        """``wanted``: partitions to fetch from this broker now; ``acking``: those carrying acks
        (must be a subset of ``wanted``; acks of others go by ShareAcknowledge)."""
        want = frozenset(wanted)
        acks = frozenset(acking)
        if not acks <= want:
            raise ValueError("acks piggybacked on a ShareFetch must be for partitions it fetches")
        if self.epoch == 0:
            if acks:
                raise ValueError("a share session cannot be opened with acknowledgements")
            return FetchPlan(0, want, frozenset(), want)
        return FetchPlan(self.epoch, (want - self.partitions) | acks, self.partitions - want, want)

    def ack_epoch(self) -> int:
        """Epoch for a ShareAcknowledge; only an open session can take one."""
        if self.epoch == 0:
            raise ValueError("no open share session: ShareAcknowledge cannot use epoch 0")
        return self.epoch

    def fetched(self, plan: FetchPlan, error: ErrorCode) -> None:
        """Record the answer to the ShareFetch sent with ``plan``."""
        if error in SESSION_ERRORS:
            self.reset()
        else:
            self.partitions = plan.wanted
            self.epoch = next_epoch(plan.epoch)

    def acknowledged(self, error: ErrorCode) -> None:
        """Record the answer to a ShareAcknowledge sent with :meth:`ack_epoch`."""
        if error in SESSION_ERRORS:
            self.reset()
        else:
            self.epoch = next_epoch(self.epoch)

    def reset(self) -> None:
        """Session errors, transport failures, close: the next ShareFetch opens a new one."""
        self.epoch = 0
        self.partitions = frozenset()
        self.generation = -1
