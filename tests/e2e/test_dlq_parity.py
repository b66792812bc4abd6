"""The same dead-letter scenarios on native Kafka 4.4.0 (KIP-1191, share.version=2) and on kshare
over Kafka 3.9, compared field by field (docs/extensions.md, docs/compatibility.md).

Five share groups run at once on each target, confluent-kafka ShareConsumer processes rejecting
``rej-`` records and releasing ``rel-`` ones until the delivery count limit (2):

* ``copy``: copy.record.enable=true, a 3-partition DLQ topic that opted in — key and value copied,
  no original header, the six ``__dlq.errors.*`` headers, partition = source partition % 3;
* ``nocopy``: the default copy.record.enable (false) — null key and value, the six headers;
* ``missing``: the DLQ topic does not exist — nothing written, the records archived at once, and
  still nothing after the topic is created;
* ``nooptin``: the topic exists without errors.deadletterqueue.group.enable — nothing written;
* ``noprefix``: a name without the broker's ``dlq.`` prefix, accepted as a group config — nothing
  written.

Plus what a describe of the group's configs lists for both DLQ keys, and the refusal of a name
starting with ``__``. Topic and group names are the same on both targets, so the dead-letter
records compare as they are (timestamps aside: Kafka stamps them at the write).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.e2e.ext_support import ExtWorker, produce_records
from tests.support import set_group_config, unique

# Minutes of brokers, sidecar and consumer processes: opt-in (`make test-dlq`), outside the default suite.
pytestmark = [pytest.mark.kafka, pytest.mark.optin("dlq")]

ENABLE = "errors.deadletterqueue.group.enable"
CASES = ("copy", "nocopy", "missing", "nooptin", "noprefix")


def _create(bootstrap: str, topic: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])[topic].result(30)


def _dlq_records(bootstrap: str, topic: str) -> list[tuple]:
    """(partition, key, value, headers) of every record now in ``topic``, in partition and offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("dlqread"), "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None:
            return []
        out = []
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            got = 0
            deadline = time.monotonic() + 30
            while got < high - low and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is None or m.error() is not None:
                    continue
                got += 1
                out.append((m.partition(), m.key(), m.value(), tuple(m.headers() or ())))
        return out
    finally:
        consumer.close()


def _group_describe(bootstrap: str, group: str) -> dict[str, tuple[str, bool]]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    return {k: (v.value, v.is_default) for k, v in future.result(30).items() if k.startswith("errors.")}


def _set_error(bootstrap: str, group: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry("errors.deadletterqueue.topic.name", name, incremental_operation=AlterConfigOpType.SET)
    [future] = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                               incremental_configs=[entry])]).values()
    try:
        future.result(30)
        return "NONE"
    except KafkaException as exc:
        return exc.args[0].name()


def run_scenarios(target: str, bootstrap: str, backend: str, names: dict, tmp_path) -> dict:
    """Every case on one target; -> what a test compares."""
    src, dlq, groups = names["src"], names["dlq"], names["groups"]
    _create(backend, src, 2)
    # Topics are created where an application creates them: through the sidecar for kshare (which
    # keeps the opt-in a 3.9 backend cannot hold), at the broker natively.
    _create(bootstrap, dlq["copy"], 3, {ENABLE: "true"})
    _create(bootstrap, dlq["nocopy"], 2, {ENABLE: "true"})
    _create(bootstrap, dlq["nooptin"], 1)
    _create(bootstrap, dlq["noprefix"], 1, {ENABLE: "true"})
    for case in CASES:
        configs = {"errors.deadletterqueue.topic.name": dlq[case], "share.delivery.count.limit": "2",
                   "share.auto.offset.reset": "earliest"}
        if case == "copy":
            configs["errors.deadletterqueue.copy.record.enable"] = "true"
        set_group_config(bootstrap, groups[case], configs)
    kinds = {0: "rej", 1: "rel"}
    for partition in (0, 1):
        produce_records(backend, src, [(f"k{partition}-{i}", f"{kinds.get(i % 4, 'ok')}-{partition}-{i}",
                                        [("orig", f"h{i}".encode())]) for i in range(12)], partition=partition)
    workers = {case: ExtWorker(bootstrap, groups[case], src, tmp_path / f"{target}-{case}.jsonl", idle_s=10,
                               max_poll_records=5) for case in CASES}
    for case, w in workers.items():
        assert w.wait(240) == 0, f"{target} {case}: {w.stderr()}"
    time.sleep(3)  # a dead-letter write is asynchronous on both
    out: dict = {"records": {}, "deliveries": {}}
    _create(bootstrap, dlq["missing"], 1, {ENABLE: "true"})  # appears later: natively never written after
    time.sleep(5)
    for case in CASES:
        out["records"][case] = sorted(_dlq_records(backend, dlq[case]))
        events = workers[case].events()
        out["deliveries"][case] = sorted((e["p"], e["o"], e["dc"]) for e in events if e["ev"] == "rec")
    out["describe"] = _group_describe(bootstrap, groups["copy"])
    out["describe_default"] = _group_describe(bootstrap, unique("gdefault"))
    out["refusal"] = _set_error(bootstrap, unique("gbad"), "__bad")
    out["accepted_odd_name"] = _set_error(bootstrap, unique("godd"), "not a topic name")
    return out


