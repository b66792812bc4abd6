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
