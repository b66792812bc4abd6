"""The typed config: sources in order, Kafka names and defaults, errors that name the key."""

import pytest

from kshare_sidecar.config import GROUP_CONFIGS, ConfigError, env_name, load_config
from kshare_sidecar.timeutil import parse_iso_duration_ms

BASE = {"bootstrap.servers": "127.0.0.1:9092"}


def test_kip_defaults():
    c = load_config(env={}, overrides=BASE)
    assert c["group.share.delivery.count.limit"] == 5
    assert c["group.share.record.lock.duration.ms"] == 30000
    assert c["group.share.partition.max.record.locks"] == 2000
    assert c["group.share.max.share.sessions"] == 2000
    assert c["group.share.session.timeout.ms"] == 45000
    assert c["group.share.heartbeat.interval.ms"] == 5000
    assert c["group.share.max.size"] == 200
    assert c["share.auto.offset.reset"] == "latest"
    assert c.group_config()["share.isolation.level"] == "read_uncommitted"


def test_file_then_env_then_flags(tmp_path):
    f = tmp_path / "kshare.toml"
    f.write_text('bootstrap.servers = "10.0.0.1:9092"\nlisten = "127.0.0.1:1111"\n'
                 '[group.share]\n"delivery.count.limit" = 3\nmax.size = 7\n')
    env = {env_name("listen"): "127.0.0.1:2222", env_name("group.share.max.size"): "9"}
    c = load_config(f, env=env, overrides={"group.share.max.size": 11})
    assert c["bootstrap.servers"] == "10.0.0.1:9092"
    assert c["group.share.delivery.count.limit"] == 3
    assert c["listen"] == "127.0.0.1:2222"
    assert c["group.share.max.size"] == 11
    assert c.advertised == ("127.0.0.1", 2222)


@pytest.mark.parametrize("overrides,needle", [
    ({}, "bootstrap.servers (from defaults) = '': required"),
    ({"listen": "nohost"}, "listen (from command line) = 'nohost': expected host:port"),
    ({"advertised.listener": "kshare.example"}, "advertised.listener (from command line) = 'kshare.example': "
                                                "expected host:port"),
    ({"bootstrap.servers": "a:1,[]:9092"}, "bootstrap.servers (from command line) = 'a:1,[]:9092': expected "
                                           "host:port"),
    ({"group.share.delivery.count.limit": 1}, "group.share.delivery.count.limit (from command line) = 1 is out "
                                              "of range: allowed 2..10"),
    ({"share.isolation.level": "dirty"}, "allowed values are read_uncommitted, read_committed"),
    ({"share.auto.offset.reset": "by_duration:1h"}, "is not an ISO-8601 duration"),
    ({"node.id": "x"}, "node.id (from command line) must be int"),
    ({"state.write.mode": "fast"}, "state.write.mode (from command line) = 'fast': allowed values are fenced, "
                                   "transactional, idempotent"),
    ({"lock.duration.ms": 5}, "unknown setting 'lock.duration.ms'"),
])
def test_errors_name_the_key(overrides, needle):
    base = {} if not overrides else BASE
    with pytest.raises(ConfigError) as err:
        load_config(env={}, overrides={**base, **overrides})
    assert needle in str(err.value)


def test_bad_toml_and_missing_file(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("x = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(f, env={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", env={})


def test_group_config_bounds():
    c = load_config(env={}, overrides=BASE)
    assert c.validate_group_config("share.record.lock.duration.ms", "20000") == 20000
    with pytest.raises(ConfigError, match="allowed 15000..60000"):
        c.validate_group_config("share.record.lock.duration.ms", 5000)
    # Kafka 4.3.1: a group may set 2..group.share.max.delivery.count.limit (10), above the default (5)
    assert c.validate_group_config("share.delivery.count.limit", 6) == 6
    with pytest.raises(ConfigError, match="allowed 2..10"):
        c.validate_group_config("share.delivery.count.limit", 11)
    with pytest.raises(ConfigError, match="allowed 45000..60000"):
        c.validate_group_config("share.session.timeout.ms", 44999)
    assert c.validate_group_config("share.renew.acknowledge.enable", "FALSE") is False
    with pytest.raises(ConfigError, match="expected true or false"):
        c.validate_group_config("share.renew.acknowledge.enable", "yes")
    assert c.validate_group_config("streams.num.standby.replicas", "2") == 2
    with pytest.raises(ConfigError, match="allowed 0..15000"):
        c.validate_group_config("consumer.assignment.interval.ms", 15001)
    with pytest.raises(ConfigError, match="allowed keys are"):
        c.validate_group_config("share.nope", 1)
    assert c.validate_group_config("share.auto.offset.reset", "by_duration:PT1H") == "by_duration:PT1H"
    assert set(GROUP_CONFIGS) <= set(c.group_config())


@pytest.mark.parametrize("text,ms", [("PT1H", 3_600_000), ("P1D", 86_400_000), ("PT1.5S", 1500),
                                     ("P1DT2H3M4S", 93_784_000)])
def test_iso_durations(text, ms):
    assert parse_iso_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "1H", "P1Y", "PT1H2"])
def test_bad_iso_durations(text):
    with pytest.raises(ValueError):
        parse_iso_duration_ms(text)
