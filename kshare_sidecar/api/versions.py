"""ApiVersions (key 18, v0–v4): advertise exactly what the registry serves.

The answer is computed from the registry at request time, so APIs the lead registers later
(heartbeat, ShareFetch, admin) are advertised without touching this module. Versions the
registry does not serve never reach this handler: the dispatcher answers them with the v0
UNSUPPORTED_VERSION body (see ``wire.codec.api_versions_fallback``).

Features (v3+ tagged fields, what ``kafka-features.sh describe`` and ``Admin.describeFeatures``
read): the backend's, as its ApiVersions answer gave them when pass-through started (the
sidecar is one bootstrap for the whole cluster: a client deciding on ``transaction.version`` or
``group.version`` must see the backend's), with ``share.version`` replaced by the sidecar's own
-- it serves share groups whatever the backend finalized (:func:`sidecar_features`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from ..protocol.constants import ApiKey
from .context import RequestContext
from .registry import ApiRegistry

API_KEY = ApiKey.API_VERSIONS
MIN_VERSION, MAX_VERSION = 0, 4
#: the share groups the sidecar serves: KIP-932's feature at level 2, KIP-1191's dead-letter queues
#: included, as Kafka 4.4 finalizes it (level 1 is 4.2/4.3's share groups without them)
SHARE_VERSION = ("share.version", 0, 2)
SHARE_VERSION_FINALIZED = ("share.version", 2, 2)

Feature = tuple[str, int, int]


def sidecar_features(supported: Iterable[Feature] = (), finalized: Iterable[Feature] = (),
                     epoch: int = -1) -> dict[str, Any]:
    """The backend's features (``(name, min, max)``), ``share.version`` replaced by the sidecar's;
    keyword arguments for :class:`ApiVersionsHandler`. An unknown epoch (-1: no backend answer)
    becomes 0, so that clients record the finalized share.version."""
    name = SHARE_VERSION[0]
    return {"supported_features": [f for f in supported if f[0] != name] + [SHARE_VERSION],
            "finalized_features": [f for f in finalized if f[0] != name] + [SHARE_VERSION_FINALIZED],
            "finalized_features_epoch": max(epoch, 0)}


class ApiVersionsHandler:
    """``supported_features``/``finalized_features`` are ``(name, min, max)`` triples (v3+ tags)."""

    def __init__(
        self,
        registry: ApiRegistry,
        *,
        supported_features: Iterable[tuple[str, int, int]] = (),
        finalized_features: Iterable[tuple[str, int, int]] = (),
        finalized_features_epoch: int = -1,
    ) -> None:
        self._registry = registry
        self._supported = tuple(supported_features)
        self._finalized = tuple(finalized_features)
        self._epoch = finalized_features_epoch

    async def __call__(self, ctx: RequestContext, header: Any, request: Any) -> dict[str, Any]:
        # Canonical form; the dispatcher converts it to the negotiated version's classes.
        return {
            "error_code": ErrorCode.none,
            "api_keys": [
                {"api_key": key, "min_version": lo, "max_version": hi}
                for key, lo, hi in self._registry.ranges()
            ],
            "throttle_time": 0,
            # KIP-1022: below v4 a feature whose lowest version is 0 is left out (older clients
            # reject a 0 there), as a Kafka broker does
            "supported_features": [
                {"name": n, "min_version": lo, "max_version": hi} for n, lo, hi in self._supported
                if lo > 0 or ctx.api_version >= 4
            ],
            "finalized_features_epoch": self._epoch,
            "finalized_features": [
                {"name": n, "min_version_level": lo, "max_version_level": hi}
                for n, lo, hi in self._finalized
            ],
        }


def register(registry: ApiRegistry, **features: Any) -> None:
    """Serve ApiVersions; called again once the backend's features are known (replaces the entry)."""
    registry.register(API_KEY, MIN_VERSION, MAX_VERSION, ApiVersionsHandler(registry, **features), replace=True)
