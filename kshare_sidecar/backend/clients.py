"""Every connection the sidecar opens to the backend is made here, the backend's security applied
once (docs/security.md, "Towards the backend").

aiokafka producers, consumers and admin clients (the dead-letter writer, the cluster membership
and the state-topic tail) and raw ``BrokerConn`` connections (pass-through's pool, the ACL and
quota readers, delegation tokens, the delegate authenticator) all take the TLS context and SASL
options from one ``BackendSecurity``: app.py builds one ``BackendClients`` and hands it down, so
no service passes security options by hand and none can connect without them.

A few connections deliberately authenticate as someone else — a client's delegation token or
password (``passthrough.credentials = client``), credentials being checked for a client
(``sasl.authenticator = delegate``). They are made here too, with :meth:`BackendClients.broker_as`
and a security derived from this one, so the backend's TLS settings still come from one place and
every such connection is visible by its name.

Every connection made here — aiokafka's and ``BrokerConn`` — is set up within Kafka's connection
setup timeout (``socket.connection.setup.timeout.ms``, growing per consecutive failure to a broker up
to ``socket.connection.setup.timeout.max.ms``), from one :class:`ClusterConnectionStates` shared by
all of them (backend/connection_states.py; aiokafka's through backend/aiokafka_setup.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from ..protocol.address import parse_bootstrap
from .aiokafka_setup import bound
from .brokerconn import BrokerConn
from .connection_states import DEFAULT_SETUP_TIMEOUT_MAX_MS, DEFAULT_SETUP_TIMEOUT_MS, ClusterConnectionStates
from .security import BackendSecurity

if TYPE_CHECKING:
    from ..config import SidecarConfig

T = TypeVar("T")


class BackendClients:
    """Makes backend clients with the backend's address and security: ``producer``, ``consumer``,
    ``admin`` (aiokafka) and ``broker`` / ``bootstrap_brokers`` (raw pipelined connections)."""

    def __init__(self, bootstrap_servers: str, security: BackendSecurity | None = None, *,
                 setup_timeout_ms: int = DEFAULT_SETUP_TIMEOUT_MS,
                 setup_timeout_max_ms: int = DEFAULT_SETUP_TIMEOUT_MAX_MS) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.security = security if security is not None else BackendSecurity()
        #: aiokafka's security keywords (security_protocol, ssl_context, sasl_*), computed once
        self.options: dict[str, Any] = self.security.aiokafka_options()
        #: the setup timeout of every connection to the backend (socket.connection.setup.timeout[.max].ms)
        self.connection_states = ClusterConnectionStates(setup_timeout_ms, setup_timeout_max_ms)

    @classmethod
    def from_config(cls, cfg: SidecarConfig, security: BackendSecurity) -> BackendClients:
        """The sidecar's: the backend's address and the setup timeouts from ``cfg``."""
        b = cfg.backend
        return cls(b.bootstrap_servers, security, setup_timeout_ms=b.socket_connection_setup_timeout_ms,
                   setup_timeout_max_ms=b.socket_connection_setup_timeout_max_ms)

    def producer(self, **kwargs: Any) -> AIOKafkaProducer:
        return self.bound(AIOKafkaProducer(bootstrap_servers=self.bootstrap_servers, **kwargs, **self.options))

    def consumer(self, *topics: str, **kwargs: Any) -> AIOKafkaConsumer:
        return self.bound(AIOKafkaConsumer(*topics, bootstrap_servers=self.bootstrap_servers, **kwargs,
                                           **self.options))

    def admin(self, **kwargs: Any) -> AIOKafkaAdminClient:
        return self.bound(AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers, **kwargs, **self.options))

    def bound(self, client: T) -> T:
        """An aiokafka client made elsewhere (the ``Backend`` facade's, the persister's), its
        connects bounded by the same setup timeouts as these clients'."""
        return bound(client, self.connection_states)

    @property
    def bootstrap(self) -> list[tuple[str, int]]:
        """The bootstrap addresses, parsed."""
        return parse_bootstrap(self.bootstrap_servers)

    def broker(self, host: str, port: int, **kwargs: Any) -> BrokerConn:
        """One raw pipelined connection to a backend broker, as the sidecar (its own credentials)."""
        return BrokerConn(host, port, security=self.security, setup=self.connection_states, **kwargs)

    def bootstrap_brokers(self, **kwargs: Any) -> list[BrokerConn]:
        """One connection per bootstrap address, as the sidecar: for services that ask whichever
        broker answers (the ACL reader, the quota reader)."""
        return [self.broker(host, port, **kwargs) for host, port in self.bootstrap]

    def broker_as(self, security: BackendSecurity, host: str, port: int, **kwargs: Any) -> BrokerConn:
        """A connection with other credentials than the sidecar's (see the module docstring):
        ``security`` is this one's with the credentials replaced (``dataclasses.replace``)."""
        return BrokerConn(host, port, security=security, setup=self.connection_states, **kwargs)
