"""Key-ordered sharing (kshare's share.key.ordering, docs/extensions.md) on Kafka 3.9: one
partition, 8 confluent-kafka ShareConsumer processes, 100 keys (some records released once, so
redeliveries happen). Checked from the consumers' own timestamps on one machine's clock:

* no key is ever in flight to two consumers at once — a delivery of a key is received only after
  the previous delivery of that key was acknowledged (``t`` of an ack event is taken before the
  acknowledgement is sent, a receipt after the sidecar sent the record, so the check needs no margin);
* each key's offsets are accepted in increasing order;
* work is spread: at least half the consumers get some and none gets half of it (one ShareFetch
  takes the head of every free key, up to its MaxRecords, so work moves in blocks of up to 100
  records — which consumer takes the next block is the order their fetches arrive in, so
  "every one of the 8" would be luck);
* every record is accepted once.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.e2e.ext_support import ExtWorker, produce_records, wait_for_assigned_members
from tests.support import create_topic, set_group_config, unique

pytestmark = pytest.mark.kafka

CONSUMERS, KEYS, TOTAL = 8, 100, 2000


def test_one_record_per_key_in_flight_in_offset_order(sidecar, kafka_39, tmp_path):
    topic, group = unique("keyorder"), unique("g")
    create_topic(kafka_39.bootstrap, topic, 1)
    set_group_config(sidecar.bootstrap, group, {"share.key.ordering": "true"})
    records = [(f"key-{i % KEYS}", ("relonce-" if i % 50 == 7 else "ok-") + str(i), []) for i in range(TOTAL)]
    workers = [ExtWorker(sidecar.bootstrap, group, topic, tmp_path / f"w{i}.jsonl", max_poll_records=10,
                         work_ms_max=5, idle_s=10) for i in range(CONSUMERS)]
    # every consumer in the group before a record exists: one that joins after the others drained
    # the partition would get no work, which says nothing about key ordering
    wait_for_assigned_members(sidecar.bootstrap, group, CONSUMERS)
    produce_records(kafka_39.bootstrap, topic, records)
    for w in workers:
        assert w.wait(300) == 0, w.stderr()
    deliveries = []  # (key, receipt t, ack-sent t, offset, worker)
    accepted = defaultdict(list)  # key -> [(ack t, offset)]
    per_worker = []
    for n, w in enumerate(workers):
        events = w.events()
        acks = {(e["o"], e["dc"]): e for e in events if e["ev"] == "ack"}
        recs = [e for e in events if e["ev"] == "rec"]
        per_worker.append(len(recs))
        for r in recs:
            a = acks.get((r["o"], r["dc"]))
            deliveries.append((r["k"], r["t"], a["t"] if a and a["ok"] else float("inf"), r["o"], n))
            if a and a["ok"] and a["type"] == "accept":
                accepted[r["k"]].append((a["t"], r["o"]))
    assert sum(1 for n in per_worker if n) >= CONSUMERS // 2, f"work went to too few consumers: {per_worker}"
    assert max(per_worker) < sum(per_worker) / 2, f"one consumer did most of the work: {per_worker}"
    by_key = defaultdict(list)
    for d in deliveries:
        by_key[d[0]].append(d)
    overlaps = []
    for key, ds in by_key.items():
        ds.sort(key=lambda d: d[1])
        for a, b in zip(ds, ds[1:]):
            if b[1] < a[2]:
                overlaps.append((key, a[3], a[4], b[3], b[4], round(a[2] - b[1], 4)))
    assert not overlaps, f"keys in flight twice at once: {overlaps[:5]}\n{sidecar.log_tail()}"
    disorder = [k for k, acc in accepted.items() if [o for _, o in sorted(acc)] != sorted(o for _, o in acc)]
    assert not disorder, f"keys accepted out of offset order: {disorder[:5]}"
    all_accepted = sorted(o for acc in accepted.values() for _, o in acc)
    assert all_accepted == list(range(TOTAL)), "every record accepted exactly once"
    assert len(by_key) == KEYS
    print(f"\n[kshare] key ordering: {len(deliveries)} deliveries over {KEYS} keys, records per consumer {per_worker}")
