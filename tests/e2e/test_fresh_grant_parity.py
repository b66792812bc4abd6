"""A fresh ACL grant, side by side: native Kafka 4.4 (StandardAuthorizer) and kshare over a secured
Kafka 3.9 (``authorizer.class.name = backend``, its default ``authorizer.cache.ms`` of 5 s).

bob is refused first (no ACL: GROUP_AUTHORIZATION_FAILED on both — kshare now has bob's empty ACL
set in its cache), then READ on his group and on the topic are created, and a new share consumer
starts at once. A broker applies the ACLs from its metadata log within milliseconds and serves
it; kshare must too: a refusal is confirmed on ACLs read after the request arrived, never taken
from the cache (GROUP_AUTHORIZATION_FAILED is fatal to the consumer). Both targets run on SASL_SSL
with SCRAM users, as tests/e2e/test_acl_parity.py sets them up.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, ResourceType

from kshare_sidecar.testing.kafka import free_port
from kshare_sidecar.testing.maven import require_tool
from tests.e2e.acl_support import (RECORDS, USERS, _acl, _grant, _topic_with_records, acl_brokers, outcome,
                                   scram)
from tests.e2e.conftest import SidecarProcess
from tests.e2e.test_secured_backend import make_ca_and_server_cert
from tests.support import set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300), pytest.mark.optin("parity-debts")]


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tuple[Path, Path]:
    require_tool("openssl", "install OpenSSL (the test makes its CA with it)")
    return make_ca_and_server_cert(tmp_path_factory.mktemp("grant-certs"))


@pytest.fixture(scope="module")
def brokers(certs):
    with acl_brokers(certs[1], ("3.9", "4.4")) as pair:
        yield pair


@pytest.fixture(scope="module")
def kshare(brokers, certs, tmp_path_factory):
    b39, _ = brokers
    d = tmp_path_factory.mktemp("grant-sidecar")
    users = d / "users"
    users.write_text("".join(f"{u}:{pw}\n" for u, pw in USERS.items() if u not in ("admin", "kshare")))
    port, sasl_port = free_port(), free_port()
    env = {"KSHARE_BACKEND_SECURITY_PROTOCOL": "SASL_SSL", "KSHARE_BACKEND_SASL_MECHANISM": "SCRAM-SHA-512",
           "KSHARE_BACKEND_SASL_USERNAME": "kshare", "KSHARE_BACKEND_SASL_PASSWORD": USERS["kshare"],
           "KSHARE_BACKEND_SSL_TRUSTSTORE_LOCATION": str(certs[0]),
           "KSHARE_SSL_KEYSTORE_LOCATION": str(certs[1]), "KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-512",
           "KSHARE_SASL_CREDENTIALS_FILE": str(users),
           "KSHARE_AUTHORIZER_CLASS_NAME": "backend",  # authorizer.cache.ms: its default, 5 s
           "KSHARE_SUPER_USERS": "User:admin"}
    sc = SidecarProcess(b39.ssl_bootstrap, d / "sidecar.log", port=port, env=env,
                        listeners=f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}").start()
    sc.sasl_bootstrap = f"127.0.0.1:{sasl_port}"
    yield sc
    sc.stop()


def test_a_consumer_started_right_after_its_grant_is_served_as_natively(brokers, kshare, certs):
    b39, b44 = brokers
    ca = certs[0]
    topic, group = unique("grant"), unique("bob-g")
    for broker in (b39, b44):
        _topic_with_records(broker, topic, b"g")
    set_group_config(b44.bootstrap, group, {"share.auto.offset.reset": "earliest"})  # kshare's is earliest here
    targets = {"kshare": kshare.sasl_bootstrap, "native": b44.ssl_bootstrap}

    def both(timeout_s: float) -> dict[str, str]:
        with ThreadPoolExecutor(2) as pool:
            futures = {name: pool.submit(outcome, bootstrap, group, topic, scram("bob", ca), timeout_s)
                       for name, bootstrap in targets.items()}
            return {name: f.result() for name, f in futures.items()}

    before = both(20)
    assert before == {"kshare": "GROUP_AUTHORIZATION_FAILED", "native": "GROUP_AUTHORIZATION_FAILED"}, before
    granted_at = time.monotonic()
    for broker in (b39, b44):
        _grant(broker, ca, [_acl(ResourceType.GROUP, group, "bob", AclOperation.READ),
                            _acl(ResourceType.TOPIC, topic, "bob", AclOperation.READ)])
    started_after = time.monotonic() - granted_at
    after = both(40)
    print(f"\nconsumers started {started_after:.2f} s after the grant (kshare's cache: 5 s): {after}")
    assert after == {"kshare": f"consumed {RECORDS}", "native": f"consumed {RECORDS}"}, after
    log = kshare.log_path.read_text(errors="replace")
    assert "Traceback" not in log and not any(pw in log for pw in USERS.values())
