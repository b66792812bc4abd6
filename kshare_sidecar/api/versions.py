"""ApiVersions (key 18, v0–v4): advertise exactly what the registry serves.

The answer is computed from the registry at request time, so APIs the lead registers later
(heartbeat, ShareFetch, admin) are advertised without touching this module. Versions the
registry does not serve never reach this handler: the dispatcher answers them with the v0
UNSUPPORTED_VERSION body (see ``wire.codec.api_versions_fallback``).
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
            "supported_features": [
                {"name": n, "min_version": lo, "max_version": hi} for n, lo, hi in self._supported
            ],
            "finalized_features_epoch": self._epoch,
            "finalized_features": [
                {"name": n, "min_version_level": lo, "max_version_level": hi}
                for n, lo, hi in self._finalized
            ],
        }


def register(registry: ApiRegistry, **features: Any) -> None:
    registry.register(API_KEY, MIN_VERSION, MAX_VERSION, ApiVersionsHandler(registry, **features))
