"""Which backend APIs each ``state.write.mode`` needs (persist/topicsetup.py): the start-up check
that refuses ``transactional`` on a backend without EndTxn (tansu) instead of failing every
write later. The check against real brokers: tests/integration/test_tansu_backend.py."""

from kshare_sidecar.persist.topicsetup import WRITE_MODE_APIS, missing_apis
from kshare_sidecar.persist.settings import WRITE_MODES

KAFKA_39 = set(range(0, 68))  # API keys 0-67, EndTxn (26) among them
NO_END_TXN = KAFKA_39 - {26}


def test_every_write_mode_names_its_apis():
    assert set(WRITE_MODE_APIS) == set(WRITE_MODES)


def test_kafka_serves_every_mode():
    assert all(missing_apis(mode, KAFKA_39) == [] for mode in WRITE_MODES)


def test_without_end_txn_only_transactional_is_refused():
    assert missing_apis("transactional", NO_END_TXN) == ["EndTxn"]
    assert missing_apis("fenced", NO_END_TXN) == []
    assert missing_apis("idempotent", NO_END_TXN) == []


def test_without_init_producer_id_nothing_works():
    assert all(missing_apis(mode, KAFKA_39 - {22}) == ["InitProducerId"] for mode in ("fenced", "idempotent"))
    assert missing_apis("transactional", {0, 1, 3}) == ["InitProducerId", "AddPartitionsToTxn", "EndTxn"]
