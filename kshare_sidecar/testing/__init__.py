"""The real-broker test harness: Apache Kafka from Maven Central jars, or a cluster you name.

Importable by anyone (``from kshare_sidecar.testing import KafkaBroker``) and registered as a
pytest plugin that provides the ``kafka_39``, ``kafka_4``, ``redpanda`` and ``tansu`` fixtures.
"""

from .cluster import Cluster, docker_engine_available, kafka_cluster, redpanda_cluster
from .errors import HarnessError
from .kafka import KAFKA_VERSIONS, KafkaBroker, resolve_version
from .tansu import TANSU_VERSION, TansuBroker

__all__ = [
    "KAFKA_VERSIONS",
    "Cluster",
    "HarnessError",
    "KafkaBroker",
    "TANSU_VERSION",
    "TansuBroker",
    "docker_engine_available",
    "kafka_cluster",
    "redpanda_cluster",
    "resolve_version",
]
