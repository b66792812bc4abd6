"""A poisoned key under key ordering with a dead-letter topic (docs/extensions.md) on Kafka 3.9:
the key's first record is released on every delivery; it reaches the delivery count limit, goes
to the dead-letter topic, and only then are the key's later records delivered — in order — while
other keys were never held up by it."""

from __future__ import annotations

import pytest

from tests.e2e.ext_support import ExtWorker, create_dlq_topic, produce_records, read_all
from tests.support import create_topic, set_group_config, unique

pytestmark = pytest.mark.kafka


def test_a_poisoned_key_is_dead_lettered_and_its_key_moves_on(sidecar, kafka_39, tmp_path):
    topic, group, dlq = unique("poison"), unique("g"), unique("dlq.poison")
    create_topic(kafka_39.bootstrap, topic, 1)
    create_dlq_topic(sidecar.bootstrap, dlq, 1)
    set_group_config(sidecar.bootstrap, group, {"share.key.ordering": "true", "share.delivery.count.limit": "3",
                                                "errors.deadletterqueue.topic.name": dlq,
                                                "errors.deadletterqueue.copy.record.enable": "true"})
    records = [("bad", "rel-0", [])] + [(f"k{i % 5}" if i % 4 else "bad", f"ok-{i}", []) for i in range(1, 40)]
    produce_records(kafka_39.bootstrap, topic, records)
    workers = [ExtWorker(sidecar.bootstrap, group, topic, tmp_path / f"w{i}.jsonl", max_poll_records=5, idle_s=8)
               for i in range(3)]
    for w in workers:
        assert w.wait(240) == 0, w.stderr()
    events = [e for w in workers for e in w.events()]
    poison = sorted(e["t"] for e in events if e["ev"] == "rec" and e["o"] == 0)
    assert len(poison) == 3, "delivered up to the limit"
    last_poison_release = max(e["t"] for e in events if e["ev"] == "ack" and e["o"] == 0)
    bad_later = sorted((e["t"], e["o"]) for e in events if e["ev"] == "rec" and e["k"] == "bad" and e["o"] > 0)
    assert bad_later, "the key moved on after its poisoned record"
    assert bad_later[0][0] > last_poison_release, "a later record of the key overtook the poisoned one"
    assert [o for _, o in bad_later] == sorted(o for _, o in bad_later), "the key's records in offset order"
    accepted = {e["o"] for e in events if e["ev"] == "ack" and e["type"] == "accept" and e["ok"]}
    assert accepted == set(range(1, 40))
    others_before = [e for e in events if e["ev"] == "rec" and e["k"] != "bad" and e["t"] < last_poison_release]
    assert others_before, "other keys flowed while the poisoned key was retried"
    got = read_all(kafka_39.bootstrap, dlq, 1, timeout=60)
    assert [(dict(m.headers())["__dlq.errors.offset"], m.key()) for m in got] == [(b"0", b"bad")]
