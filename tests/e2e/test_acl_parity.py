"""Authorization with the backend's ACLs (issue 16's must-show): the same ACLs, the same principals,
the same confluent-kafka ShareConsumer — once through kshare on a secured Kafka 3.9 and once
against native Kafka 4.3 — give the same outcomes, side by side:

- no READ on the group                    → GROUP_AUTHORIZATION_FAILED
- READ on the group, no ACL on the topic  → TOPIC_AUTHORIZATION_FAILED (ShareGroupHeartbeat: DESCRIBE)
- READ on the group, DESCRIBE on the topic → TOPIC_AUTHORIZATION_FAILED (ShareFetch: READ)
- READ on the group (a PREFIXED ACL) and on the topic → every record consumed

Both brokers run StandardAuthorizer with SASL_SSL/SCRAM-SHA-512 (users created at format time, a
certificate from a CA this test makes) and ``super.users`` admin, kshare (the sidecar's backend
user) and ANONYMOUS (their PLAINTEXT listener: the harness's readiness probe, inter-broker and
controller traffic, and this test's producers). ACLs are created as admin over SASL_SSL with
AdminClient.create_acls. The sidecar authenticates clients on its own SASL_SSL listener (static
SCRAM credentials, the same passwords) and authorizes them with the 3.9 broker's ACLs.
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)

from kshare_sidecar.testing.kafka import free_port
from kshare_sidecar.testing.maven import require_tool
from tests.e2e.conftest import SidecarProcess
from tests.e2e.test_java_consumer import java_consumer  # noqa: F401 (a fixture)
from tests.e2e.test_secured_backend import SaslBroker, make_ca_and_server_cert
from tests.support import create_topic, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

USERS = {"admin": "admin-Scram-1a", "kshare": "kshare-Scram-2b", "alice": "alice-Scram-3c", "bob": "bob-Scram-4d",
         "dave": "dave-Scram-5e", "carol": "carol-Scram-6f"}
RECORDS = 30
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:admin;User:kshare;User:ANONYMOUS",
              "allow.everyone.if.no.acl.found": "false"}


class AclBroker(SaslBroker):
    """SaslBroker with StandardAuthorizer and every test user as a SCRAM-SHA-512 user."""

    def __init__(self, version: str, keystore: Path, **kw) -> None:
        extra = dict(AUTHORIZER)
        if version == "4":  # the same short intervals the other native e2e fixtures use
            extra |= {"group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000"}
        super().__init__(version, extra_config=extra, heap="768m", **kw)
        self.keystore = keystore
        self.format_args = [a for user, pw in USERS.items()
                            for a in ("--add-scram", f"SCRAM-SHA-512=[name={user},password={pw}]")]


def _distinct_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _wait_port(port: int, timeout_s: float = 60) -> None:
    """The SASL_SSL acceptor may open after the PLAINTEXT one the harness probes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def scram(user: str, ca: Path) -> dict:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": USERS[user], "ssl.ca.location": str(ca)}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tuple[Path, Path]:
    require_tool("openssl", "install OpenSSL (the test makes its CA with it)")
    return make_ca_and_server_cert(tmp_path_factory.mktemp("acl-certs"))


@pytest.fixture(scope="module")
def brokers(certs):
    """Kafka 3.9 (kshare's backend) and Kafka 4.3 (native share groups), started side by side."""
    b39, b4 = AclBroker("3.9", certs[1]), AclBroker("4", certs[1])
    ports = iter(_distinct_ports(8))  # two brokers starting at once must not draw the same free port
    for b in (b39, b4):
        b.port, b.controller_port, b.sasl_port, b.ssl_port = next(ports), next(ports), next(ports), next(ports)
    errors: list[BaseException] = []
    started = [threading.Event(), threading.Event()]
    done = threading.Event()

    def start(b, ready):
        # The harness's brokers die with the *thread* that spawned them (PR_SET_PDEATHSIG), so
        # each starter thread lives until the brokers are stopped.
        try:
            b.start()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
        ready.set()
        done.wait()

    threads = [threading.Thread(target=start, args=(b, e), daemon=True) for b, e in zip((b39, b4), started)]
    for t in threads:
        t.start()
    for e in started:
        e.wait()
    try:
        if errors:
            raise errors[0]
        for b in (b39, b4):
            _wait_port(b.ssl_port)
        yield b39, b4
    finally:
        for b in (b39, b4):
            b.stop()
        done.set()


