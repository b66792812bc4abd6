"""Engine configuration with Kafka's names and defaults (group.share.*, Kafka 4.3)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShareConfig:
    """Per share-partition knobs; frozen so one instance can be shared by every partition of a group.

    record_lock_duration_ms: acquisition lock duration (group.share.record.lock.duration.ms).
    delivery_count_limit: delivery attempts before a record is archived (group.share.delivery.count.limit).
    max_record_locks: cap on the in-flight window SPSO..SPEO (group.share.partition.max.record.locks).
    throttle_redelivery: Kafka 4.2+ poison-record throttling (shrinking redelivery chunks).
    """

    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_record_locks: int = 2_000
    throttle_redelivery: bool = True

    def __post_init__(self) -> None:
        if self.record_lock_duration_ms <= 0:
            raise ValueError("record_lock_duration_ms must be > 0")
        if self.delivery_count_limit < 1:
            raise ValueError("delivery_count_limit must be >= 1")
        if self.max_record_locks < 1:
            raise ValueError("max_record_locks must be >= 1")

    @property
    def throttle_threshold(self) -> int:
        """Delivery count from which redelivery is throttled: max(2, ceil(limit / 2)) as in Kafka."""
        return max(2, -(-self.delivery_count_limit // 2))


@dataclass(frozen=True, slots=True)
class Extensions:
    """kshare's per-group features beyond native share groups (docs/extensions.md); all off by default.

    dead_letter: the group has a dead-letter topic (errors.deadletterqueue.topic.name): rejected
      records and records archived at the delivery count limit are written there before they are
      archived.
    backoff_ms / backoff_multiplier / backoff_max_ms: release backoff (share.release.backoff.*).
    key_ordering: at most one in-flight delivery per record key, in offset order (share.key.ordering).
    """

    dead_letter: bool = False
    backoff_ms: int = 0
    backoff_multiplier: float = 2.0
    backoff_max_ms: int = 60_000
    key_ordering: bool = False

    def __post_init__(self) -> None:
        if self.backoff_ms < 0 or self.backoff_max_ms < 0:
            raise ValueError("backoff_ms and backoff_max_ms must be >= 0")
        if self.backoff_multiplier < 1.0:
            raise ValueError("backoff_multiplier must be >= 1.0")

    @property
    def enabled(self) -> bool:
        return self.dead_letter or self.backoff_ms > 0 or self.key_ordering
