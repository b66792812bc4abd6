"""Authorization with the backend's ACLs: the same ACLs, the same principals,
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

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from kshare_sidecar.testing.kafka import free_port
from kshare_sidecar.testing.maven import require_tool
from kshare_sidecar.testing.probe import broker_ready
from tests.e2e.acl_support import (HMAC_B64, RECORDS, TOKEN_SECRET, USERS, AclBroker, _acl, _admin_outcomes,
                                   _classic_group, _client_principal_sidecar, _distinct_ports, _grant,
                                   _group_outcome, _java_outcome, _mtls, _produce_outcome, _produce_steadily,
                                   _topic_with_records, _wait_port, outcome, scram)
from tests.e2e.conftest import SidecarProcess
from tests.e2e.test_java_consumer import compile_java, java_consumer  # noqa: F401 (a fixture)
from tests.e2e.test_secured_backend import make_ca_and_server_cert, make_client_cert
from tests.support import create_topic, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tuple[Path, Path]:
    require_tool("openssl", "install OpenSSL (the test makes its CA with it)")
    return make_ca_and_server_cert(tmp_path_factory.mktemp("acl-certs"))


@pytest.fixture(scope="module")
def brokers(certs):
    """Kafka 3.9 (kshare's backend) and Kafka 4.3 (native share groups), started side by side."""
    b39, b4 = AclBroker("3.9", certs[1]), AclBroker("4", certs[1])
    ports = iter(_distinct_ports(10))  # two brokers starting at once must not draw the same free port
    for b in (b39, b4):
        b.port, b.controller_port, b.sasl_port, b.ssl_port = next(ports), next(ports), next(ports), next(ports)
        b.mtls_port = next(ports)
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


def test_authorized_operations_are_the_clients_kshare_and_native(brokers, kshare, certs):
    """librdkafka's 0081 with an authorizer: DescribeTopics (Metadata) and DescribeCluster with
    their authorized operations, as alice (READ and ALTER_CONFIGS on the topic, nothing on the
    cluster) and bob (READ on the topic, DESCRIBE and IDEMPOTENT_WRITE on the cluster). Through the
    sidecar they were never provided; the backend would compute them for the sidecar's principal (a
    super user: everything), so the sidecar evaluates the backend's ACLs for the client's."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    b39, b4 = brokers
    ca = certs[0]
    topic = unique("acl-ops")
    for broker in (b39, b4):
        create_topic(broker.bootstrap, topic, 1)
        _grant(broker, ca, [_acl(ResourceType.TOPIC, topic, "alice", AclOperation.READ),
                            _acl(ResourceType.TOPIC, topic, "alice", AclOperation.ALTER_CONFIGS),
                            _acl(ResourceType.TOPIC, topic, "bob", AclOperation.READ),
                            _acl(ResourceType.BROKER, "kafka-cluster", "bob", AclOperation.DESCRIBE),
                            _acl(ResourceType.BROKER, "kafka-cluster", "bob", AclOperation.IDEMPOTENT_WRITE)])
    time.sleep(1.5)

    def operations(bootstrap: str, user: str) -> tuple[set[str], set[str]]:
        admin = AdminClient({"bootstrap.servers": bootstrap, **scram(user, ca)})
        (described,) = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True).values()
        cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
        return ({op.name for op in described.result(30).authorized_operations or ()},
                {op.name for op in cluster.authorized_operations or ()})

    results = {(name, user): operations(bootstrap, user)
               for name, bootstrap in (("kshare", kshare.sasl_bootstrap), ("native", b4.ssl_bootstrap))
               for user in ("alice", "bob")}
    print("\n" + "\n".join(f"{k}: {v}" for k, v in results.items()))
    assert results[("kshare", "alice")] == results[("native", "alice")] == (
        {"READ", "DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"}, set())
    assert results[("kshare", "bob")] == results[("native", "bob")] == ({"READ", "DESCRIBE"},
                                                                        {"DESCRIBE", "IDEMPOTENT_WRITE"})


@pytest.fixture(scope="module")
def client_sidecar(brokers, certs, tmp_path_factory):
    """The module's sidecar with passthrough.credentials = client: (process, SASL_SSL port, SSL port)."""
    sc, sasl_port, ssl_port = _client_principal_sidecar(brokers[0], certs, tmp_path_factory.mktemp("client-sc"))
    yield sc, sasl_port, ssl_port
    sc.stop()


def test_pass_through_as_the_clients_own_principal(brokers, kshare, client_sidecar, certs):
    """passthrough.credentials = client: produce and consumer-group requests forwarded through kshare
    reach the backend as the client's *own* principal, so the backend's ACLs decide — for a SCRAM
    client (relayed by the delegate authenticator; its upstream uses a delegation token it owns), a
    PLAIN client (its password replayed) and two mTLS clients (``User:CN=svc-a,O=kshare-test``, a
    token owned by the certificate's principal). The same clients directly against the 3.9 backend
    and against native 4.3 with the same ACLs get the same answers, side by side. With the default
    (the sidecar's credentials) alice's Produce succeeds — what docs/security.md warns about. Once
    the clients are gone their tokens are expired at the backend (idle.ms 2000 here)."""
    b39, b4 = brokers
    ca = certs[0]
    topic = unique("acl-pt")
    groups = {p: unique(f"{p}-cg") for p in ("carol", "alice", "svc-a", "svc-b")}
    cert_dir = ca.parent
    client_certs = {name: make_client_cert(cert_dir, f"/O=kshare-test/CN={name}", name) for name in ("svc-a", "svc-b")}
    for broker in (b39, b4):
        _topic_with_records(broker, topic, b"pt")
        _grant(broker, ca, [
            _acl(ResourceType.TOPIC, topic, "carol", AclOperation.WRITE),
            _acl(ResourceType.TOPIC, topic, "carol", AclOperation.READ),
            _acl(ResourceType.GROUP, groups["carol"], "carol", AclOperation.READ),
            _acl(ResourceType.TOPIC, topic, "alice", AclOperation.DESCRIBE),  # sees it, no WRITE
            _acl(ResourceType.TOPIC, topic, "alice", AclOperation.READ),
            _acl(ResourceType.GROUP, groups["alice"], "alice", AclOperation.DESCRIBE),  # finds it, cannot join
            _acl(ResourceType.TOPIC, topic, "CN=svc-a,O=kshare-test", AclOperation.WRITE),
            _acl(ResourceType.TOPIC, topic, "CN=svc-a,O=kshare-test", AclOperation.READ),
            _acl(ResourceType.GROUP, groups["svc-a"], "CN=svc-a,O=kshare-test", AclOperation.READ),
            _acl(ResourceType.TOPIC, topic, "CN=svc-b,O=kshare-test", AclOperation.DESCRIBE),  # no WRITE, no READ
            _acl(ResourceType.GROUP, groups["svc-b"], "CN=svc-b,O=kshare-test", AclOperation.READ)])
    sc, sasl_port, ssl_port = client_sidecar

    def mtls(name: str) -> dict:
        return _mtls(ca, *client_certs[name])

    clients = {"carol": scram("carol", ca), "alice": scram("alice", ca), "svc-a": mtls("svc-a"), "svc-b": mtls("svc-b")}
    targets = {"kshare": (f"127.0.0.1:{sasl_port}", f"127.0.0.1:{ssl_port}"),
               "3.9 direct": (b39.ssl_bootstrap, b39.mtls_bootstrap), "native 4.3": (b4.ssl_bootstrap, b4.mtls_bootstrap)}
    time.sleep(1.5)  # the ACLs reach both authorizers and kshare's cache
    runs = {}
    with ThreadPoolExecutor(12) as pool:
        for target, (sasl, ssl) in targets.items():
            for who, extra in clients.items():
                bootstrap = ssl if who.startswith("svc") else sasl
                runs[(target, who, "produce")] = pool.submit(_produce_outcome, bootstrap, topic, extra)
                runs[(target, who, "group")] = pool.submit(_group_outcome, bootstrap, topic, groups[who], extra)
        # alice over PLAIN: her password replayed (kshare only: the brokers' SASL_SSL listener is SCRAM-only)
        plain = {**scram("alice", ca), "sasl.mechanism": "PLAIN"}
        runs[("kshare", "alice PLAIN", "produce")] = pool.submit(_produce_outcome, f"127.0.0.1:{sasl_port}",
                                                                topic, plain)
        # the default (passthrough.credentials = sidecar): the backend authorizes the sidecar's user
        runs[("kshare default", "alice", "produce")] = pool.submit(_produce_outcome, kshare.sasl_bootstrap,
                                                                  topic, scram("alice", ca))
        results = {key: future.result() for key, future in runs.items()}
    time.sleep(4)  # every client gone: idle tokens are expired (idle.ms 2000)
    log = sc.log_path.read_text(errors="replace")
    table = "\n".join(f"{who:6} {op:8} " + "  ".join(f"{t}: {results[(t, who, op)]:28}" for t in targets)
                      for who in clients for op in ("produce", "group"))
    print("\n" + table + f"\nalice PLAIN produce via kshare: {results[('kshare', 'alice PLAIN', 'produce')]}"
          f"\nalice via the default sidecar: {results[('kshare default', 'alice', 'produce')]}")
    expected = {("carol", "produce"): "OK", ("carol", "group"): "OK",
                ("alice", "produce"): "TOPIC_AUTHORIZATION_FAILED", ("alice", "group"): "GROUP_AUTHORIZATION_FAILED",
                ("svc-a", "produce"): "OK", ("svc-a", "group"): "OK",
                ("svc-b", "produce"): "TOPIC_AUTHORIZATION_FAILED", ("svc-b", "group"): "TOPIC_AUTHORIZATION_FAILED"}
    for (who, op), want in expected.items():
        assert [results[(t, who, op)] for t in targets] == [want] * len(targets), table
    assert results[("kshare", "alice PLAIN", "produce")] == "TOPIC_AUTHORIZATION_FAILED", results
    assert results[("kshare default", "alice", "produce")] == "OK", results  # docs/security.md, the default
    for principal in ("User:carol", "User:alice", "User:CN=svc-a,O=kshare-test", "User:CN=svc-b,O=kshare-test"):
        assert f"for {principal}: " in log and f"expired ({principal} idle)" in log, principal  # made, then expired
    assert not any(pw in log for pw in USERS.values()) and TOKEN_SECRET not in log
    assert not HMAC_B64.search(log), "a base64 HMAC-SHA512 (a token's password) in the log"
    assert "Traceback" not in log


@pytest.fixture(scope="module")
def token_produce(tmp_path_factory) -> list[str]:
    """tests/e2e/java/TokenProduce.java (Kafka's own client with a delegation token)."""
    return compile_java(tmp_path_factory, Path(__file__).with_name("java") / "TokenProduce.java")


def test_a_client_with_a_delegation_token_is_its_owner(brokers, client_sidecar, certs, token_produce, tmp_path):
    """A Java producer authenticating with a delegation token (SCRAM, tokenauth=true) through
    kshare's delegate authenticator: the exchange is relayed, the backend names the token's owner,
    and pass-through runs as that owner — carol's token may produce (WRITE), alice's is refused
    (DESCRIBE only: CLUSTER_AUTHORIZATION_FAILED for the idempotent producer's InitProducerId), an
    expired token is refused with Kafka's SASL_AUTHENTICATION_FAILED message — the same outcomes
    directly against the 3.9 backend."""
    import subprocess

    b39, _ = brokers
    ca = certs[0]
    topic = unique("acl-dt")
    create_topic(b39.bootstrap, topic, 1)
    _grant(b39, ca, [_acl(ResourceType.TOPIC, topic, "carol", AclOperation.WRITE),
                     _acl(ResourceType.TOPIC, topic, "alice", AclOperation.DESCRIBE)])
    sc, sasl_port, _ = client_sidecar
    client = tmp_path / "client.properties"
    client.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.truststore.type=PEM\n"
                      f"ssl.truststore.location={ca}\n")

    def run(user: str, expire: str) -> dict[str, str]:
        props = tmp_path / f"{user}.properties"
        props.write_text(client.read_text() + "sasl.jaas.config=org.apache.kafka.common.security.scram."
                         f'ScramLoginModule required username="{user}" password="{USERS[user]}";\n')
        done = subprocess.run(token_produce + [b39.ssl_bootstrap, str(props), str(client), topic, expire,
                                               f"127.0.0.1:{sasl_port}", b39.ssl_bootstrap],
                              capture_output=True, text=True, timeout=120)
        found = dict(line.split(" ", 2)[1:] for line in done.stdout.splitlines() if line.startswith("RESULT "))
        assert len(found) == 2, done.stdout[-2000:] + done.stderr[-2000:]
        return {"kshare" if key.endswith(f":{sasl_port}") else "3.9 direct": value for key, value in found.items()}

    with ThreadPoolExecutor(3) as pool:
        cases = {"carol": ("carol", "no"), "alice": ("alice", "no"), "carol, expired": ("carol", "yes")}
        futures = {name: pool.submit(run, *args) for name, args in cases.items()}
        results = {name: future.result() for name, future in futures.items()}
    log = sc.log_path.read_text(errors="replace")
    print("\n" + "\n".join(f"{name:15} {r}" for name, r in results.items()))
    refused = ("SaslAuthenticationException: Authentication failed during authentication due to invalid credentials "
               "with SASL mechanism SCRAM-SHA-512")
    assert results["carol"] == {"kshare": "OK", "3.9 direct": "OK"}, results
    # alice may only DESCRIBE: the idempotent producer's InitProducerId needs WRITE on some topic (or
    # IDEMPOTENT_WRITE), so the backend refuses it for her — through kshare as directly
    assert set(results["alice"].values()) == {"ClusterAuthorizationException: Cluster authorization failed."}, results
    assert all(v.startswith(refused) for v in results["carol, expired"].values()), results
    assert "authenticated as User:carol with SCRAM-SHA-512 on listener SASL_SSL" in log  # the owner, not the id
    assert "authenticated as User:alice with SCRAM-SHA-512 on listener SASL_SSL" in log
    assert "Traceback" not in log and not HMAC_B64.search(log) and not any(pw in log for pw in USERS.values())