@pytest.fixture(scope="module")
def kshare(brokers, certs, tmp_path_factory):
    b39, _ = brokers
    d = tmp_path_factory.mktemp("acl-sidecar")
    users = d / "users"
    users.write_text("".join(f"{u}:{pw}\n" for u, pw in USERS.items() if u not in ("admin", "kshare")))
    port, sasl_port = free_port(), free_port()
    env = {"KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_SSL", "KSHARE_BACKEND_SASL_MECHANISM": "SCRAM-SHA-512",
           "KSHARE_BACKEND_SASL_USERNAME": "kshare", "KSHARE_BACKEND_SASL_PASSWORD": USERS["kshare"],
           "KSHARE_BACKEND_SSL_TRUSTSTORE_LOCATION": str(certs[0]),
           "KSHARE_SSL_KEYSTORE_LOCATION": str(certs[1]), "KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-512",
           "KSHARE_SASL_CREDENTIALS_FILE": str(users),
           "KSHARE_AUTHORIZER_CLASS_NAME": "backend", "KSHARE_AUTHORIZER_CACHE_MS": "1000",
           "KSHARE_SUPER_USERS": "User:admin"}
    sc = SidecarProcess(b39.ssl_bootstrap, d / "sidecar.log", port=port, env=env,
                        listeners=f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}").start()
    sc.sasl_bootstrap = f"127.0.0.1:{sasl_port}"
    yield sc
    sc.stop()


def _acl(rtype, name, principal, op, pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(rtype, name, pattern, f"User:{principal}", "*", op, AclPermissionType.ALLOW)


def _grant(broker: SaslBroker, ca: Path, bindings: list[AclBinding]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.ssl_bootstrap, **scram("admin", ca)})
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def outcome(bootstrap: str, group: str, topic: str, extra: dict, timeout_s: float = 40) -> str:
    """What a ShareConsumer gets: the first authorization error's name, or 'consumed N'."""
    from confluent_kafka import ShareConsumer

    errors: list[KafkaError] = []
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "error_cb": errors.append,
                              **extra})
    got = 0
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while got < RECORDS and time.monotonic() < deadline:
            try:
                messages = consumer.poll(1.0)
            except KafkaException as exc:
                errors.append(exc.args[0])
                messages = []
            for msg in messages:
                if msg.error():
                    errors.append(msg.error())
                else:
                    got += 1
            auth = [e for e in errors if e.code() in (KafkaError.GROUP_AUTHORIZATION_FAILED,
                                                      KafkaError.TOPIC_AUTHORIZATION_FAILED)]
            if auth:
                return auth[0].name()
    finally:
        consumer.close()
    return f"consumed {got}" + (f" errors {[e.name() for e in errors][:3]}" if errors else "")


