"""``allow.everyone.if.no.acl.found=true``: the same rule at kshare (sidecar setting, the
backend's ACLs) and at native Kafka 4.3 (broker setting, StandardAuthorizer), side by side, with
the same ACLs and the same confluent-kafka ShareConsumer over SASL_SSL/SCRAM:

- a group and a topic nobody has an ACL on            → carol (no ACLs) consumes everything
- a topic only alice has an ACL on (READ)             → carol: TOPIC_AUTHORIZATION_FAILED
- a group only bob has an ACL on, a topic with none   → carol: GROUP_AUTHORIZATION_FAILED

The brokers are tests/e2e/test_acl_parity.py's (StandardAuthorizer, SCRAM users, a test CA) with
the rule switched on; the sidecar on Kafka 3.9 authorizes with ``authorizer.class.name=backend``
and ``allow.everyone.if.no.acl.found=true``.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AclOperation, ResourceType

from kshare_sidecar.testing.kafka import free_port
from kshare_sidecar.testing.maven import require_tool
from tests.e2e.conftest import SidecarProcess
from tests.e2e.acl_support import (RECORDS, USERS, AclBroker, _acl, _distinct_ports, _grant, _wait_port, outcome,
                                   scram)
from tests.e2e.test_secured_backend import make_ca_and_server_cert
from tests.support import create_topic, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300), pytest.mark.optin("parity-debts")]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    require_tool("openssl", "install OpenSSL (the test makes its CA with it)")
    return make_ca_and_server_cert(tmp_path_factory.mktemp("everyone-certs"))


@pytest.fixture(scope="module")
def brokers(certs):
    pair = [AclBroker("3.9", certs[1]), AclBroker("4", certs[1])]
    ports = iter(_distinct_ports(8))
    for b in pair:
        b.extra_config["allow.everyone.if.no.acl.found"] = "true"
        b.port, b.controller_port, b.sasl_port, b.ssl_port = next(ports), next(ports), next(ports), next(ports)
    errors: list[BaseException] = []
    started, done = [threading.Event(), threading.Event()], threading.Event()

    def start(b, ready):  # the harness's brokers die with the thread that started them
        try:
            b.start()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
        ready.set()
        done.wait()

    for b, e in zip(pair, started):
        threading.Thread(target=start, args=(b, e), daemon=True).start()
    for e in started:
        e.wait()
    try:
        if errors:
            raise errors[0]
        for b in pair:
            _wait_port(b.ssl_port)
        yield pair
    finally:
        for b in pair:
            b.stop()
        done.set()


@pytest.fixture(scope="module")
def kshare(brokers, certs, tmp_path_factory):
    b39, _ = brokers
    d = tmp_path_factory.mktemp("everyone-sidecar")
    users = d / "users"
    users.write_text("".join(f"{u}:{pw}\n" for u, pw in USERS.items() if u not in ("admin", "kshare")))
    port, sasl_port = free_port(), free_port()
    env = {"KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_SSL", "KSHARE_BACKEND_SASL_MECHANISM": "SCRAM-SHA-512",
           "KSHARE_BACKEND_SASL_USERNAME": "kshare", "KSHARE_BACKEND_SASL_PASSWORD": USERS["kshare"],
           "KSHARE_BACKEND_SSL_TRUSTSTORE_LOCATION": str(certs[0]),
           "KSHARE_SSL_KEYSTORE_LOCATION": str(certs[1]), "KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-512",
           "KSHARE_SASL_CREDENTIALS_FILE": str(users), "KSHARE_AUTHORIZER_CLASS_NAME": "backend",
           "KSHARE_AUTHORIZER_CACHE_MS": "1000", "KSHARE_SUPER_USERS": "User:admin",
           "KSHARE_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true"}
    sc = SidecarProcess(b39.ssl_bootstrap, d / "sidecar.log", port=port, env=env,
                        listeners=f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}").start()
    sc.sasl_bootstrap = f"127.0.0.1:{sasl_port}"
    yield sc
    sc.stop()


def test_no_acl_found_allows_everyone_on_kshare_as_on_native(brokers, kshare, certs):
    b39, b4 = brokers
    ca = certs[0]
    open_topic, alices_topic = unique("open"), unique("alices")
    groups = {"open": unique("open-g"), "topic_with_acl": unique("open-g2"), "bobs_group": unique("bobs-g")}
    for broker in (b39, b4):
        for topic in (open_topic, alices_topic):
            create_topic(broker.bootstrap, topic, 1)  # PLAINTEXT: ANONYMOUS is a super user there
            producer = Producer({"bootstrap.servers": broker.bootstrap})
            for i in range(RECORDS):
                producer.produce(topic, b"e%d" % i)
            assert producer.flush(30) == 0
        _grant(broker, ca, [_acl(ResourceType.TOPIC, alices_topic, "alice", AclOperation.READ),
                            _acl(ResourceType.GROUP, groups["bobs_group"], "bob", AclOperation.READ)])
    for group in groups.values():
        set_group_config(b4.bootstrap, group, {"share.auto.offset.reset": "earliest"})  # native; kshare's default
    time.sleep(1.5)  # StandardAuthorizer applies ACLs from the metadata log; kshare's cache is 1 s
    cases = {"open": open_topic, "topic_with_acl": alices_topic, "bobs_group": open_topic}
    runs = {(target, case): (bootstrap, groups[case], cases[case])
            for target, bootstrap in (("kshare", kshare.sasl_bootstrap), ("native", b4.ssl_bootstrap))
            for case in cases}
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {key: pool.submit(outcome, bootstrap, group, topic, scram("carol", ca))
                   for key, (bootstrap, group, topic) in runs.items()}
        results = {key: f.result() for key, f in futures.items()}
    expected = {"open": f"consumed {RECORDS}", "topic_with_acl": "TOPIC_AUTHORIZATION_FAILED",
                "bobs_group": "GROUP_AUTHORIZATION_FAILED"}
    table = "\n".join(f"{case:15} kshare: {results[('kshare', case)]:30} native: {results[('native', case)]}"
                      for case in cases)
    print("\n" + table)
    for case in cases:
        assert results[("kshare", case)] == results[("native", case)] == expected[case], table
    log = kshare.log_path.read_text(errors="replace")
    assert "Traceback" not in log and not any(pw in log for pw in USERS.values())