def test_dead_letter_queue_matches_native_kafka_44(sidecar, kafka_39, native_kafka, tmp_path):
    tag = unique("d").split("-")[1]
    names = {"src": f"dlqsrc-{tag}",
             "dlq": {"copy": f"dlq.copy-{tag}", "nocopy": f"dlq.nocopy-{tag}", "missing": f"dlq.missing-{tag}",
                     "nooptin": f"dlq.nooptin-{tag}", "noprefix": f"other.noprefix-{tag}"},
             "groups": {case: f"g{case}-{tag}" for case in CASES}}
    native = run_scenarios("native", native_kafka.bootstrap, native_kafka.bootstrap, names, tmp_path)
    kshare = run_scenarios("kshare", sidecar.bootstrap, kafka_39.bootstrap, names, tmp_path)

    # native's own outcome, as KIP-1191 and Kafka 4.4.0's sources say
    expected_offsets = {(p, i) for p in (0, 1) for i in range(12) if i % 4 in (0, 1)}
    copied = native["records"]["copy"]
    assert {(dict(h)["__dlq.errors.partition"], dict(h)["__dlq.errors.offset"]) for _p, _k, _v, h in copied} == \
        {(str(p).encode(), str(i).encode()) for p, i in expected_offsets}, copied
    for p, key, value, headers in copied:
        h = dict(headers)
        assert [n for n, _ in headers] == ["__dlq.errors.topic", "__dlq.errors.partition", "__dlq.errors.offset",
                                           "__dlq.errors.group", "__dlq.errors.delivery.count",
                                           "__dlq.errors.message"], "no original header is copied"
        assert p == int(h["__dlq.errors.partition"]) % 3 and key is not None and value is not None
    assert all(k is None and v is None for _p, k, v, _h in native["records"]["nocopy"])
    assert len(native["records"]["nocopy"]) == len(expected_offsets)
    for case in ("missing", "nooptin", "noprefix"):
        assert native["records"][case] == [], case

    # kshare, field by field
    for case in CASES:
        assert kshare["records"][case] == native["records"][case], (
            f"{case}: kshare {kshare['records'][case][:4]} vs native {native['records'][case][:4]}\n"
            f"{sidecar.log_tail()}")
        assert kshare["deliveries"][case] == native["deliveries"][case], case
    for key in ("describe", "describe_default", "refusal", "accepted_odd_name"):
        assert kshare[key] == native[key], (key, kshare[key], native[key])
    assert native["describe_default"] == {"errors.deadletterqueue.copy.record.enable": ("false", True),
                                          "errors.deadletterqueue.topic.name": ("", True)}
    assert native["refusal"] == "INVALID_CONFIG" and native["accepted_odd_name"] == "NONE"
    print(f"\n[dlq parity] {sum(len(r) for r in native['records'].values())} dead-letter records, "
          "the same on native Kafka 4.4.0 and kshare on 3.9")


def test_java_share_consumer_dead_letters_as_natively(sidecar, kafka_39, native_kafka, tmp_path_factory):
    """Java 4.4.0's KafkaShareConsumer REJECTs every third record, with copy on: the dead-letter
    topics of native Kafka 4.4.0 and of kshare on 3.9 hold the same records."""
    import subprocess

    from tests.e2e.test_java_consumer import compile_java

    command = compile_java(tmp_path_factory, Path(__file__).with_name("java") / "ShareReject.java")
    tag = unique("j").split("-")[1]
    topic, group, dlq = f"dlqjava-{tag}", f"gjava-{tag}", f"dlq.java-{tag}"
    outcomes = {}
    for name, bootstrap, backend in (("native", native_kafka.bootstrap, native_kafka.bootstrap),
                                     ("kshare", sidecar.bootstrap, kafka_39.bootstrap)):
        _create(backend, topic, 1)
        _create(bootstrap, dlq, 1, {ENABLE: "true"})
        set_group_config(bootstrap, group, {"errors.deadletterqueue.topic.name": dlq,
                                            "errors.deadletterqueue.copy.record.enable": "true",
                                            "share.auto.offset.reset": "earliest"})
        produce_records(backend, topic, [(f"k{i}", f"rej-{i}" if i % 3 == 0 else f"ok-{i}", [("src", b"java")])
                                         for i in range(30)])
        result = subprocess.run(command + [bootstrap, group, topic, "30", "90000"], capture_output=True, text=True,
                                timeout=150)
        assert result.returncode == 0 and result.stdout.strip().endswith("DONE 30"), \
            result.stdout[-2000:] + result.stderr[-2000:]
        deadline = time.monotonic() + 30
        while len(_dlq_records(backend, dlq)) < 10 and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(2)
        outcomes[name] = sorted(_dlq_records(backend, dlq))
    assert len(outcomes["native"]) == 10
    assert outcomes["kshare"] == outcomes["native"], (outcomes["kshare"][:3], outcomes["native"][:3])
