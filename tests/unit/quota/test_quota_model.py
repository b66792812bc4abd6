"""Kafka's client-quota rules (quota/model.py): entity precedence, whose bytes count together, the
sampled rate and the throttle time — against Kafka's ClientQuotaManager / Rate / QuotaUtils, and a
naive model of the rate (hypothesis)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from kshare_sidecar.backend.clients import BackendClients
from kshare_sidecar.quota.client_quotas import ClientQuotas
from kshare_sidecar.quota.model import DEFAULT, MISSING, Entity, QuotaTable, SampledRate, entity_of

ALICE, APP = "alice", "app"


def table(**bounds: float) -> QuotaTable:
    names = {"uc": Entity(ALICE, APP), "ud": Entity(ALICE, DEFAULT), "u": Entity(ALICE, MISSING),
             "dc": Entity(DEFAULT, APP), "dd": Entity(DEFAULT, DEFAULT), "d": Entity(DEFAULT, MISSING),
             "c": Entity(MISSING, APP), "cd": Entity(MISSING, DEFAULT)}
    return QuotaTable({names[k]: v for k, v in bounds.items()})


def test_the_most_specific_entity_wins_in_kafkas_order():
    order = ["uc", "ud", "u", "dc", "dd", "d", "c", "cd"]
    for i, name in enumerate(order):
        t = table(**{n: float(j + 1) for j, n in enumerate(order[i:], start=i)})
        assert t.resolve(ALICE, APP)[1] == float(i + 1), name
    assert table().resolve(ALICE, APP) is None


def test_whose_bytes_count_together():
    assert table(cd=100).resolve(ALICE, APP)[0] == ("", APP)  # per client id (any user)
    assert table(c=100).resolve("bob", APP)[0] == ("", APP)
    assert table(d=100).resolve(ALICE, APP)[0] == (ALICE, "")  # per user (any client id)
    assert table(uc=100).resolve(ALICE, APP)[0] == (ALICE, APP)
    assert table(uc=100).resolve("bob", APP) is None  # only alice's app has a quota
    assert table(u=50, c=100).resolve(ALICE, APP) == ((ALICE, ""), 50)  # mixed shapes: the cascade
    assert table(u=50, c=100).resolve("bob", APP) == (("", APP), 100)


def test_entities_of_describe_client_quotas():
    assert entity_of([("user", "alice"), ("client-id", None)]) == Entity(ALICE, DEFAULT)
    assert entity_of([("client-id", "app")]) == Entity(MISSING, APP)
    assert entity_of([("ip", "10.0.0.1")]) is None


def test_rate_and_throttle_time_as_kafka_computes_them():
    rate = SampledRate(11, 1000)
    rate.record(5000, 0)
    # one sample, but the span counts as 10 whole windows: 5000 B / 10 s
    assert rate.measure(0) == 500.0
    assert rate.throttle_ms(1000, 0) == 0
    rate.record(15000, 100)
    # Rate.windowSize: 100 ms elapsed, no whole window: + 10 windows
    assert rate.measure(100) == 20000 / 10.1
    # QuotaUtils.throttleTime: (rate - bound) / bound × window size
    assert rate.throttle_ms(1000, 100) == round((20000 / 10.1 - 1000) / 1000 * 10_100)
    # 11 s later every sample has expired: nothing left
    assert rate.measure(11_200) == 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 10_000)), min_size=1, max_size=60))
def test_rate_matches_a_naive_model(events):
    """Naive: keep every (time, value); the rate is their sum over the time since the first sample
    began, padded with the whole windows missing to 10 — checked at the last event, before any
    sample expires (< 11 windows)."""
    rate = SampledRate(11, 1000)
    now, log = 0, []
    for gap, value in events:
        now += gap
        rate.record(value, now)
        log.append((now, value))
    if now >= 11_000:
        return
    # samples start at the first event of each window-long run, exactly as Kafka's advance
    starts, start = [], None
    for t, _ in log:
        if start is None or t - start >= 1000:
            start = t
            starts.append(t)
    if len(starts) > 12:
        return
    elapsed = now - starts[0]
    span = max(elapsed + max(0, 10 - elapsed // 1000) * 1000, 1)
    expected = sum(v for _, v in log) / (span / 1000)
    assert abs(rate.measure(now) - expected) < 1e-6


def test_record_throttles_mutes_and_caps_max_bytes():
    now = [100.0]
    quotas = ClientQuotas(BackendClients("127.0.0.1:1"), clock=lambda: now[0])
    quotas.table = table(c=1000)
    assert quotas.admit("User:ANONYMOUS", APP, 52_428_800) == (10_000, 0)  # 1000 B/s × 10 windows
    assert quotas.admit("User:ANONYMOUS", "other", 500) == (500, 0)  # no quota
    assert quotas.record("User:ANONYMOUS", APP, 5000, conn_id=7) == 0
    assert quotas.admit("User:ANONYMOUS", APP, 52_428_800) == (5000, 0)  # what is left within the quota
    throttle = quotas.record("User:ANONYMOUS", APP, 10_000, conn_id=7)  # a first batch larger than that
    assert throttle == 5000  # 15 000 B over 10 windows, 1500 B/s: (1500 - 1000) / 1000 × 10 s
    max_bytes, wait = quotas.admit("User:ANONYMOUS", APP, 52_428_800)
    assert (max_bytes, wait) == (0, 5000)  # at the quota: nothing acquired, the throttle answered
    waited = []

    async def sleep(s):
        waited.append(s)
        now[0] += s

    async def run():
        original = asyncio.sleep
        asyncio.sleep = sleep  # type: ignore[assignment]
        try:
            await quotas.unmuted(7)
            await quotas.unmuted(7)  # over: no second wait
            await quotas.unmuted(8)  # never throttled
        finally:
            asyncio.sleep = original  # type: ignore[assignment]

    asyncio.run(run())
    assert waited == [5.0]
