"""Request handlers and their registry: Kafka messages in, domain calls, Kafka messages out.

``build_registry(catalog)`` returns a registry serving the basic APIs (ApiVersions, Metadata,
FindCoordinator, and the Produce/Fetch entries librdkafka's gate needs); further APIs are added
with ``registry.register(...)``. ``Dispatcher(registry, node)`` is the wire-level frame handler.
See docs/wire.md.
"""

from __future__ import annotations

from typing import Any

from . import coordinator, gate, metadata, sasl, versions
from .catalog import InMemoryTopicCatalog, TopicCatalog
from .context import ConnectionHandle, KafkaError, NodeIdentity, RequestContext
from .convert import ConversionError, convert, convert_to_version, target_class
from .registry import ApiEntry, ApiRegistry, Dispatcher, ErrorResponder, Handler, generic_error_response


def build_registry(catalog: TopicCatalog, **api_versions_features: Any) -> ApiRegistry:
    """A registry with ApiVersions, Metadata, FindCoordinator, the Produce/Fetch gate entries and
    SaslHandshake/SaslAuthenticate (their post-authentication answers, see :mod:`.sasl`).

    Keyword arguments go to :class:`versions.ApiVersionsHandler` (supported/finalized features).
    """
    registry = ApiRegistry()
    versions.register(registry, **(api_versions_features or versions.sidecar_features()))
    metadata.register(registry, catalog)
    coordinator.register(registry)
    gate.register(registry)
    sasl.register(registry)
    return registry


__all__ = [
    "ApiEntry",
    "ApiRegistry",
    "ConnectionHandle",
    "ConversionError",
    "Dispatcher",
    "ErrorResponder",
    "Handler",
    "InMemoryTopicCatalog",
    "KafkaError",
    "NodeIdentity",
    "RequestContext",
    "TopicCatalog",
    "build_registry",
    "convert",
    "convert_to_version",
    "generic_error_response",
    "target_class",
]
