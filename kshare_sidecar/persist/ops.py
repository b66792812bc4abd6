"""What the coalescing writer queues and writes, apart from the writer itself: ownership.py types its
hooks with these, and writer.py builds on ownership.py, so they live below both (no import circle)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: One state-topic record: (key, value); a ``None`` value is a tombstone.
Record = tuple[bytes, bytes | None]
#: A queued request: ``fn(current entity or None) -> (result for the caller, new entity or UNCHANGED)``.
Decision = Callable[[Any], tuple[Any, Any]]


@dataclass(slots=True)
class _Op:
    kind: str
    ident: Any
    fn: Decision
    future: asyncio.Future[Any] = field(repr=False)
