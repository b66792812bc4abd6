"""Option validation and offset ranges: pure checks, plus the messages Spark users see on load()."""

from __future__ import annotations

import sys
import tomllib
import warnings
from pathlib import Path

import pytest

from kshare_sidecar.spark import LockDurationWarning, OptionError, parse_options
from kshare_sidecar.spark import ranges as R
from kshare_sidecar.spark.clientconf import validate_clients

BASE = {"kafka.bootstrap.servers": "h:9092", "group": "g", "subscribe": "a, b,a"}
ROOT = Path(__file__).resolve().parents[2]


def test_minimal_options_and_defaults():
    opts = parse_options(BASE)
    assert opts.topics == ("a", "b")
    assert opts.backend == "h:9092" and not opts.backend_given
    assert opts.max_records == 10_000
    cfg = opts.share_consumer_config()
    assert cfg["share.acknowledgement.mode"] == "explicit" and cfg["group.id"] == "g"
    validate_clients(opts)


def test_case_insensitive_and_passthrough():
    opts = parse_options({**BASE, "MAXRECORDSPERTRIGGER": "7", "kafka.backend.servers": "b:1",
                          "kafka.client.id": "x"})
    assert opts.max_records == 7 and opts.backend == "b:1"
    assert opts.plain_consumer_config()["client.id"] == "x"
    assert opts.share_consumer_config()["client.id"] == "x"
    assert opts.plain_consumer_config()["bootstrap.servers"] == "b:1"


def test_prefixes_give_a_setting_to_one_client():
    """Client settings by prefix: kafka.share.* -> the driver's share consumer, kafka.read.* -> the readers,
    kafka.* -> both, the more specific prefix winning; a reader-only setting becomes possible."""
    opts = parse_options({**BASE, "kafka.client.id": "both", "kafka.share.client.id": "driver",
                          "kafka.read.isolation.level": "read_committed", "kafka.read.fetch.wait.max.ms": "5"})
    share, read = opts.share_consumer_config(), opts.plain_consumer_config()
    assert share["client.id"] == "driver" and read["client.id"] == "both"
    assert read["isolation.level"] == "read_committed" and "isolation.level" not in share
    assert read["fetch.wait.max.ms"] == "5"
    validate_clients(opts)  # valid for both clients as split


def test_readers_prefetch_about_one_fetch_ahead_unless_told_otherwise():
    """Readers' prefetch: librdkafka's default prefetch (queued.min.messages 100,000) fetched 4-5x the
    records a 10k range needed; the readers default to about one fetch ahead, overridable."""
    read = parse_options(BASE).plain_consumer_config()
    assert (read["queued.min.messages"], read["fetch.queue.backoff.ms"]) == (1000, 1)
    assert "queued.min.messages" not in parse_options(BASE).share_consumer_config()
    read = parse_options({**BASE, "kafka.read.queued.min.messages": "50000"}).plain_consumer_config()
    assert read["queued.min.messages"] == "50000"


@pytest.mark.parametrize("extra, message", [
    # kafka.* goes to both: isolation.level is not a share-consumer setting -> say which prefix works
    ({"kafka.isolation.level": "read_committed"},
     r"option 'kafka.isolation.level' is not valid for the driver's share consumer.*'kafka.read.isolation.level'"),
    ({"kafka.share.no.such.thing": "1"}, r"option 'kafka.share.no.such.thing' is not valid.*no.such.thing"),
    ({"kafka.read.isolation.level": "sometimes"}, r"option 'kafka.read.isolation.level' is not valid for the "
                                                  r"executors' readers.*Invalid value"),
    ({"kafka.fetch.wait.max.ms": "soon"}, r"option 'kafka.fetch.wait.max.ms' is not valid"),
])
def test_client_settings_are_checked_at_load(extra, message):
    """Client settings are checked at load: kafka.* settings used to be checked only at the first trigger."""
    with pytest.raises(OptionError, match=message):
        validate_clients(parse_options({**BASE, **extra}))


@pytest.mark.parametrize("drop, message", [
    ("group", "option 'group' is required"),
    ("subscribe", "option 'subscribe' is required"),
    ("kafka.bootstrap.servers", "option 'kafka.bootstrap.servers' is required"),
])
def test_missing_required(drop, message):
    with pytest.raises(OptionError, match=message):
        parse_options({k: v for k, v in BASE.items() if k != drop})