def test_same_acls_same_outcomes_kshare_and_native(brokers, kshare, certs):
    b39, b4 = brokers
    ca = certs[0]
    topic = unique("acl")
    groups = {"alice": unique("alice-g"), "bob": unique("bob-g"), "dave": unique("dave-g"), "carol": unique("carol-g")}
    for broker in (b39, b4):
        create_topic(broker.bootstrap, topic, 2)  # PLAINTEXT: ANONYMOUS is a super user there
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(RECORDS):
            producer.produce(topic, b"acl%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        _grant(broker, ca, [
            _acl(ResourceType.TOPIC, topic, "alice", AclOperation.READ),  # alice: nothing on her group
            _acl(ResourceType.GROUP, groups["bob"], "bob", AclOperation.READ),  # bob: nothing on the topic
            _acl(ResourceType.GROUP, groups["dave"], "dave", AclOperation.READ),
            _acl(ResourceType.TOPIC, topic, "dave", AclOperation.DESCRIBE),  # dave: DESCRIBE, not READ
            _acl(ResourceType.GROUP, "carol-", "carol", AclOperation.READ, ResourcePatternType.PREFIXED),
            _acl(ResourceType.TOPIC, topic, "carol", AclOperation.READ),
        ])
    for group in groups.values():
        set_group_config(b4.bootstrap, group, {"share.auto.offset.reset": "earliest"})  # native; kshare's default
    time.sleep(1.5)  # StandardAuthorizer applies ACLs from the metadata log; kshare's cache is 1 s

    runs = {(target, user): (bootstrap, groups[user], scram(user, ca))
            for target, bootstrap in (("kshare", kshare.sasl_bootstrap), ("native", b4.ssl_bootstrap))
            for user in groups}
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {key: pool.submit(outcome, bootstrap, group, topic, extra)
                   for key, (bootstrap, group, extra) in runs.items()}
        results = {key: f.result() for key, f in futures.items()}

    expected = {"alice": "GROUP_AUTHORIZATION_FAILED", "bob": "TOPIC_AUTHORIZATION_FAILED",
                "dave": "TOPIC_AUTHORIZATION_FAILED", "carol": f"consumed {RECORDS}"}
    table = "\n".join(f"{user:6} kshare: {results[('kshare', user)]:30} native: {results[('native', user)]}"
                      for user in groups)
    print("\n" + table)
    for user in groups:
        assert results[("kshare", user)] == results[("native", user)] == expected[user], table
    # an ACL added at the backend applies within authorizer.cache.ms (refreshed in the background)
    for broker in (b39, b4):
        _grant(broker, ca, [_acl(ResourceType.TOPIC, topic, "dave", AclOperation.READ)])
    time.sleep(2.5)
    with ThreadPoolExecutor(2) as pool:
        later = [pool.submit(outcome, bootstrap, groups["dave"], topic, scram("dave", ca))
                 for bootstrap in (kshare.sasl_bootstrap, b4.ssl_bootstrap)]
        assert [f.result() for f in later] == [f"consumed {RECORDS}"] * 2
    log = kshare.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "UNKNOWN_SERVER_ERROR" not in log
    assert not any(pw in log for pw in USERS.values())


def _classic_group(bootstrap: str, group: str, topic: str) -> None:
    """A consumer group at the backend (offsets committed over PLAINTEXT, a super user there)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        consumer.close()


def _admin_outcomes(bootstrap: str, extra: dict, group: str, classic: str, topic: str) -> dict[str, str]:
    """ListGroups (is the classic group listed? librdkafka asks for consumer/classic types only),
    DeleteGroups, DescribeConfigs and IncrementalAlterConfigs on the share GROUP, as one principal."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap, **extra})

    def code(future) -> str:
        try:
            future.result(timeout=30)
            return "OK"
        except KafkaException as exc:
            return exc.args[0].name()

    listed = admin.list_consumer_groups().result(timeout=30)
    out = {"listed": str(classic in {g.group_id for g in listed.valid}),
           "topic_listed": str(topic in admin.list_topics(timeout=30).topics)}  # Metadata: DESCRIBE
    out["delete"] = code(admin.delete_consumer_groups([group])[group])
    resource = ConfigResource(ResourceType.GROUP, group)
    out["describe_configs"] = code(next(iter(admin.describe_configs([resource]).values())))
    topic_resource = ConfigResource(ResourceType.TOPIC, topic)  # a backend resource: asked as the sidecar
    out["topic_configs"] = code(next(iter(admin.describe_configs([topic_resource]).values())))
    entry = ConfigEntry("share.delivery.count.limit", "4", incremental_operation=AlterConfigOpType.SET)
    altered = admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])])
    out["alter_configs"] = code(next(iter(altered.values())))
    return out


