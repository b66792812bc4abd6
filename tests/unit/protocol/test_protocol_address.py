"""host:port parsing (protocol/address.py): one rule for config, clients, CLI and harness."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.protocol.address import first_server, parse_bootstrap, parse_host_port, problem


def test_examples() -> None:
    assert parse_host_port("127.0.0.1:9092") == ("127.0.0.1", 9092)
    assert parse_host_port(" [::1]:9192 ") == ("::1", 9192)
    assert parse_host_port("kafka-0.kafka.svc:0") == ("kafka-0.kafka.svc", 0)
    assert parse_bootstrap("a:1, b:2,") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["a:1", "[fe80::1]:3"]) == [("a", 1), ("fe80::1", 3)]
    assert first_server("x:9,y:8") == ("x", 9)


@pytest.mark.parametrize("bad", ["9092", "host:", ":9092", "host:port", "host:65536", "host:-1", "[]:1", ""])
def test_bad_addresses_name_the_value(bad: str) -> None:
    assert problem(bad) == "expected host:port, for example 127.0.0.1:9192"
    with pytest.raises(ValueError, match="expected host:port"):
        parse_host_port(bad)


def test_bad_bootstrap() -> None:
    with pytest.raises(ValueError, match="no bootstrap server given"):
        parse_bootstrap(" , ")
    with pytest.raises(ValueError, match=r"bad bootstrap server 'b': expected host:port"):
        parse_bootstrap("a:1,b")


hosts = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
)


@given(st.lists(st.tuples(hosts, st.integers(0, 65535)), min_size=1, max_size=5))
def test_round_trip_against_a_naive_model(servers: list[tuple[str, int]]) -> None:
    text = ",".join(f"{h}:{p}" for h, p in servers)
    assert parse_bootstrap(text) == [(h.strip("[]"), p) for h, p in servers]