@pytest.mark.parametrize("extra, message", [
    ({"subscribePattern": "a.*"}, "option 'subscribePattern' is not supported.*subscribe by topic name"),
    ({"assign": '{"a":[0]}'}, "a share group assigns partitions itself"),
    ({"startingoffsets": "earliest"}, "option 'startingOffsets' is not supported.*share.auto.offset.reset"),
    ({"maxOffsetsPerTrigger": "5"}, "maxRecordsPerTrigger"),
    ({"grup": "x"}, r"unknown option\(s\) for the kshare source: 'grup' \(did you mean 'group'\?\)"),
    # Spark lower-cases option names; the message names the option as documented.
    ({"maxrecordpertrigger": "7"}, r"'maxrecordpertrigger' \(did you mean 'maxRecordsPerTrigger'\?\)"),
    ({"polltimeout": "7"}, r"did you mean 'pollTimeoutMs'"),
    ({"maxrecordspertrigger": "lots"}, "option 'maxRecordsPerTrigger' must be an integer"),
    ({"maxRecordsPerTrigger": "0"}, "option 'maxRecordsPerTrigger' must be >= 1"),
    ({"readtimeoutms": "-5"}, "option 'readTimeoutMs' must be >= 1"),
    ({"kafka.group.id": "x"}, "use 'group'"),
    ({"kafka.share.acknowledgement.mode": "implicit"}, "set by the kshare source itself"),
    ({"kafka.share.share.acknowledgement.mode": "implicit"}, "set by the kshare source itself"),
    ({"kafka.max.poll.records": "5"}, "use 'maxRecordsPerTrigger'"),
    ({"kafka.read.bootstrap.servers": "x:1"}, "use 'kafka.backend.servers'"),
    ({"kafka.read.enable.auto.commit": "true"}, "never commit"),
    ({"subscribe": "bad topic"}, "invalid topic name"),
    ({"includeheaders": "yes"}, "option 'includeHeaders' must be true or false, got 'yes'"),
    ({"minPartitions": "0"}, "option 'minPartitions' must be >= 1, got 0"),
    ({"minpartitions": "two"}, "option 'minPartitions' must be an integer"),
])
def test_rejected(extra, message):
    with pytest.raises(OptionError, match=message):
        parse_options({**BASE, **extra})


def test_headers_are_a_column_only_when_asked_for():
    """As Spark's Kafka source (includeHeaders, default false): the column costs every batch."""
    from kshare_sidecar.spark import SCHEMA, SCHEMA_WITH_HEADERS
    from kshare_sidecar.spark.read import arrow_schema
    from kshare_sidecar.spark.source import schema_for

    assert not parse_options(BASE).include_headers
    assert parse_options({**BASE, "INCLUDEHEADERS": "True"}).include_headers
    assert not parse_options({**BASE, "includeHeaders": "false"}).include_headers
    assert schema_for(parse_options(BASE)) == SCHEMA and "headers" not in SCHEMA
    assert schema_for(parse_options({**BASE, "includeHeaders": "true"})) == SCHEMA_WITH_HEADERS
    assert arrow_schema().names == [c.split()[0] for c in SCHEMA.split(", ")]
    assert arrow_schema(True).names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
                                        "headers", "deliveryCount"]


def test_min_partitions_is_optional():
    assert parse_options(BASE).min_partitions is None
    assert parse_options({**BASE, "MINPARTITIONS": "8"}).min_partitions == 8


