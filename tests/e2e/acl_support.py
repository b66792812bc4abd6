"""Secured Kafka brokers with StandardAuthorizer, their users and ACLs, and what clients see — shared
by tests/e2e/test_acl_parity.py and tests/e2e/test_acl_everyone_parity.py."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AclBinding, AclPermissionType, AdminClient, ResourcePatternType, ResourceType

from kshare_sidecar.testing.kafka import free_port
from tests.e2e.conftest import SidecarProcess
from tests.e2e.test_secured_backend import SaslBroker
from tests.support import create_topic, unique


USERS = {"admin": "admin-Scram-1a", "kshare": "kshare-Scram-2b", "alice": "alice-Scram-3c", "bob": "bob-Scram-4d",
         "dave": "dave-Scram-5e", "carol": "carol-Scram-6f",
         "erin": "erin-Scram-7a"}  # a sidecar principal that is no super user (make test-tokens)
RECORDS = 30
AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:admin;User:kshare;User:ANONYMOUS",
              "allow.everyone.if.no.acl.found": "false",
              # delegation tokens (KIP-48; KRaft since 3.6): pass-through as a SCRAM or mTLS client's
              # own principal (passthrough.credentials = client) authenticates with tokens it owns
              "delegation.token.secret.key": "kshare-test-token-secret"}
TOKEN_SECRET = AUTHORIZER["delegation.token.secret.key"]
#: a token's password: its HMAC-SHA512 in base64 (88 characters) — not after "v=" (a SCRAM
#: server signature has the same length; aiokafka logs those at DEBUG, they are no secret)
HMAC_B64 = re.compile(r"(?<![=A-Za-z0-9+/])[A-Za-z0-9+/]{86}==(?![A-Za-z0-9+/=])")


class AclBroker(SaslBroker):
    """SaslBroker with StandardAuthorizer, every test user as a SCRAM-SHA-512 user, delegation
    tokens, and an ``MTLS`` listener (SSL, ``ssl.client.auth=required``, the test CA): a client
    certificate's principal is ``User:<subject DN>``."""

    mtls_port = 0
    truststore: Path | None = None

    def __init__(self, version: str, keystore: Path, **kw) -> None:
        extra = dict(AUTHORIZER)
        if version.split(".")[0] == "4":  # the same short intervals the other native e2e fixtures use
            extra |= {"group.share.heartbeat.interval.ms": "1000", "group.share.min.heartbeat.interval.ms": "1000"}
        super().__init__(version, extra_config=extra, heap="768m", **kw)
        self.keystore = keystore
        self.truststore = keystore.parent / "ca.pem"
        self.format_args = [a for user, pw in USERS.items()
                            for a in ("--add-scram", f"SCRAM-SHA-512=[name={user},password={pw}]")]

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        self.mtls_port = self.mtls_port or free_port()
        props["listeners"] += f",MTLS://127.0.0.1:{self.mtls_port}"
        props["advertised.listeners"] += f",MTLS://127.0.0.1:{self.mtls_port}"
        props["listener.security.protocol.map"] += ",MTLS:SSL"
        props |= {"listener.name.mtls.ssl.keystore.type": "PEM",
                  "listener.name.mtls.ssl.keystore.location": str(self.keystore),
                  "listener.name.mtls.ssl.truststore.type": "PEM",
                  "listener.name.mtls.ssl.truststore.location": str(self.truststore),
                  "listener.name.mtls.ssl.client.auth": "required"}
        return props

    @property
    def mtls_bootstrap(self) -> str:
        return f"127.0.0.1:{self.mtls_port}"


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


def _produce_outcome(bootstrap: str, topic: str, extra: dict) -> str:
    """One record produced: 'OK' or the delivery error's name."""
    results: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000, **extra})
    producer.produce(topic, b"p", on_delivery=lambda err, _msg: results.append(err.name() if err else "OK"))
    producer.flush(30)
    return results[0] if results else "no delivery report"


def _topic_with_records(broker: SaslBroker, topic: str, prefix: bytes) -> None:
    """One partition, RECORDS records (PLAINTEXT: ANONYMOUS is a super user there)."""
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(RECORDS):
        producer.produce(topic, prefix + b"%d" % i)
    assert producer.flush(30) == 0


