"""kshare on the oldest backend, Kafka 2.8 with ZooKeeper (the default suite's one ZooKeeper backend;
every release runs in ``make test-backends``): the start-up check names it, share groups and
pass-through work, and Kafka 4.4's share-group listing (ListGroups v5, which 2.8 lacks) is served."""

from __future__ import annotations

import asyncio
import logging

import pytest
from kio.schema.list_groups.v5.request import ListGroupsRequest

from kshare_sidecar.backend.compat import check_backend
from kshare_sidecar.backend.security import BackendSecurity
from kshare_sidecar.protocol.address import first_server
from kshare_sidecar.testing.probe import call
from kshare_sidecar.testing.tools import SidecarThread
from tests.support import create_topic, produce, share_consume, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


def test_the_check_names_kafka_2_8_with_zookeeper_and_what_differs(kafka_28_zk, caplog):
    caplog.set_level(logging.INFO, logger="kshare.backend")
    profile = asyncio.run(check_backend(kafka_28_zk.bootstrap, BackendSecurity(), write_mode="fenced", refresh=True))
    assert profile.label() == "Kafka 2.8 (ZooKeeper)"
    assert kafka_28_zk.metadata == "zookeeper"
    (line,) = [r.getMessage() for r in caplog.records if r.name == "kshare.backend"]
    assert line.startswith("backend Kafka 2.8 (ZooKeeper), from its ApiVersions: serves kshare and "
                           "state.write.mode = 'fenced'; differs: no DescribeTopicPartitions"), line


def test_share_groups_and_pass_through_on_kafka_2_8(kafka_28_zk):
    sc = SidecarThread({"bootstrap.servers": kafka_28_zk.bootstrap, "share.auto.offset.reset": "earliest",
                        "state.topic.replication.factor": 1, "state.topic": unique("__kshare_state_zk")}).start()
    try:
        assert sc.sidecar is not None and sc.sidecar.backend_profile.topic_ids in (True, None)
        topic, group = unique("zk"), unique("zk-g")
        create_topic(sc.bootstrap, topic, 2)  # CreateTopics and Produce pass through to 2.8
        values = produce(sc.bootstrap, topic, 200, partitions=2)
        got = share_consume(sc.bootstrap, group, topic, 200)
        assert sorted(v for v, _ in got) == sorted(values) and {c for _, c in got} == {1}
        # kafka-share-groups.sh lists with ListGroups v5 and a type filter; 2.8 speaks v4 only
        listed = call(*first_server(sc.bootstrap), ListGroupsRequest(states_filter=(), types_filter=("Share",)))
        assert listed.error_code == 0
        assert [(g.group_id, g.group_type.lower()) for g in listed.groups] == [(group, "share")]
    finally:
        sc.stop()