def test_a_batch_is_spread_evenly_over_its_input_partitions():
    """The share group decides where a batch's records come from (14-17k + 3-9k on two
    partitions were seen), so tasks get even slices: one per assigned topic-partition by default,
    at least minPartitions, none under MIN_SLICE records."""
    from types import SimpleNamespace

    from kshare_sidecar.spark.source import MIN_SLICE, ShareGroupStreamReader

    def plan(reader, ranges, assigned=0):
        reader._acquirer = SimpleNamespace(assigned=assigned) if assigned else None
        end = {"seq": 0, "sid": reader.sid, "ranges": ranges}
        return [part.parts for part in reader.partitions(R.initial_offset(), end)]

    reader = ShareGroupStreamReader(parse_options(BASE))
    lopsided = {"a:0": [[0, 14_999, 1]], "a:1": [[0, 4_999, 2]]}
    assert plan(reader, lopsided) == [[("a", 0, [[0, 9_999, 1]])],
                                      [("a", 0, [[10_000, 14_999, 1]]), ("a", 1, [[0, 4_999, 2]])]]
    tail = {"a:1": [[5_000, 24_999, 1]]}  # the other partition is drained: still one task per core's worth
    assert plan(reader, tail) == [[("a", 1, [[5_000, 24_999, 1]])]]
    assert plan(reader, tail, assigned=2) == [[("a", 1, [[5_000, 14_999, 1]])], [("a", 1, [[15_000, 24_999, 1]])]]
    wide = ShareGroupStreamReader(parse_options({**BASE, "minPartitions": "4"}))
    assert [sum(R.count({"x": rs}) for _, _, rs in part) for part in plan(wide, tail, assigned=2)] == [5_000] * 4
    small = {"a:1": [[0, MIN_SLICE + 5, 1]]}
    assert len(plan(wide, small)) == 2 and len(plan(wide, {"a:1": [[0, 9, 1]]})) == 1
    assert plan(reader, {}) == []