@pytest.mark.optin("tokens")  # ~40 s
def test_client_tokens_are_replaced_and_upstreams_reauthenticate_in_place(brokers, certs, tmp_path):
    """An mTLS client produces through kshare for 25 s while its delegation tokens live 8 s: each is
    replaced at 80 % of its life (the successor made ahead, handed out once it settled), the
    upstream re-authenticates in place (KIP-368: the broker bounds a token's session by its expiry)
    — every record delivered, no re-authentication refused, no connection dropped."""
    b39, _ = brokers
    ca = certs[0]
    topic = unique("acl-tok")
    cert, key = make_client_cert(ca.parent, "/O=kshare-test/CN=svc-t", "svc-t")
    create_topic(b39.bootstrap, topic, 1)
    _grant(b39, ca, [_acl(ResourceType.TOPIC, topic, "CN=svc-t,O=kshare-test", AclOperation.WRITE)])
    sc, _, ssl_port = _client_principal_sidecar(b39, certs, tmp_path,
                                                KSHARE_PASSTHROUGH_DELEGATION_TOKEN_MAX_LIFETIME_MS="8000")
    time.sleep(1.5)
    try:
        steady = _produce_steadily(f"127.0.0.1:{ssl_port}", topic, _mtls(ca, cert, key), seconds=25)
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    made = [line for line in log.splitlines() if "delegation token" in line and "for User:CN=svc-t" in line]
    reauth = log.count("re-authenticated")
    print(f"\n{steady}; {len(made)} tokens made; {reauth} in-place re-authentications")
    assert steady["failed"] == 0 and steady["delivered"] == steady["sent"] > 0, steady
    assert len(made) >= 3, made
    assert reauth >= 2 and "re-authentication failed" not in log, reauth
    assert "Traceback" not in log and not HMAC_B64.search(log)


