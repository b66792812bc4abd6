"""passthrough.credentials = client: upstream connections authenticate as the client."""

from __future__ import annotations

import pytest

from kshare_sidecar.backend.clients import BackendClients
from kshare_sidecar.passthrough.forwarder import Forwarder
from kshare_sidecar.passthrough.pool import BackendPool
from kshare_sidecar.backend.security import BackendSecurity
from kshare_sidecar.wire.errors import CloseConnection


class Conn:
    def __init__(self, conn_id: int, credentials=None) -> None:
        self.conn_id, self.principal = conn_id, "User:bob"
        if credentials is not None:
            self.backend_credentials = credentials

    def add_close_callback(self, callback) -> None:
        pass


def test_upstreams_use_the_clients_credentials_and_others_are_refused():
    security = BackendSecurity(protocol="SASL_SSL", mechanism="SCRAM-SHA-512", username="kshare", password="k-pw")
    pool = BackendPool(BackendClients("127.0.0.1:1", security))
    pool.brokers = {1: ("127.0.0.1", 1)}
    forwarder = Forwarder(pool)
    assert forwarder._upstream(Conn(1)).conn(1).security.username == "kshare"  # default: the sidecar's
    forwarder.client_credentials = True
    up = forwarder._upstream(Conn(2, ("alice", "a-pw")))
    conn = up.conn(1)
    assert (conn.security.username, conn.security.password, conn.security.mechanism) == \
        ("alice", "a-pw", "SCRAM-SHA-512")
    assert pool.security.username == "kshare"
    with pytest.raises(CloseConnection):
        forwarder._upstream(Conn(3))
    assert "a-pw" not in repr(conn.security)
