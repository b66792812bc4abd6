"""Time: the sidecar's clock (``Clock``: monotonic and wall milliseconds) and ISO-8601 durations
for ``share.auto.offset.reset=by_duration:PnDTnHnMnS``."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$")


def parse_iso_duration_ms(text: str) -> int:
    """Milliseconds in an ISO-8601 duration such as ``PT1H30M`` or ``P1D`` (no years/months, as Kafka)."""
    match = _DURATION.match(text)
    if not match or text in ("P", "PT") or text.endswith("T"):
        raise ValueError(f"{text!r} is not an ISO-8601 duration such as PT1H, PT30M or P1DT2H")
    d, h, m, s = (match.group(g) for g in "dhms")
    total = (int(d or 0) * 86400 + int(h or 0) * 3600 + int(m or 0) * 60) * 1000 + round(float(s or 0) * 1000)
    return total


def monotonic_ms() -> int:
    """Monotonic milliseconds: deadlines, acquisition locks, session timeouts (never persisted)."""
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    """Wall-clock milliseconds: what is persisted (a backoff deadline, a by_duration reset point)
    and must mean the same after a restart, which the monotonic clock does not."""
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class Clock:
    """The sidecar's one clock, built once in app.py and handed down: the engine, the partition
    cache and the group coordinator read time through it (tests hand in their own)."""

    monotonic_ms: Callable[[], int] = monotonic_ms
    wall_ms: Callable[[], int] = wall_ms
