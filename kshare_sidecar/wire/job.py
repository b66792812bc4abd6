"""One request on a connection (`Job`): its task, whether it has released request ordering, and
its outcome once finished.

Whether a request released ordering is a plain flag plus a call back into the connection (which
then starts the next request at once): most requests finish in their task's first step, and an
``asyncio.Event`` or a future per request cost more than that request's whole ordering.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .framing import FramePieces

#: A framed response: one buffer, or consecutive pieces (``FramePieces``) never joined.
Response = bytes | bytearray | FramePieces


class Job:
    """One request: its task, whether it released ordering, and — once ``finished`` — its answer
    (``response``) or what ended it (``error``: an exception the handler raised, or the
    cancellation of a parked request)."""

    __slots__ = ("_on_release", "error", "finished", "released", "response", "task")

    def __init__(self, on_release: Callable[[Job], None]) -> None:
        self.released = False
        self.finished = False
        self.task: asyncio.Task[None] | None = None
        self.response: Response | None = None
        self.error: BaseException | None = None
        self._on_release = on_release

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._on_release(self)

