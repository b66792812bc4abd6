"""share.isolation.level per group: read_committed groups never see aborted transactions;
read_uncommitted groups see every record. Group configs set through the admin API on each target."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.support import create_topic, set_group_config, share_consume, unique

pytestmark = pytest.mark.kafka


def _transactions(bootstrap: str, topic: str) -> tuple[set[bytes], set[bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx"), "linger.ms": 0})
    producer.init_transactions(30)
    committed, aborted = set(), set()
    for n, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        values = {f"txn{n}-{i}".encode() for i in range(5)}
        for v in sorted(values):
            producer.produce(topic, v)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
            committed |= values
        else:
            producer.abort_transaction(30)
            aborted |= values
    return committed, aborted


def test_read_committed_skips_aborted_transactions(target):
    topic = unique("rc")
    create_topic(target.backend, topic, 1)
    committed, aborted = _transactions(target.backend, topic)
    rc_group, ru_group = unique("rc"), unique("ru")
    set_group_config(target.bootstrap, rc_group, {"share.auto.offset.reset": "earliest",
                                                  "share.isolation.level": "read_committed"})
    set_group_config(target.bootstrap, ru_group, {"share.auto.offset.reset": "earliest"})
    seen_rc = {v for v, _ in share_consume(target.bootstrap, rc_group, topic, len(committed), timeout_s=30)}
    assert seen_rc == committed
    seen_ru = {v for v, _ in share_consume(target.bootstrap, ru_group, topic, len(committed) + len(aborted),
                                           timeout_s=30)}
    assert seen_ru == committed | aborted
