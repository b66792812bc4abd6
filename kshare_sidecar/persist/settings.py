"""The compacted-topic persister's settings: one typed object, built once from the sidecar's config.

:class:`TopicSettings` is what :class:`~kshare_sidecar.persist.topic.TopicPersister` is built from
(the sidecar: :meth:`TopicSettings.from_config`, from the ``state.*`` keys and the backend's
security; tools and tests: the constructor). A twin or a mover on the same topic is
``dataclasses.replace(settings, ...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from kshare_sidecar.backend.aiokafka_setup import bound
from kshare_sidecar.persist.placement import LAYOUT, PLACEMENTS
from kshare_sidecar.persist.topicsetup import DEFAULT_TOPIC_CONFIGS

if TYPE_CHECKING:
    from kshare_sidecar.backend.clients import BackendClients
    from kshare_sidecar.backend.connection_states import ClusterConnectionStates
    from kshare_sidecar.config import SidecarConfig

T = TypeVar("T")

DEFAULT_TOPIC = "__kshare_state"

#: ``fenced`` (the default): idempotent batches under a transactional id's producer epoch, fenced by
#: the partition leader (persist/writers/fenced.py); ``transactional``: a Kafka transaction per
#: write; ``idempotent``: plain idempotent produce, for backends without transactions
#: (docs/persistence.md).
WRITE_MODES = ("fenced", "transactional", "idempotent")

#: How often a ``fenced``-mode writer takes a new producer epoch and writes its owner record again,
#: so that neither the transactional id (``transactional.id.expiration.ms``, Kafka's default 7 days)
#: nor the producer state on the state partition (``producer.id.expiration.ms``, default 1 day)
#: expires while this sidecar owns it — an expired one would let a zombie's write land. The
#: sidecar's ``state.write.refresh.ms``; 0 turns it off for backends that expire neither and cannot
#: serve the conditional InitProducerId it sends (tansu 0.6.0's libSQL engine panics on it).
WRITER_REFRESH_S = 3600.0


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """Where the state topic is and how it is written.

    ``client_options``: extra keyword arguments for every aiokafka client (``security_protocol``,
    ``ssl_context``, ``sasl_mechanism``, ...). ``topic_configs``: overrides of
    :data:`DEFAULT_TOPIC_CONFIGS` used when creating the topic (a value of ``None`` drops a default,
    for backends that reject a setting). ``partitions`` only applies when creating the topic; an
    existing topic's count is used. ``placement``: ``topic-partition`` (every sidecar); ``key``
    emulates an older build's single sidecar, for the tests of persist/layout.py only.
    """

    bootstrap_servers: str
    topic: str = DEFAULT_TOPIC
    partitions: int = 4
    replication_factor: int = -1
    topic_configs: Mapping[str, str | None] = field(default_factory=dict)
    create_topic: bool = True
    transactional_id_prefix: str = "kshare-state"
    linger_ms: float = 5.0
    max_batch: int = 10_000
    client_options: Mapping[str, Any] = field(default_factory=dict)
    request_timeout_ms: int = 30_000
    transaction_timeout_ms: int = 60_000
    commit_timeout_s: float = 30.0
    recovery_timeout_s: float = 300.0
    write_mode: str = "fenced"
    writer_refresh_s: float = WRITER_REFRESH_S
    placement: str = LAYOUT
    #: the setup timeout of every backend connection (socket.connection.setup.timeout.ms; the
    #: sidecar's BackendClients'); None: aiokafka's own (its request timeout)
    connection_states: ClusterConnectionStates | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}")
        if self.write_mode not in WRITE_MODES:
            raise ValueError(f"write_mode must be one of {', '.join(WRITE_MODES)}, got {self.write_mode!r}")
        if self.partitions < 1:
            raise ValueError("partitions must be >= 1")
        if self.created_configs().get("cleanup.policy") != "compact":
            raise ValueError("the state topic must be created with cleanup.policy=compact")

    def created_configs(self) -> dict[str, str]:
        """The topic configs a created state topic gets: the defaults with ``topic_configs`` applied."""
        configs: dict[str, str] = dict(DEFAULT_TOPIC_CONFIGS)
        for k, v in self.topic_configs.items():
            if v is None:
                configs.pop(k, None)
            else:
                configs[k] = str(v)
        return configs

    def bound(self, client: T) -> T:
        """An aiokafka client of the persister, its connects bounded by ``connection_states``."""
        return bound(client, self.connection_states)

    def transactional_id(self, partition: int) -> str:
        """The transactional id of state partition ``partition``'s writer."""
        return f"{self.transactional_id_prefix}-{self.topic}-{partition}"

    @classmethod
    def from_config(cls, cfg: SidecarConfig, clients: BackendClients) -> TopicSettings:
        """The settings the sidecar's config gives the state topic: the ``state.*`` keys, and the
        backend's address and security as ``clients`` (backend/clients.py) applies them to every
        backend client."""
        state = cfg.state
        return cls(bootstrap_servers=clients.bootstrap_servers, topic=state.topic,
                   partitions=state.topic_partitions, replication_factor=state.topic_replication_factor,
                   linger_ms=float(state.write_linger_ms), transaction_timeout_ms=state.transaction_timeout_ms,
                   # past the transaction timeout a commit is settled by reading the state back
                   commit_timeout_s=min(30.0, state.transaction_timeout_ms / 1000),
                   write_mode=state.write_mode, writer_refresh_s=state.write_refresh_ms / 1000,
                   client_options=clients.options, connection_states=clients.connection_states)
