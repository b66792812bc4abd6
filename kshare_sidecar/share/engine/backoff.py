"""Release backoff (kshare's share.release.backoff.*): how long a record waits after a failed delivery.

Why: Kafka's RELEASE (and an expired acquisition lock) makes a record available again at once,
so a consumer whose downstream is failing is handed the same records in a tight loop. With a
backoff, a record released after its n-th delivery becomes available again only after
``min(backoff.ms × multiplier^(n-1), backoff.max.ms)``; the record stays in the in-flight window
meanwhile (it counts against share.partition.max.record.locks) and keeps its delivery count.
Pure.
"""

from __future__ import annotations


def backoff_ms(delivery_count: int, base_ms: int, multiplier: float, max_ms: int) -> int:
    """Delay after the ``delivery_count``-th failed delivery (0 = backoff off).

    Exponential from ``base_ms``, capped at ``max_ms`` (which is at least ``base_ms`` when the
    configuration is valid; a cap below the base wins)."""
    if base_ms <= 0 or delivery_count <= 0:
        return 0
    delay = float(base_ms)
    for _ in range(delivery_count - 1):
        delay *= multiplier
        if delay >= max_ms:
            break
    return int(min(delay, max_ms))
