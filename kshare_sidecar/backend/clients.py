"""Every connection the sidecar opens to the backend is made here, the backend's security applied
once (docs/security.md, "Towards the backend").

aiokafka producers, consumers and admin clients (the dead-letter writer, the cluster membership
and the state-topic tail) and raw ``BrokerConn`` connections all take the TLS context and SASL
options from one ``BackendSecurity``: app.py builds one ``BackendClients`` and hands it down, so
no service passes security options by hand and none can connect without them.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from .brokerconn import BrokerConn
from .security import BackendSecurity


class BackendClients:
    """Makes backend clients with the backend's address and security: ``producer``, ``consumer``,
    ``admin`` (aiokafka) and ``broker`` (one raw pipelined connection)."""

    def __init__(self, bootstrap_servers: str, security: BackendSecurity | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security if security is not None else BackendSecurity()
        #: aiokafka's security keywords (security_protocol, ssl_context, sasl_*), computed once
        self.options: dict[str, Any] = self.security.aiokafka_options()

    def producer(self, **kwargs: Any) -> AIOKafkaProducer:
        return AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers, **kwargs, **self.options)

    def consumer(self, *topics: str, **kwargs: Any) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(*topics, bootstrap_servers=self.bootstrap_servers, **kwargs, **self.options)

    def admin(self, **kwargs: Any) -> AIOKafkaAdminClient:
        return AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers, **kwargs, **self.options)

    def broker(self, host: str, port: int, **kwargs: Any) -> BrokerConn:
        return BrokerConn(host, port, security=self.security, **kwargs)
