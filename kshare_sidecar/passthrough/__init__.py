"""Pass-through: the sidecar is a drop-in bootstrap for the whole cluster.

The sidecar serves the share-group APIs itself; every other API the backend supports is
forwarded (:class:`Forwarder`), and a few are served by both — the sidecar's part merged with the
backend's (:mod:`.mixed`: ListGroups, DeleteGroups, Describe/IncrementalAlterConfigs, Metadata,
FindCoordinator, DescribeCluster, DescribeTopicPartitions). :func:`install` wires it into a
registry once the backend's API versions are known. docs/architecture.md, "Pass-through".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..api.registry import ApiRegistry, kio_knows
from . import routes
from .forwarder import Forwarder
from .pool import BackendPool, BackendUnavailable, Upstream
from .reserved import Reserved

log = logging.getLogger("kshare.forward")


def kio_range(api_key: int, lo: int, hi: int) -> tuple[int, int] | None:
    """The longest run of versions from ``hi`` down within ``lo..hi`` that kio can encode."""
    top = None
    for version in range(hi, lo - 1, -1):
        if not kio_knows(api_key, version):  # kio's index: no schema module imported
            if top is not None:
                return version + 1, top
            continue
        if top is None:
            top = version
    return (lo, top) if top is not None else None


def forwardable(backend_versions: dict[int, tuple[int, int]], local: set[int]) -> dict[int, tuple[int, int]]:
    """API key → the version range to forward: what the backend speaks, clamped to what kio
    (needed to split, merge and answer errors) knows; never the sidecar's own APIs."""
    out: dict[int, tuple[int, int]] = {}
    for api_key, (lo, hi) in sorted(backend_versions.items()):
        if api_key in local or api_key in routes.INTERNAL or api_key in routes.LOCAL_ONLY:
            continue
        hi = min(hi, routes.CLAMP_MAX.get(api_key, hi))
        found = kio_range(api_key, lo, hi)
        if found is not None:
            out[api_key] = found
    return out


def install(registry: ApiRegistry, pool: BackendPool, *, replaceable: set[int],
            reserved: Reserved | None = None, node: Callable[[Any], Any] | None = None) -> Forwarder:
    """Register a raw forwarding entry for every forwardable API.

    ``replaceable``: keys registered as placeholders (the Produce/Fetch gate, the backend-facade
    ListOffsets) that forwarding supersedes. Local ranges of mixed APIs are clamped to what the
    backend speaks, so the sidecar never advertises a version it cannot forward. ``node(conn)``:
    the sidecar's identity on that client connection's listener, named in forwarded leader hints
    instead of a backend broker.
    """
    forwarder = Forwarder(pool, reserved, node)
    local = {e.api_key for e in registry} - replaceable
    for api_key, (lo, hi) in forwardable(pool.versions, local).items():
        registry.register(api_key, lo, hi, forwarder, raw=True, replace=True)
    for api_key in replaceable - set(pool.versions):
        registry.unregister(api_key)  # the backend lacks it: do not advertise a placeholder
    log.info("forwarding %d APIs to the backend", sum(1 for e in registry if e.raw))
    return forwarder


__all__ = ["BackendPool", "BackendUnavailable", "Forwarder", "Reserved", "Upstream", "forwardable", "install",
           "kio_range"]
