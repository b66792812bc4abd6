"""What a Faust event's outcome means for its share-group record (pure: no Faust, no I/O).

Why a module of its own: the rule is the contract of the driver and must be testable without a
broker or Faust installed. Faust tells the driver three things about a record it handed out:

- the event *entered* a stream (``Sensor.on_stream_event_in``): an agent saw it. An event that
  Faust acks without it entering a stream was *skipped* (flow control suspended, a stale
  generation) — accepting it would lose it, so it is released;
- the agent *raised* while the event was current (the agent's ``on_error`` hook);
- the event was *finally acked* (``Sensor.on_message_out``): every stream is done with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kshare_sidecar.client.acks import AcknowledgeType


@dataclass(slots=True)
class EventOutcome:
    """What Faust reported about one delivered record."""

    delivery_count: int = 1
    entered: bool = False  # an agent's stream yielded it
    failed: bool = False  # the agent raised while it was the current event


def decide(outcome: EventOutcome, reject_after: int = 0) -> AcknowledgeType:
    """ACCEPT a record an agent processed; RELEASE one it raised on or never saw.

    ``reject_after`` > 0: a failing delivery whose count has reached it is REJECTed (archived at
    once, never redelivered). 0 (the default) always RELEASEs and lets the broker archive the
    record when ``group.share.delivery.count.limit`` (5 by default) is reached.
    """
    if outcome.failed:
        if reject_after > 0 and outcome.delivery_count >= reject_after:
            return AcknowledgeType.REJECT
        return AcknowledgeType.RELEASE
    if not outcome.entered:
        return AcknowledgeType.RELEASE
    return AcknowledgeType.ACCEPT


def parse_options(query: dict[str, str]) -> dict[str, int | str]:
    """Driver options from the broker URL's query (``kshare://host:9192?reject_after=3``)."""
    known = {"reject_after": int, "max_in_flight": int, "max_share_version": int, "share_acquire_mode": str}
    out: dict[str, int | str] = {}
    for key, value in query.items():
        if key not in known:
            raise ValueError(f"unknown kshare transport option {key!r}; known: {', '.join(sorted(known))}")
        try:
            out[key] = known[key](value)
        except ValueError:
            raise ValueError(f"kshare transport option {key}={value!r} is not a {known[key].__name__}") from None
    for key in ("reject_after", "max_in_flight"):
        if int(out.get(key, 0)) < 0:
            raise ValueError(f"{key} must be >= 0")
    return out
