"""Which configs a share group runs with: the sidecar's defaults (``SidecarConfig.group_config``)
overlaid with the group's own, set through IncrementalAlterConfigs. The group's own are held by
its coordinator: this sidecar's, or, in a cluster of sidecars, another one's, read here from the
state topic (``cluster.state_tail.GroupConfigTail``).

One resolver is built in app.py and handed to every service that reads group configs (the
partition cache, the fetch path, dead letters, the admin service, the console), so none of them
reaches back into the Sidecar.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config.load import SidecarConfig
    from .coordinator import ShareGroupCoordinator


class GroupConfigs:
    """``resolver(group_id)``: the group's effective configs by Kafka's names (read through
    ``GroupConfig.of``); ``overrides(group_id)``: only what the group set itself."""

    def __init__(self, config: SidecarConfig, coordinator: ShareGroupCoordinator) -> None:
        self.config = config
        self.coordinator = coordinator
        #: a cluster of sidecars: the configs of groups another sidecar coordinates (a
        #: GroupConfigTail's ``configs``), set when the cluster membership starts
        self.remote: Mapping[str, Mapping[str, Any]] | None = None

    def overrides(self, group_id: str) -> Any:
        """A group's own configs: this sidecar's, or (a cluster of sidecars) the coordinator's."""
        group = self.coordinator.groups.get(group_id)
        if group is None and self.remote is not None:  # coordinated by another sidecar
            return self.remote.get(group_id)
        return group.configs if group is not None else None

    def __call__(self, group_id: str) -> dict[str, Any]:
        return self.config.group_config(self.overrides(group_id))
