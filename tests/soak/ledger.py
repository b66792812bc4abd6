"""What the soak's clients saw, read incrementally from their JSON-lines event files (the format of
tests/e2e/share_worker.py and asyncio_worker.py), and the verdicts on it.

A record is (partition, offset); its value is ``<seq>:<produced at, ms since the epoch>`` so the
latency from production to first delivery is read from the record itself.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

Rec = tuple[int, int]


class EventTail:
    """One worker's event file, read from where the last call stopped (whole lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def new_events(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for the next read
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:  # a worker killed mid-write leaves a torn line
                continue
        return out


@dataclass
class Ledger:
    produced: dict[Rec, int] = field(default_factory=dict)  # record -> produced at (ms)
    delivered: set[Rec] = field(default_factory=set)
    deliveries: int = 0
    acked: Counter[Rec] = field(default_factory=Counter)  # record -> acknowledgements that succeeded
    acked_dc: dict[Rec, int] = field(default_factory=dict)  # record -> delivery count it was accepted at
    max_dc: dict[Rec, int] = field(default_factory=dict)
    redelivered_after_ack: list[tuple[int, int, int]] = field(default_factory=list)
    first_latency_ms: list[float] = field(default_factory=list)  # since the last take_interval()
    interval_deliveries: int = 0
    interval_acks: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    def add(self, events: list[dict]) -> None:
        for e in events:
            ev = e.get("ev")
            if ev == "rec":
                rec = (e["p"], e["o"])
                self.deliveries += 1
                self.interval_deliveries += 1
                dc = int(e.get("dc") or 1)
                self.max_dc[rec] = max(dc, self.max_dc.get(rec, 0))
                if rec not in self.delivered:
                    self.delivered.add(rec)
                    produced_ms = _produced_ms(e.get("v", ""))
                    if produced_ms is not None and "t" in e:
                        self.first_latency_ms.append(e["t"] * 1000 - produced_ms)
                if rec in self.acked_dc and dc > self.acked_dc[rec]:
                    self.redelivered_after_ack.append((rec[0], rec[1], dc))
            elif ev == "ack" and e.get("ok"):
                rec = (e["p"], e["o"])
                self.acked[rec] += 1
                self.interval_acks += 1
                self.acked_dc.setdefault(rec, int(e.get("dc") or 1))
            elif ev == "err":
                self.errors[str(e.get("e", ""))[:80]] += 1

    def take_interval(self) -> tuple[int, int, list[float]]:
        out = (self.interval_deliveries, self.interval_acks, self.first_latency_ms)
        self.interval_deliveries, self.interval_acks, self.first_latency_ms = 0, 0, []
        return out

    # -- verdicts ----------------------------------------------------------------------------
    def doubly_accepted(self) -> list[Rec]:
        return sorted(r for r, n in self.acked.items() if n > 1)

    def never_delivered(self) -> list[Rec]:
        return sorted(set(self.produced) - self.delivered)

    def without_seen_ack(self) -> list[Rec]:
        """Delivered, no successful acknowledgement seen: a worker killed between its commit and
        writing the outcome, or archived at the delivery limit (max_dc says which)."""
        return sorted(r for r in self.produced if r in self.delivered and not self.acked[r])


def _produced_ms(value: str) -> int | None:
    try:
        return int(value.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None
