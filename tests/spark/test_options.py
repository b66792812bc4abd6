"""Option validation and offset ranges: pure checks, plus the messages Spark users see on load()."""

from __future__ import annotations

import warnings

import pytest

from kshare_sidecar.spark import LockDurationWarning, OptionError, parse_options
from kshare_sidecar.spark import ranges as R

BASE = {"kafka.bootstrap.servers": "h:9092", "group": "g", "subscribe": "a, b,a"}


def test_minimal_options_and_defaults():
    opts = parse_options(BASE)
    assert opts.topics == ("a", "b")
    assert opts.backend == "h:9092"
    assert opts.max_records == 10_000
    cfg = opts.share_consumer_config()
    assert cfg["share.acknowledgement.mode"] == "explicit" and cfg["group.id"] == "g"


def test_case_insensitive_and_passthrough():
    opts = parse_options({**BASE, "MAXRECORDSPERTRIGGER": "7", "kafka.backend.servers": "b:1",
                          "kafka.client.id": "x"})
    assert opts.max_records == 7 and opts.backend == "b:1"
    assert opts.plain_consumer_config()["client.id"] == "x"
    assert opts.plain_consumer_config()["bootstrap.servers"] == "b:1"


@pytest.mark.parametrize("drop, message", [
    ("group", "option 'group' is required"),
    ("subscribe", "option 'subscribe' is required"),
    ("kafka.bootstrap.servers", "option 'kafka.bootstrap.servers' is required"),
])
def test_missing_required(drop, message):
    with pytest.raises(OptionError, match=message):
        parse_options({k: v for k, v in BASE.items() if k != drop})


@pytest.mark.parametrize("extra, message", [
    ({"subscribePattern": "a.*"}, "share groups subscribe by topic name"),
    ({"assign": '{"a":[0]}'}, "a share group assigns partitions itself"),
    ({"startingOffsets": "earliest"}, "share.auto.offset.reset"),
    ({"maxOffsetsPerTrigger": "5"}, "maxRecordsPerTrigger"),
    ({"grup": "x"}, r"unknown option\(s\) grup"),
    ({"maxRecordsPerTrigger": "lots"}, "must be an integer"),
    ({"maxRecordsPerTrigger": "0"}, "must be >= 1"),
    ({"kafka.group.id": "x"}, "use 'group'"),
    ({"kafka.share.acknowledgement.mode": "implicit"}, "set by the kshare source itself"),
    ({"subscribe": "bad topic"}, "invalid topic name"),
])
def test_rejected(extra, message):
    with pytest.raises(OptionError, match=message):
        parse_options({**BASE, **extra})


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


def test_load_reports_bad_options(spark):
    reader = spark.readStream.format("kshare").option("kafka.bootstrap.servers", "127.0.0.1:1")
    with pytest.raises(Exception, match="option 'group' is required"):
        reader.option("subscribe", "t").load()
    with pytest.raises(Exception, match=r"unknown option\(s\) subscrib"):
        spark.readStream.format("kshare").option("kafka.bootstrap.servers", "h:1").option("group", "g") \
            .option("subscribe", "t").option("subscrib", "t").load()
