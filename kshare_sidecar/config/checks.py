"""Checks of the whole configuration that need more than one key (one line naming the key)."""

from __future__ import annotations

from typing import Any

from .load import ConfigError, ListenerSpec, SidecarConfig


def check_cluster_config(cfg: SidecarConfig, specs: list[ListenerSpec], persister: Any) -> None:
    """One line naming the key when a cluster of sidecars cannot work with this configuration."""
    name = cfg.cluster.name
    if persister.name != "topic":
        raise ConfigError(f"cluster.name = {name!r} needs persister = 'topic' (the sidecars share "
                          f"the state topic), got {cfg.plugins.persister!r}")
    if cfg.state.write_mode not in ("fenced", "transactional"):
        raise ConfigError(f"cluster.name = {name!r} needs state.write.mode = 'fenced' or 'transactional' "
                          f"(handover fences the previous owner's writer), got {cfg.state.write_mode!r}")
    for spec in specs:
        if not spec.advertised_port:
            raise ConfigError(f"cluster.name = {name!r} needs listeners with an explicit port (the other "
                              f"sidecars advertise it); listener {spec.name} binds port 0")
