"""The soak's verdicts (tests/soak/rules.py, ledger.py) on made-up samples: part of the default suite."""

from __future__ import annotations

import json
import math

from tests.soak.ledger import EventTail, Ledger
from tests.soak.rules import (
    MIB,
    bucket_delta,
    fds_flat,
    histogram_quantile,
    rss_levels_off,
    slope_per_hour,
    state_topic_bounded,
)


def test_slope_is_per_hour():
    assert math.isclose(slope_per_hour([(t, 2.0 * t) for t in range(0, 600, 10)]), 7200.0)
    assert slope_per_hour([(0, 1.0), (10, 1.0)]) == 0.0


def test_growth_that_levels_off_passes_and_growth_to_the_end_fails():
    warm = [(t, 80 * MIB + min(t, 900) * 20_000) for t in range(0, 3600, 15)]  # rises for 15 min, then flat
    assert rss_levels_off(warm, 600, 16).ok
    leak = [(t, 80 * MIB + t * 10_000) for t in range(0, 3600, 15)]  # ~34 MiB an hour to the end
    assert not rss_levels_off(leak, 600, 16).ok


def test_fds_and_state_topic_bounds():
    assert fds_flat([(t, 20) for t in range(0, 1200, 10)], 600, 8).ok
    assert not fds_flat([(t, 20 + t // 60) for t in range(0, 1200, 10)], 600, 8).ok
    assert state_topic_bounded([5 * MIB, 9 * MIB, 7 * MIB, 8 * MIB], 24 * MIB).ok
    assert not state_topic_bounded([5 * MIB, 9 * MIB, 30 * MIB, 60 * MIB], 24 * MIB).ok


def test_histogram_quantile_interpolates_inside_the_bucket():
    buckets = [(0.001, 0.0), (0.01, 50.0), (0.1, 100.0), (float("inf"), 100.0)]
    assert math.isclose(histogram_quantile(0.5, buckets), 0.01)
    assert math.isclose(histogram_quantile(0.75, buckets), 0.055)
    assert histogram_quantile(0.5, [(float("inf"), 0.0)]) is None
    before = [(0.001, 0.0), (0.01, 40.0), (0.1, 40.0), (float("inf"), 40.0)]
    assert bucket_delta(buckets, before) == [(0.001, 0.0), (0.01, 10.0), (0.1, 60.0), (float("inf"), 60.0)]
    assert bucket_delta(before, buckets) == before  # counters went down: a restarted process


def test_ledger_finds_lost_and_doubly_accepted_records(tmp_path):
    path = tmp_path / "w.jsonl"
    events = [{"ev": "rec", "p": 0, "o": 0, "dc": 1, "v": "1:1000", "t": 1.5},
              {"ev": "ack", "p": 0, "o": 0, "dc": 1, "ok": True},
              {"ev": "rec", "p": 0, "o": 1, "dc": 1, "v": "2:1000", "t": 2.0},
              {"ev": "ack", "p": 0, "o": 1, "dc": 1, "ok": True},
              {"ev": "ack", "p": 0, "o": 1, "dc": 1, "ok": True},
              {"ev": "rec", "p": 0, "o": 0, "dc": 2, "v": "1:1000", "t": 3.0}]
    path.write_text("\n".join(json.dumps(e) for e in events) + '\n{"ev": "rec", "p"')  # a torn last line
    tail, ledger = EventTail(path), Ledger()
    ledger.produced = {(0, 0): 1000, (0, 1): 1000, (0, 2): 1000}
    ledger.add(tail.new_events())
    assert ledger.never_delivered() == [(0, 2)]
    assert ledger.doubly_accepted() == [(0, 1)]
    assert ledger.redelivered_after_ack == [(0, 0, 2)]
    assert ledger.take_interval() == (3, 3, [500.0, 1000.0])
    assert tail.new_events() == []
