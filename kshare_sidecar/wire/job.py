"""One request on a connection (`Job`): its task, and whether it has released request ordering.

Whether a request released ordering is a plain flag; a future to wait on is made only when the
reading side has to wait (most requests finish in their task's first step, and an
``asyncio.Event`` per request cost more than that request's whole ordering).
"""

from __future__ import annotations

import asyncio
from typing import Any

from .framing import FramePieces

#: A framed response: one buffer, or consecutive pieces (``FramePieces``) never joined.
Response = bytes | bytearray | FramePieces


class Job:
    """One request: its task, and whether it has released ordering (a plain flag; a future to wait
    on is made only when the reader has to wait, which most requests never make it do)."""

    __slots__ = ("released", "task", "waiter")

    def __init__(self) -> None:
        self.released = False
        self.task: asyncio.Task[Response | None] | None = None
        self.waiter: asyncio.Future[None] | None = None

    def release(self) -> None:
        if not self.released:
            self.released = True
            waiter = self.waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)


def current_task_cancelling() -> bool:
    """Whether the running task itself is being cancelled (vs. a task it awaited was)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a job's exception as seen: after a close nobody awaits it, and asyncio would print
    "Task exception was never retrieved" with a traceback for a client's malformed frame."""
    if not task.cancelled():
        task.exception()