def test_admin_apis_same_outcomes_kshare_and_native(brokers, kshare, certs):
    """carol may READ groups carol-* (which implies DESCRIBE — she sees the backend's consumer group
    carol-cg-* in ListGroups through kshare as natively — but not DELETE or the config operations);
    alice has nothing on them."""
    b39, b4 = brokers
    ca = certs[0]
    topic, group, classic = unique("acl-adm"), unique("carol-adm"), unique("carol-cg")
    for broker in (b39, b4):
        create_topic(broker.bootstrap, topic, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(RECORDS):
            producer.produce(topic, b"adm%d" % i)
        assert producer.flush(30) == 0
        _classic_group(broker.bootstrap, classic, topic)
        _grant(broker, ca, [_acl(ResourceType.TOPIC, topic, "carol", AclOperation.READ),
                            _acl(ResourceType.GROUP, "carol-", "carol", AclOperation.READ,
                                 ResourcePatternType.PREFIXED)])
    set_group_config(b4.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    time.sleep(1.5)
    targets = {"kshare": kshare.sasl_bootstrap, "native": b4.ssl_bootstrap}
    for name, bootstrap in targets.items():  # the group exists (and is empty) on both
        assert outcome(bootstrap, group, topic, scram("carol", ca)) == f"consumed {RECORDS}", name
    results = {(name, user): _admin_outcomes(bootstrap, scram(user, ca), group, classic, topic)
               for name, bootstrap in targets.items() for user in ("alice", "carol")}
    table = "\n".join(f"{user:6} kshare: {results[('kshare', user)]}\n       native: {results[('native', user)]}"
                      for user in ("alice", "carol"))
    print("\n" + table)
    for user in ("alice", "carol"):
        assert results[("kshare", user)] == results[("native", user)], table
    assert results[("kshare", "alice")] == {"listed": "False", "topic_listed": "False",
                                            "delete": "GROUP_AUTHORIZATION_FAILED",
                                            "describe_configs": "GROUP_AUTHORIZATION_FAILED",
                                            "alter_configs": "GROUP_AUTHORIZATION_FAILED",
                                            "topic_configs": "TOPIC_AUTHORIZATION_FAILED"}, table
    assert results[("kshare", "carol")] == {"listed": "True", "topic_listed": "True",
                                            "delete": "GROUP_AUTHORIZATION_FAILED",
                                            "describe_configs": "GROUP_AUTHORIZATION_FAILED",
                                            "alter_configs": "GROUP_AUTHORIZATION_FAILED",
                                            "topic_configs": "TOPIC_AUTHORIZATION_FAILED"}, table


def _produce_outcome(bootstrap: str, topic: str, extra: dict) -> str:
    """One record produced: 'OK' or the delivery error's name."""
    results: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000, **extra})
    producer.produce(topic, b"p", on_delivery=lambda err, _msg: results.append(err.name() if err else "OK"))
    producer.flush(30)
    return results[0] if results else "no delivery report"


def test_pass_through_with_the_clients_credentials(brokers, kshare, certs, tmp_path):
    """passthrough.credentials = client (PLAIN listener): a Produce forwarded through kshare is
    authorized by the backend for the client, as natively; with the default (the sidecar's
    credentials) the backend sees the sidecar — what docs/security.md warns about: alice (DESCRIBE,
    no WRITE) produces."""
    b39, b4 = brokers
    ca = certs[0]
    topic = unique("acl-pt")
    for broker in (b39, b4):
        create_topic(broker.bootstrap, topic, 1)
        _grant(broker, ca, [_acl(ResourceType.TOPIC, topic, "carol", AclOperation.WRITE),
                            _acl(ResourceType.TOPIC, topic, "alice", AclOperation.DESCRIBE)])  # sees it, no WRITE
    users = tmp_path / "users"
    users.write_text("".join(f"{u}:{USERS[u]}\n" for u in ("alice", "carol")))
    port, sasl_port = free_port(), free_port()
    env = {"KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_SSL", "KSHARE_BACKEND_SASL_MECHANISM": "SCRAM-SHA-512",
           "KSHARE_BACKEND_SASL_USERNAME": "kshare", "KSHARE_BACKEND_SASL_PASSWORD": USERS["kshare"],
           "KSHARE_BACKEND_SSL_TRUSTSTORE_LOCATION": str(ca), "KSHARE_SSL_KEYSTORE_LOCATION": str(certs[1]),
           "KSHARE_SASL_ENABLED_MECHANISMS": "PLAIN", "KSHARE_SASL_CREDENTIALS_FILE": str(users),
           "KSHARE_AUTHORIZER_CLASS_NAME": "backend", "KSHARE_PASSTHROUGH_CREDENTIALS": "client",
           # its own share state: on the same one it would fence the module's sidecar (issue 11)
           "KSHARE_STATE_TOPIC": unique("__kshare_state_pt")}
    sc = SidecarProcess(b39.ssl_bootstrap, tmp_path / "sidecar.log", port=port, env=env,
                        listeners=f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}").start()
    time.sleep(1.5)
    try:
        results = {}
        for user in ("alice", "carol"):
            results[("kshare", user)] = _produce_outcome(f"127.0.0.1:{sasl_port}", topic,
                                                         {**scram(user, ca), "sasl.mechanism": "PLAIN"})
            results[("native", user)] = _produce_outcome(b4.ssl_bootstrap, topic, scram(user, ca))
        # the default (passthrough.credentials = sidecar): the backend authorizes the sidecar's user
        results[("kshare-default", "alice")] = _produce_outcome(kshare.sasl_bootstrap, topic, scram("alice", ca))
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    print("\n", results)
    assert results[("kshare", "alice")] == results[("native", "alice")] == "TOPIC_AUTHORIZATION_FAILED", results
    assert results[("kshare", "carol")] == results[("native", "carol")] == "OK", results
    assert results[("kshare-default", "alice")] == "OK", results  # docs/security.md, "Not done"
    assert not any(pw in log for pw in USERS.values()) and "Traceback" not in log


