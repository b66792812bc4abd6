"""The types the persister's parts and its store pass each other: a state record, a queued decision,
a replay sink. They live below every part (no import circle)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: One state-topic record: (key, value); a ``None`` value is a tombstone.
Record = tuple[bytes, bytes | None]
#: Fed every stored record of a replay: ``sink(partition, offset, key, value)``.
ReplaySink = Callable[[int, int, bytes | None, bytes | None], None]
#: A queued request: ``fn(current entity or None) -> (result for the caller, new entity or UNCHANGED)``.
Decision = Callable[[Any], tuple[Any, Any]]


@dataclass(slots=True)
class _Op:
    kind: str
    ident: Any
    fn: Decision
    future: asyncio.Future[Any] = field(repr=False)