@pytest.mark.optin("tokens")  # ~20 s
def test_a_sidecar_without_create_tokens_refuses_with_one_line(brokers, certs, tmp_path):
    """The sidecar's principal (erin: ALL on topics, groups, transactional ids and the cluster, but
    no CREATE_TOKENS on USER) cannot make a token for an mTLS client: the client's Produce gets
    retriable answers until its timeout; the sidecar logs the missing ACL (rate-limited) and keeps
    serving."""
    b39, _ = brokers
    ca = certs[0]
    topic = unique("acl-notok")
    cert, key = make_client_cert(ca.parent, "/O=kshare-test/CN=svc-c", "svc-c")
    create_topic(b39.bootstrap, topic, 1)
    _grant(b39, ca, [_acl(ResourceType.TOPIC, topic, "CN=svc-c,O=kshare-test", AclOperation.WRITE),
                     _acl(ResourceType.TOPIC, "*", "erin", AclOperation.ALL),
                     _acl(ResourceType.GROUP, "*", "erin", AclOperation.ALL),
                     _acl(ResourceType.TRANSACTIONAL_ID, "*", "erin", AclOperation.ALL),
                     _acl(ResourceType.BROKER, "kafka-cluster", "erin", AclOperation.ALL)])
    time.sleep(1.0)
    sc, _, ssl_port = _client_principal_sidecar(b39, certs, tmp_path, KSHARE_BACKEND_SASL_USERNAME="erin",
                                                KSHARE_BACKEND_SASL_PASSWORD=USERS["erin"],
                                                KSHARE_AUTHORIZER_CLASS_NAME="")
    try:
        started = time.monotonic()
        result = _produce_outcome(f"127.0.0.1:{ssl_port}", topic,
                                  {**_mtls(ca, cert, key), "message.timeout.ms": 8000})
        elapsed = time.monotonic() - started
        assert broker_ready("127.0.0.1", sc.port), "the sidecar stopped serving"
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    lines = [line for line in log.splitlines()
             if "needs CREATE_TOKENS on USER User:CN=svc-c,O=kshare-test" in line and " DEBUG " not in line]
    print(f"\n{result} after {elapsed:.1f} s; {len(lines)} line(s):\n" + "\n".join(lines[:3]))
    assert result == "_MSG_TIMED_OUT", result
    assert len(lines) == 1 and "WARNING" in lines[0] and "DELEGATION_TOKEN_AUTHORIZATION_FAILED" in lines[0], lines
    assert "Traceback" not in log and USERS["erin"] not in log


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


def test_java_share_consumer_same_outcomes(brokers, kshare, certs, java_consumer, tmp_path):
    """Kafka's own KafkaShareConsumer (kafka-clients 4.3) with the same ACL scenarios."""
    b39, b4 = brokers
    ca = certs[0]
    topic = unique("acl-java")
    groups = {"alice": unique("alice-jg"), "dave": unique("dave-jg"), "carol": unique("carol-jg")}
    for broker in (b39, b4):
        _topic_with_records(broker, topic, b"j")
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
