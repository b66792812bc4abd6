"""The connection setup timeout schedule (backend/connection_states.py) against Kafka's rules:
ExponentialBackoff's formula and ClusterConnectionStates' counting (KIP-601)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.backend.connection_states import ClusterConnectionStates, ExponentialBackoff

LOW, MID, HIGH = (lambda a, b: a), (lambda a, b: (a + b) / 2), (lambda a, b: b)
B = ("10.0.0.1", 9092)


def test_kafka_defaults_without_jitter_double_from_10_s_to_30_s():
    states = ClusterConnectionStates(uniform=MID)
    seen = []
    for _ in range(4):
        attempt = states.connecting(*B)
        seen.append(attempt.timeout_s)
        states.failed(attempt)
    assert seen == [10.0, 20.0, 30.0, 30.0]


def test_jitter_is_plus_or_minus_20_percent_and_never_above_the_max():
    assert [ExponentialBackoff(10_000, 2, 30_000, 0.2, uniform=LOW).backoff(n) for n in range(3)] == \
        [8_000, 16_000, 24_000]
    assert [ExponentialBackoff(10_000, 2, 30_000, 0.2, uniform=HIGH).backoff(n) for n in range(3)] == \
        [12_000, 24_000, 30_000]


def test_a_max_below_the_base_is_used_for_every_attempt():
    backoff = ExponentialBackoff(10_000, 2, 4_000, 0.2, uniform=HIGH)
    assert [backoff.backoff(n) for n in range(3)] == [4_000, 4_000, 4_000]


def test_a_connection_set_up_resets_the_count():
    states = ClusterConnectionStates(uniform=MID)
    states.failed(states.connecting(*B))
    states.failed(states.connecting(*B))
    assert states.failures(*B) == 2
    states.ready(states.connecting(*B))
    assert states.failures(*B) == 0 and states.connecting(*B).timeout_s == 10.0


def test_brokers_are_counted_apart():
    states = ClusterConnectionStates(uniform=MID)
    states.failed(states.connecting(*B))
    assert states.connecting("10.0.0.2", 9092).timeout_s == 10.0
    assert states.connecting(*B).timeout_s == 20.0


def test_attempts_made_together_count_as_one_failure():
    states = ClusterConnectionStates(uniform=MID)
    together = [states.connecting(*B) for _ in range(3)]  # three connections to one broker, one partition
    for attempt in together:
        states.failed(attempt)
    assert states.failures(*B) == 1 and states.connecting(*B).timeout_s == 20.0


@pytest.mark.parametrize("ms,max_ms", [(0, 30_000), (10_000, 0)])
def test_timeouts_below_one_ms_are_refused(ms, max_ms):
    with pytest.raises(ValueError):
        ClusterConnectionStates(ms, max_ms)


def naive_timeout_ms(base: int, top: int, failures: int, factor: float) -> int:
    """The schedule read off Kafka's documentation: base doubled per failure until the un-jittered
    value reaches the max, times the jitter factor, never above the max; a max at or below the base is
    used as it is (Kafka's ExponentialBackoff applies no jitter then)."""
    if base >= top:
        return top
    term = float(base)
    for _ in range(failures):
        if term >= top:
            break
        term = min(term * 2, float(top))
    return min(int(term * factor), top)


@given(base=st.integers(1, 120_000), top=st.integers(1, 120_000),
       outcomes=st.lists(st.booleans(), max_size=12), factor=st.floats(0.8, 1.2))
def test_schedule_matches_a_naive_model(base, top, outcomes, factor):
    """Any run of failures and successes: the timeout of each attempt is the naive model's for the
    consecutive failures since the last success, within the jitter band, and never above the max."""
    states = ClusterConnectionStates(base, top, uniform=lambda a, b: factor)
    failures = 0
    for ok in outcomes:
        attempt = states.connecting(*B)
        assert attempt.failures == failures
        want = naive_timeout_ms(base, top, failures, factor)
        # Kafka's exponent is fractional once capped (log(max/base)/log 2): the two agree to the ms
        # except in the last step before the cap, where Kafka's is max * factor
        got = round(attempt.timeout_s * 1000)
        assert got <= top
        if base * 2 ** failures <= top or base >= top:
            assert abs(got - want) <= 1
        else:
            assert math.isclose(got, min(int(top * factor), top), abs_tol=1)
        if ok:
            states.ready(attempt)
            failures = 0
        else:
            states.failed(attempt)
            failures += 1
        assert states.failures(*B) == failures


def test_the_sidecar_takes_kafkas_keys_and_defaults():
    from kshare_sidecar.backend.clients import BackendClients
    from kshare_sidecar.backend.security import BackendSecurity
    from kshare_sidecar.config import load_config

    cfg = load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092"})
    states = BackendClients.from_config(cfg, BackendSecurity()).connection_states
    assert (states.setup_timeout_ms, states.setup_timeout_max_ms) == (10_000, 30_000)
    cfg = load_config(env={"KSHARE_SOCKET_CONNECTION_SETUP_TIMEOUT_MS": "2000"},
                      overrides={"bootstrap.servers": "127.0.0.1:9092", "socket.connection.setup.timeout.max.ms": 5000})
    clients = BackendClients.from_config(cfg, BackendSecurity())
    assert (clients.connection_states.setup_timeout_ms, clients.connection_states.setup_timeout_max_ms) == (2000, 5000)
    # every connection made there shares them
    assert clients.broker("127.0.0.1", 9092)._setup is clients.connection_states


@pytest.mark.parametrize("key,value", [("socket.connection.setup.timeout.ms", 0),
                                       ("socket.connection.setup.timeout.max.ms", -1)])
def test_a_bad_value_is_one_line_naming_the_key_and_the_range(key, value):
    from kshare_sidecar.config import ConfigError, load_config

    with pytest.raises(ConfigError) as err:
        load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092", key: value})
    assert str(err.value) == f"{key} (from command line) = {value} is out of range: allowed 1..2147483647"
