"""The heartbeat task: :class:`~.membership.Membership` driven against the group coordinator.

Why a task of its own: membership must go on while the application is busy between polls (the
coordinator fences a member that stays silent for the session timeout), and at the interval the
coordinator returned, not at the application's poll rhythm. Coordinator trouble (transport or
NOT_COORDINATOR and friends) means FindCoordinator again after a backoff; UNKNOWN_MEMBER_ID /
FENCED_MEMBER_EPOCH rejoin at once with the same member id; other errors are fatal and handed
to the consumer through ``on_fatal``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable

from . import protocol
from .cluster import TRANSPORT_ERRORS, Cluster
from .errors import AuthenticationFailedError, GroupError, ShareConsumerError
from .membership import Membership, Outcome

log = logging.getLogger("kshare.client")


class Heartbeat:
    def __init__(self, group_id: str, membership: Membership, cluster: Cluster, *, backoff_s: float,
                 timeout_s: float, on_assignment: Callable[[], Awaitable[None]],
                 on_fatal: Callable[[ShareConsumerError], None]) -> None:
        self.group_id, self.m, self.cluster = group_id, membership, cluster
        self._backoff_s, self._timeout_s = backoff_s, timeout_s
        self._on_assignment, self._on_fatal = on_assignment, on_fatal
        self.coordinator: int | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"kshare-heartbeat-{self.group_id}")

    def wake(self) -> None:
        """Heartbeat now (the subscription changed)."""
        self._wake.set()

    async def stop(self, leave: bool = True) -> None:
        """Stop the loop; ``leave``: send epoch -1 so the coordinator reassigns at once."""
        # A flag as well as cancel(): Python 3.11's wait_for can swallow a cancellation that
        # races with its timeout, and the loop would then go on heartbeating.
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if leave:
            await self._leave()

    async def _leave(self) -> None:
        if self.m.joined and self.coordinator is not None:
            fields = self.m.leave_request()
            try:
                await self.cluster.conn(self.coordinator).call(protocol.heartbeat(
                    self.group_id, fields.member_id, fields.member_epoch, None), timeout_s=self._timeout_s)
            except (*TRANSPORT_ERRORS, ShareConsumerError) as exc:
                log.debug("leave heartbeat failed: %s", exc)
        self.m.left()

    async def _loop(self) -> None:
        m = self.m
        while not self._stopping:
            if not m.subscription:
                if m.joined:  # unsubscribed: leave, so the coordinator reassigns at once
                    await self._leave()
                    await self._on_assignment()
                await self._sleep(None)
                continue
            try:
                if self.coordinator is None:
                    self.coordinator = await self.cluster.find_coordinator(self.group_id)
                fields = m.request()
                resp = await self.cluster.conn(self.coordinator).call(protocol.heartbeat(
                    self.group_id, fields.member_id, fields.member_epoch, fields.subscribed_topic_names),
                    timeout_s=self._timeout_s)
            except AuthenticationFailedError as exc:  # retrying cannot help (Kafka's clients: fatal)
                log.error("share group %s: %s", self.group_id, exc)
                self._on_fatal(exc)
                return
            except TRANSPORT_ERRORS as exc:
                log.debug("heartbeat failed: %s", exc)
                self.coordinator = None
                await self._sleep(self._backoff_s * 5)
                continue
            assignment: dict[uuid.UUID, frozenset[int]] | None = None if resp.assignment is None else {
                tp.topic_id: frozenset(int(p) for p in tp.partitions) for tp in resp.assignment.topic_partitions}
            outcome = m.on_response(fields, resp.error_code, resp.error_message, int(resp.member_epoch),
                                    int(resp.heartbeat_interval.total_seconds() * 1000), assignment)
            if outcome is Outcome.FATAL:
                error = GroupError(resp.error_code, resp.error_message)
                log.error("share group %s: %s", self.group_id, error)
                self._on_fatal(error)
                return
            if outcome is Outcome.COORDINATOR:
                self.coordinator = None
            elif outcome is Outcome.REJOIN:
                log.info("share group %s: %s, rejoining as %s", self.group_id, resp.error_code.name, m.member_id)
            if assignment is not None or outcome is Outcome.REJOIN:
                await self._on_assignment()
            await self._sleep(m.interval_ms / 1000 if outcome is Outcome.OK
                              else 0 if outcome is Outcome.REJOIN else self._backoff_s * 5)

    async def _sleep(self, delay: float | None) -> None:
        try:
            async with asyncio.timeout(delay):  # not wait_for: see stop()
                await self._wake.wait()
        except TimeoutError:
            pass
        self._wake.clear()