def test_a_backend_without_an_authorizer_fails_start_up_with_one_line(kafka_39, tmp_path):
    """authorizer.class.name = backend on a cluster without ACLs (DescribeAcls: SECURITY_DISABLED)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "KSHARE_AUTHORIZER_CLASS_NAME": "backend"}
    proc = subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", "sidecar", "run", "--bootstrap-server",
                           kafka_39.bootstrap, "--listen", f"127.0.0.1:{free_port()}"],
                          env=env, capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-2000:]
    failed = [line for line in output.splitlines() if "start-up failed" in line]
    assert len(failed) == 1 and "has no authorizer (DescribeAcls: SECURITY_DISABLED)" in failed[0], output[-2000:]
    assert "Traceback" not in output


def _java_outcome(java: list[str], bootstrap: str, group: str, topic: str, user: str, ca: Path,
                  props: Path) -> str:
    """Java's KafkaShareConsumer: the authorization exception it throws, or 'consumed N'."""
    import subprocess

    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     f'username="{user}" password="{USERS[user]}";\n'
                     f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n")
    result = subprocess.run(java + [bootstrap, group, topic, str(RECORDS), "40000", str(props)],
                            capture_output=True, text=True, timeout=120)
    for name in ("GroupAuthorizationException", "TopicAuthorizationException"):
        if name in result.stderr:
            return name
    lines = result.stdout.strip().splitlines()
    return lines[-1].replace("DONE", "consumed") if result.returncode == 0 and lines else \
        f"exit {result.returncode}: {result.stderr[-300:]}"


def test_java_share_consumer_same_outcomes(brokers, kshare, certs, java_consumer, tmp_path):
    """Kafka's own KafkaShareConsumer (kafka-clients 4.3) with the same ACL scenarios."""
    b39, b4 = brokers
    ca = certs[0]
    topic = unique("acl-java")
    groups = {"alice": unique("alice-jg"), "dave": unique("dave-jg"), "carol": unique("carol-jg")}
    for broker in (b39, b4):
        create_topic(broker.bootstrap, topic, 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(RECORDS):
            producer.produce(topic, b"j%d" % i)
        assert producer.flush(30) == 0
        _grant(broker, ca, [
            _acl(ResourceType.TOPIC, topic, "alice", AclOperation.READ),
            _acl(ResourceType.GROUP, groups["dave"], "dave", AclOperation.READ),
            _acl(ResourceType.TOPIC, topic, "dave", AclOperation.DESCRIBE),
            _acl(ResourceType.GROUP, groups["carol"], "carol", AclOperation.READ),
            _acl(ResourceType.TOPIC, topic, "carol", AclOperation.READ)])
    for group in groups.values():
        set_group_config(b4.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    time.sleep(1.5)
    runs = {(target, user): (bootstrap, groups[user])
            for target, bootstrap in (("kshare", kshare.sasl_bootstrap), ("native", b4.ssl_bootstrap))
            for user in groups}
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {key: pool.submit(_java_outcome, java_consumer, bootstrap, group, topic, key[1], ca,
                                    tmp_path / f"{key[0]}-{key[1]}.properties")
                   for key, (bootstrap, group) in runs.items()}
        results = {key: f.result() for key, f in futures.items()}
    table = "\n".join(f"{user:6} kshare: {results[('kshare', user)]:30} native: {results[('native', user)]}"
                      for user in groups)
    print("\n" + table)
    expected = {"alice": "GroupAuthorizationException", "dave": "TopicAuthorizationException",
                "carol": f"consumed {RECORDS}"}
    for user in groups:
        assert results[("kshare", user)] == results[("native", user)] == expected[user], table
