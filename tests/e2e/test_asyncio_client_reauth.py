"""KIP-368 from kshare's own asyncio client (client/conn.py rides on backend/brokerconn.py): against a
sidecar SASL listener with ``connections.max.reauth.ms``, a ShareConsumer consuming for longer
than several session lifetimes re-authenticates in place; the sidecar never closes its connection
for an expired session and every record arrives."""

from __future__ import annotations

import asyncio
import time

import pytest

from kshare_sidecar.client import AcknowledgeType, ShareConsumer
from kshare_sidecar.testing.kafka import free_port
from tests.e2e.conftest import SidecarProcess
from tests.support import create_topic, produce, set_group_config, unique

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

PW = "reauth-Pw-77aa"


async def test_the_asyncio_client_reauthenticates_to_the_sidecar(kafka_39, tmp_path):
    users = tmp_path / "users"
    users.write_text(f"alice:{PW}\n")
    port, sasl_port = free_port(), free_port()
    sc = SidecarProcess(kafka_39.bootstrap, tmp_path / "sidecar.log", port=port, args=["--log-level", "DEBUG"],
                        listeners=f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
                        env={"KSHARE_SASL_ENABLED_MECHANISMS": "SCRAM-SHA-512,PLAIN",
                             "KSHARE_SASL_AUTHENTICATOR": "static", "KSHARE_SASL_CREDENTIALS_FILE": str(users),
                             "KSHARE_CONNECTIONS_MAX_REAUTH_MS": "2000"}).start()
    topic, group = unique("aio-ra"), unique("aio-ra-g")
    create_topic(kafka_39.bootstrap, topic, 1)
    set_group_config(sc.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    values = produce(kafka_39.bootstrap, topic, 40)
    got = []
    try:
        async with ShareConsumer(topic, bootstrap_servers=f"127.0.0.1:{sasl_port}", group_id=group,
                                 acknowledgement_mode="explicit", security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                                 sasl_plain_password=PW) as c:
            deadline = time.monotonic() + 60
            while len(got) < len(values) and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=500, max_records=1)).values():
                    for r in recs:
                        c.acknowledge(r, AcknowledgeType.ACCEPT)
                    got += recs
                await c.commit()
                await asyncio.sleep(0.2)  # ~10 s in all: five session lifetimes
        log = sc.log_path.read_text(errors="replace")
    finally:
        sc.stop()
    assert sorted(r.value for r in got) == sorted(values)
    assert "SASL session expired" not in log, "the client let its session expire"
    assert log.count("re-authenticated as User:alice") >= 3, log[-2000:]  # in place, every ~1.7 s
    assert PW not in log
