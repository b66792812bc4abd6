"""The sidecar's one typed configuration: file (TOML) < ``KSHARE_*`` environment < flags.

- :mod:`.settings` declares every key once (Kafka's names, defaults, bounds, docs);
- :mod:`.sections` holds the typed, frozen sections the code reads (``cfg.share.*``) and
  ``GroupConfig``;
- :mod:`.load` reads and checks the sources and returns a ``SidecarConfig``;
- :mod:`.doc` renders docs/configuration.md from the declarations.

This face hands on what :mod:`.load` offers, so ``from kshare_sidecar.config import SidecarConfig``
is the usual import.
"""

from .load import (
    BY_KEY,
    CLEARED_BY_EMPTY_ENV,
    DEFAULT_PROTOCOL_MAP,
    FOREIGN_GROUP_CONFIGS,
    GROUP_CONFIG_NAMES,
    GROUP_CONFIGS,
    KSHARE_GROUP_CONFIGS,
    PROTOCOLS,
    SASL_MECHANISMS,
    SETTINGS,
    ConfigError,
    ListenerSpec,
    Setting,
    SidecarConfig,
    env_name,
    group_config_setting,
    load_config,
    parse_listeners,
)

__all__ = [
    "BY_KEY", "CLEARED_BY_EMPTY_ENV", "DEFAULT_PROTOCOL_MAP", "FOREIGN_GROUP_CONFIGS", "GROUP_CONFIGS", "GROUP_CONFIG_NAMES",
    "KSHARE_GROUP_CONFIGS", "PROTOCOLS", "SASL_MECHANISMS", "SETTINGS", "ConfigError", "ListenerSpec", "Setting",
    "SidecarConfig", "env_name", "group_config_setting", "load_config", "parse_listeners",
]
