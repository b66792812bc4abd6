"""The driver's two share clients and the executors' two readers against secured listeners
(SASL_SSL with SCRAM-SHA-512 and a private CA, SASL_PLAINTEXT with PLAIN), natively (Kafka 4.3)
and through a kshare sidecar on Kafka 3.9, configured the way a Spark user writes it:
librdkafka's setting names (``kafka.*``). ``shareClient=kshare`` / ``readClient=kshare`` prove the
translations (``shareclient.py``, ``readclient.py``) against real listeners; ``librdkafka`` runs
the same options through confluent-kafka as the reference. No SparkSession: the acquirers are
driven as ``latestOffset`` drives them, the readers as a task calls them."""

from __future__ import annotations

import time

import pytest

from kshare_sidecar.spark import ranges as R
from kshare_sidecar.spark.acquire import LibrdkafkaAcquirer
from kshare_sidecar.spark.acquire_ranges import RangeAcquirer
from kshare_sidecar.spark.options import parse_options
from kshare_sidecar.spark.readclient import reader_client
from kshare_sidecar.spark.shareclient import driver_client
from tests.e2e.test_asyncio_client_secured import (  # noqa: F401 - fixtures
    PLAIN_PW,
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


@pytest.mark.parametrize("listener", ["sasl_ssl", "sasl_plaintext"])
def test_readers_read_the_ranges_over_sasl(secured, certs, listener):  # noqa: F811
    """SASL_SSL (SCRAM-SHA-512, the test CA, host name checked) and SASL_PLAINTEXT (PLAIN): both
    readers read the same 30 records from the secured listener (natively from Kafka 4.3, through
    the sidecar's Fetch pass-through on kshare); the password is in no row, log or error."""
    from kshare_sidecar.spark import read as RD
    from kshare_sidecar.spark import read_librdkafka as RL
    from kshare_sidecar.spark.read import read_ranges

    topic, group, values = _setup(secured, 30)
    security = ({"kafka.security.protocol": "SASL_SSL", "kafka.ssl.ca.location": str(certs["ca"]),
                 "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.username": "kshare",
                 "kafka.sasl.password": SCRAM_PW} if listener == "sasl_ssl" else
                {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
                 "kafka.sasl.username": "kshare", "kafka.sasl.password": PLAIN_PW})
    rows = {}
    for reader in ("kshare", "librdkafka"):
        opts = parse_options({"kafka.bootstrap.servers": getattr(secured, listener), "group": group,
                              "subscribe": topic, "readClient": reader, **security})
        assert reader_client(opts)[0] == reader
        try:
            rows[reader] = [r for b in read_ranges(opts, topic, 0, [[0, 9, 1], [10, 29, 2]]) for r in b.to_pylist()]
        finally:
            RD._close_all()
            RL._close_all()
    assert rows["kshare"] == rows["librdkafka"]
    assert [r["value"] for r in rows["kshare"]] == values
    assert [r["deliveryCount"] for r in rows["kshare"]] == [1] * 10 + [2] * 20


def test_raw_reader_with_a_wrong_password_fails_at_once(secured, certs):  # noqa: F811
    """Refused credentials are not retried until readTimeoutMs: the task fails with the broker's
    reason, and the password is not in the message."""
    from kshare_sidecar.spark import read as RD
    from kshare_sidecar.spark.fetch import FetchError
    from kshare_sidecar.spark.read import read_ranges

    topic, group, _ = _setup(secured, 3)
    wrong = "wrong-Pw-Reader-77"
    opts = parse_options({"kafka.bootstrap.servers": secured.sasl_ssl, "group": group, "subscribe": topic,
                          "kafka.security.protocol": "SASL_SSL", "kafka.ssl.ca.location": str(certs["ca"]),
                          "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.username": "kshare",
                          "kafka.sasl.password": wrong})
    started = time.monotonic()
    try:
        with pytest.raises(FetchError) as err:
            list(read_ranges(opts, topic, 0, [[0, 2, 1]]))
    finally:
        RD._close_all()
    assert time.monotonic() - started < 30 and wrong not in str(err.value)