def test_lock_shorter_than_trigger_warns():
    with pytest.warns(LockDurationWarning, match="not shorter than the acquisition lock"):
        parse_options({**BASE, "triggerIntervalMs": "60000", "lockDurationMs": "30000"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_options({**BASE, "triggerIntervalMs": "5000", "lockDurationMs": "30000"})


def test_ranges_compress_and_count():
    recs = [("t", 0, o, 1) for o in (5, 3, 4, 9)] + [("t", 0, 10, 2), ("t", 1, 0, 1), ("t", 0, 4, 1)]
    got = R.compress(recs)
    assert got == {"t:0": [[3, 5, 1], [9, 9, 1], [10, 10, 2]], "t:1": [[0, 0, 1]]}
    assert R.count(got) == 6
    assert sorted(R.offsets(got)) == sorted({(t, p, o) for t, p, o, _ in recs})
    assert R.split_key("my.topic-1:12") == ("my.topic-1", 12)


def test_spark_extra_installs_what_the_source_imports():
    """Installation: `pip install kshare-sidecar[spark]` must bring confluent-kafka (the driver's
    ShareConsumer and the executors' readers) and a PySpark with admission control."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {dep.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip() for dep in extras["spark"]}
    assert {"pyspark", "confluent-kafka", "pandas"} <= names, extras["spark"]
    assert any(dep.startswith("pyspark[sql]>=4.2") for dep in extras["spark"])


def test_missing_confluent_kafka_fails_at_load_with_the_install_hint(monkeypatch):
    """Installation: without confluent-kafka, load() fails with the fix instead of the query dying
    at its first trigger with ModuleNotFoundError."""
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # makes `import confluent_kafka` fail
    with pytest.raises(OptionError, match=r"needs confluent-kafka.*pip install 'kshare-sidecar\[spark\]'"):
        validate_clients(parse_options(BASE))


def test_load_reports_bad_options(spark):
    reader = spark.readStream.format("kshare").option("kafka.bootstrap.servers", "127.0.0.1:1")
    with pytest.raises(Exception, match="option 'group' is required"):
        reader.option("subscribe", "t").load()
    with pytest.raises(Exception, match=r"'subscrib' \(did you mean 'subscribe'\?\)"):
        spark.readStream.format("kshare").option("kafka.bootstrap.servers", "h:1").option("group", "g") \
            .option("subscribe", "t").option("subscrib", "t").load()
    ok = spark.readStream.format("kshare").option("kafka.bootstrap.servers", "h:1").option("group", "g") \
        .option("subscribe", "t")
    assert "headers" not in ok.load().columns
    assert ok.option("includeHeaders", "true").load().columns[-2:] == ["headers", "deliveryCount"]
    # kafka.* settings are checked by load() now, not at the first trigger.
    with pytest.raises(Exception, match=r"'kafka.isolation.level' is not valid for the driver's share consumer"):
        spark.readStream.format("kshare").option("kafka.bootstrap.servers", "h:1").option("group", "g") \
            .option("subscribe", "t").option("kafka.isolation.level", "read_committed").load()


def test_driver_client_is_kshare_unless_a_setting_needs_librdkafka(tmp_path):
    from kshare_sidecar.spark.shareclient import asyncio_kwargs, driver_client

    assert driver_client(parse_options(BASE))[0] == "kshare"
    plain = parse_options({**BASE, "kafka.client.id": "etl", "kafka.share.fetch.wait.max.ms": "200",
                           "kafka.statistics.interval.ms": "1000", "kafka.read.isolation.level": "read_committed"})
    assert driver_client(plain)[0] == "kshare"
    assert asyncio_kwargs(plain) == {"client_id": "etl", "fetch_max_wait_ms": 200}
    scram = parse_options({**BASE, "kafka.security.protocol": "sasl_plaintext", "kafka.sasl.mechanism": "SCRAM-SHA-512",
                           "kafka.sasl.username": "u", "kafka.sasl.password": "p"})
    assert asyncio_kwargs(scram) == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                                     "sasl_plain_username": "u", "sasl_plain_password": "p"}
    # librdkafka's default SASL mechanism is GSSAPI, which only librdkafka speaks
    gssapi = parse_options({**BASE, "kafka.security.protocol": "SASL_PLAINTEXT"})
    which, why = driver_client(gssapi)
    assert which == "librdkafka" and "GSSAPI" in why
    odd = parse_options({**BASE, "kafka.share.socket.nagle.disable": "true"})
    assert driver_client(odd) == ("librdkafka", "shareClient=auto and no asyncio-client equivalent for "
                                                "'kafka.share.socket.nagle.disable'")
    with pytest.raises(OptionError, match="'shareClient' is 'kshare'.*'kafka.share.socket.nagle.disable'"):
        driver_client(parse_options({**BASE, "kafka.share.socket.nagle.disable": "true", "shareclient": "kshare"}))
    assert driver_client(parse_options({**BASE, "shareClient": "LIBRDKAFKA"}))[0] == "librdkafka"
    with pytest.raises(OptionError, match="'shareClient' must be one of auto, kshare, librdkafka"):
        parse_options({**BASE, "shareClient": "java"})


def test_tls_settings_become_one_ssl_context():
    import ssl

    from kshare_sidecar.spark.shareclient import asyncio_kwargs

    opts = parse_options({**BASE, "kafka.security.protocol": "SSL", "kafka.ssl.endpoint.identification.algorithm": "none"})
    ctx = asyncio_kwargs(opts)["ssl_context"]
    assert isinstance(ctx, ssl.SSLContext) and not ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    lax = parse_options({**BASE, "kafka.security.protocol": "SSL", "kafka.enable.ssl.certificate.verification": "false"})
    assert asyncio_kwargs(lax)["ssl_context"].verify_mode == ssl.CERT_NONE


def test_reader_is_the_raw_fetch_reader_unless_a_setting_needs_librdkafka():
    from kshare_sidecar.spark.readclient import reader_client, reader_config

    base = {"kafka.bootstrap.servers": "127.0.0.1:9092", "group": "g", "subscribe": "t"}
    assert reader_client(parse_options(base))[0] == "kshare"
    assert reader_client(parse_options({**base, "kafka.session.timeout.ms": "45000"}))[0] == "kshare"
    which, why = reader_client(parse_options({**base, "kafka.read.socket.nagle.disable": "true"}))
    assert which == "librdkafka" and "kafka.read.socket.nagle.disable" in why
    assert reader_client(parse_options({**base, "kafka.security.protocol": "SASL_SSL"}))[0] == "librdkafka"  # GSSAPI
    with pytest.raises(OptionError, match="readClient"):
        reader_client(parse_options({**base, "kafka.read.socket.nagle.disable": "true", "readClient": "kshare"}))
    cfg = reader_config(parse_options({**base, "kafka.read.isolation.level": "read_uncommitted",
                                       "kafka.fetch.max.bytes": "1000000", "kafka.client.id": "etl"}))
    assert (cfg.isolation, cfg.fetch_max_bytes, cfg.client_id, cfg.max_wait_ms) == (0, 1_000_000, "etl", 100)
    with pytest.raises(OptionError, match="kafka.read.isolation.level"):
        reader_config(parse_options({**base, "kafka.read.isolation.level": "snapshot"}))
    with pytest.raises(OptionError, match="readClient"):
        parse_options({**base, "readClient": "java"})
