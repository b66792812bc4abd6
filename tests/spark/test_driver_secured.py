"""The driver's two share clients against secured listeners (SASL_SSL with SCRAM-SHA-512, a
private CA), natively (Kafka 4.3) and through a kshare sidecar on Kafka 3.9, configured the way a
Spark user writes it: librdkafka's setting names (``kafka.*``). ``shareClient=kshare`` proves the
translation (``shareclient.py``) against real listeners; ``librdkafka`` runs the same options
through confluent-kafka as the reference. No SparkSession: the acquirers are driven as
``latestOffset`` drives them."""

from __future__ import annotations

import time

import pytest

from kshare_sidecar.spark import ranges as R
from kshare_sidecar.spark.acquire import LibrdkafkaAcquirer
from kshare_sidecar.spark.acquire_ranges import RangeAcquirer
from kshare_sidecar.spark.options import parse_options
from kshare_sidecar.spark.shareclient import driver_client
from tests.e2e.test_asyncio_client_secured import (  # noqa: F401 - fixtures
    SCRAM_PW,
    _setup,
    certs,
    kshare_secured,
    native_secured,
    secured,
)


@pytest.mark.parametrize("client", ["kshare", "librdkafka"])
def test_driver_clients_acquire_and_acknowledge_over_sasl_ssl(secured, certs, client):  # noqa: F811
    topic, group, values = _setup(secured, 30)
    opts = parse_options({"kafka.bootstrap.servers": secured.sasl_ssl, "group": group, "subscribe": topic,
                          "kafka.security.protocol": "SASL_SSL", "kafka.ssl.ca.location": str(certs["ca"]),
                          "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.username": "kshare",
                          "kafka.sasl.password": SCRAM_PW, "shareClient": client, "maxRecordsPerTrigger": "20"})
    assert driver_client(opts)[0] == client
    acq = (RangeAcquirer if client == "kshare" else LibrdkafkaAcquirer)(opts)
    got = 0
    seq = 0
    deadline = time.monotonic() + 60
    try:
        while got < len(values) and time.monotonic() < deadline:
            acq.acknowledge_through(seq - 1)
            got += R.count(acq.acquire(seq, 1.0))
            seq += 1
        acq.acknowledge_through(seq)
    finally:
        acq.close()
    assert got == len(values) and acq.stats["acknowledged"] == len(values) and acq.stats["ack_failed"] == 0