def _group_outcome(bootstrap: str, topic: str, group: str, extra: dict, timeout_s: float = 30) -> str:
    """A classic consumer group member: subscribe, consume one record, commit it — 'OK' or the
    first error's name (JoinGroup, OffsetFetch, Fetch, OffsetCommit are all authorized)."""
    from confluent_kafka import Consumer

    errors: list[KafkaError] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "error_cb": errors.append, "log_level": 0, **extra})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error():
                    errors.append(msg.error())
                elif msg is not None:
                    consumer.commit(message=msg, asynchronous=False)
                    return "OK"
            except KafkaException as exc:
                errors.append(exc.args[0])
            fatal = [e for e in errors if e.code() in (KafkaError.GROUP_AUTHORIZATION_FAILED,
                                                       KafkaError.TOPIC_AUTHORIZATION_FAILED)]
            if fatal:
                return fatal[0].name()
        return f"timed out {[e.name() for e in errors][:3]}"
    finally:
        consumer.close()


def _client_principal_sidecar(b39, certs, tmp_path, **env) -> tuple[SidecarProcess, int, int]:
    """A sidecar with passthrough.credentials = client: SASL_SSL (SCRAM relayed and PLAIN checked
    by the delegate authenticator) and SSL with required client certificates; DEBUG logging."""
    ca = certs[0]
    port, sasl_port, ssl_port = free_port(), free_port(), free_port()
    env = {"KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_SSL", "KSHARE_BACKEND_SASL_MECHANISM": "SCRAM-SHA-512",
           "KSHARE_BACKEND_SASL_USERNAME": "kshare", "KSHARE_BACKEND_SASL_PASSWORD": USERS["kshare"],
           "KSHARE_BACKEND_SSL_TRUSTSTORE_LOCATION": str(ca), "KSHARE_SSL_KEYSTORE_LOCATION": str(certs[1]),
           "KSHARE_SSL_TRUSTSTORE_LOCATION": str(ca), "KSHARE_SSL_CLIENT_AUTH": "required",
           "KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-512,PLAIN", "KSHARE_SASL_AUTHENTICATOR": "delegate",
           "KSHARE_AUTHORIZER_CLASS_NAME": "backend", "KSHARE_AUTHORIZER_CACHE_MS": "1000",
           "KSHARE_PASSTHROUGH_CREDENTIALS": "client", "KSHARE_PASSTHROUGH_DELEGATION_TOKEN_IDLE_MS": "2000",
           # its own share state: on the same one it would fence the module's sidecar (a takeover)
           "KSHARE_STATE_TOPIC": unique("__kshare_state_pt"), **env}
    sc = SidecarProcess(b39.ssl_bootstrap, tmp_path / "sidecar.log", port=port, env=env, args=["--log-level", "DEBUG"],
                        listeners=f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port},"
                                  f"SSL://127.0.0.1:{ssl_port}").start()
    return sc, sasl_port, ssl_port


def _mtls(ca: Path, cert: Path, key: Path) -> dict:
    return {"security.protocol": "SSL", "ssl.ca.location": str(ca), "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key)}


def _produce_steadily(bootstrap: str, topic: str, extra: dict, seconds: float) -> dict[str, int]:
    outcome = {"sent": 0, "delivered": 0, "failed": 0}

    def report(err, _msg) -> None:
        outcome["failed" if err else "delivered"] += 1

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **extra})
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        producer.produce(topic, b"steady", on_delivery=report)
        outcome["sent"] += 1
        producer.poll(0.05)
    producer.flush(30)
    return outcome


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


@contextmanager
def acl_brokers(keystore: Path, versions: tuple[str, ...] = ("3.9", "4.4")) -> Iterator[list[AclBroker]]:
    """AclBrokers of ``versions`` started side by side (distinct ports drawn at once), stopped after.

    The harness's brokers die with the *thread* that spawned them (PR_SET_PDEATHSIG), so each
    starter thread lives until the brokers are stopped."""
    brokers = [AclBroker(v, keystore) for v in versions]
    ports = iter(_distinct_ports(5 * len(brokers)))
    for b in brokers:
        b.port, b.controller_port, b.sasl_port, b.ssl_port = next(ports), next(ports), next(ports), next(ports)
        b.mtls_port = next(ports)
    errors: list[BaseException] = []
    started = [threading.Event() for _ in brokers]
    done = threading.Event()

    def start(b: AclBroker, ready: threading.Event) -> None:
        try:
            b.start()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
        ready.set()
        done.wait()

    for b, e in zip(brokers, started, strict=True):
        threading.Thread(target=start, args=(b, e), daemon=True).start()
    for e in started:
        e.wait()
    try:
        if errors:
            raise errors[0]
        for b in brokers:
            _wait_port(b.ssl_port)
        yield brokers
    finally:
        for b in brokers:
            b.stop()
        done.set()
