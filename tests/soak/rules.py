"""The soak's verdicts, as pure functions over the samples the harness took (unit-tested in
tests/unit/test_soak_rules.py): what "growth that does not level off" means, what "bounded"
means for the state topic, and how a latency quantile is read from a Prometheus histogram.

The growth rule. A process's RSS climbs at start-up (imports, the read cache and the interning of
group and topic names filling, the allocator's arenas) and must then stay flat. After a warm-up
(the first interval), the samples of the *second half* of the remaining run are fitted with a
least-squares line; its slope, projected over an hour, must stay under a bound (MiB per hour).
Fitting only the late half is what "levels off" means: a warm-up that is slower than the first
interval is forgiven, growth that continues to the end is not. File descriptors must not exceed
the warm-up's highest count by more than a small slack (connections are fixed in number: every fd
beyond is a leak). The state topic is bounded when its size on disk in the last interval is no
larger than the largest size seen in the first intervals, with a margin for the one segment
(``segment.ms``) that is open and not yet cleaned: it must not grow with the records processed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIB = 1024 * 1024


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, in value per hour (0 for fewer than 3)."""
    if len(points) < 3:
        return 0.0
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    if sxx == 0:
        return 0.0
    sxy = sum((t - mx) * (v - my) for t, v in points)
    return sxy / sxx * 3600.0


@dataclass(frozen=True)
class Verdict:
    ok: bool
    text: str


def rss_levels_off(samples: Sequence[tuple[float, float]], warmup_s: float, max_mib_per_hour: float) -> Verdict:
    """``samples``: (seconds since start, RSS bytes) of one process that was never restarted."""
    after = [(t, v) for t, v in samples if t >= warmup_s]
    if len(after) < 6:
        return Verdict(True, f"RSS: too few samples after the {warmup_s:.0f} s warm-up to judge ({len(after)})")
    late = after[len(after) // 2:]
    slope = slope_per_hour(late) / MIB
    first, last = after[0][1] / MIB, after[-1][1] / MIB
    text = (f"RSS {first:.1f} -> {last:.1f} MiB after warm-up; late-half slope {slope:+.1f} MiB/h "
            f"(bound {max_mib_per_hour:.0f} MiB/h)")
    return Verdict(slope <= max_mib_per_hour, text)


def fds_flat(samples: Sequence[tuple[float, int]], warmup_s: float, slack: int) -> Verdict:
    warm = [v for t, v in samples if t < warmup_s]
    after = [v for t, v in samples if t >= warmup_s]
    if not warm or not after:
        return Verdict(True, "fds: too few samples to judge")
    bound = max(warm) + slack
    text = f"open fds: warm-up max {max(warm)}, after warm-up max {max(after)}, last {after[-1]} (bound {bound})"
    return Verdict(max(after[len(after) // 2:]) <= bound, text)


def state_topic_bounded(per_interval_max_bytes: Sequence[int], margin_bytes: int) -> Verdict:
    """The last interval's largest on-disk size against the largest of the first two intervals."""
    if len(per_interval_max_bytes) < 3:
        return Verdict(True, "state topic: too few intervals to judge")
    early = max(per_interval_max_bytes[:2])
    last = per_interval_max_bytes[-1]
    text = (f"state topic on disk: early max {early / MIB:.1f} MiB, last interval max {last / MIB:.1f} MiB "
            f"(bound early + {margin_bytes / MIB:.0f} MiB)")
    return Verdict(last <= early + margin_bytes, text)


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over cumulative (upper bound, count) buckets (``inf`` last):
    linear interpolation inside the bucket that holds the quantile. None without observations."""
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return prev_bound  # above the highest finite bound: its bound is all we know
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


def bucket_delta(now: Sequence[tuple[float, float]], before: Sequence[tuple[float, float]] | None
                 ) -> list[tuple[float, float]]:
    """Cumulative buckets of one interval: ``now`` minus ``before`` (a restarted process's counters
    start again from zero: then ``now`` alone)."""
    if not before:
        return list(now)
    old = dict(before)
    delta = [(b, c - old.get(b, 0.0)) for b, c in now]
    if any(c < 0 for _, c in delta):
        return list(now)
    return delta


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
