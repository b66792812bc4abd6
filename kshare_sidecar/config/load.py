"""One typed configuration for the sidecar: file (TOML), environment, flags — in that order.

Keys use Kafka's names (``group.share.*`` broker-level defaults, ``share.*`` per-group
overrides) so operators recognise them. Every key is declared once in
`settings.SETTINGS`; a bad value is rejected with a message that names the key and the
allowed values. `load_config` validates and converts every value once and returns a frozen
`SidecarConfig` whose typed sections (`sections`) the code reads:
``cfg.share.record_lock_duration_ms``, ``cfg.backend.bootstrap_servers``.
"""

from __future__ import annotations

import os
import socket
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .sections import (
    AuthorizerSettings,
    BackendSettings,
    ClusterSettings,
    ConsoleSettings,
    DeadLetterSettings,
    ListenerSecuritySettings,
    ListenerSettings,
    PassthroughSettings,
    PluginSettings,
    QuotaSettings,
    ServerSettings,
    ShareGroupSettings,
    StateSettings,
    build_section,
)
from .settings import (
    BY_KEY,
    DEFAULT_PROTOCOL_MAP,
    FOREIGN_GROUP_CONFIGS,
    GROUP_BOUNDS,
    GROUP_CONFIG_NAMES,
    GROUP_CONFIGS,
    KSHARE_GROUP_CONFIGS,
    PROTOCOLS,
    SASL_MECHANISMS,
    SETTINGS,
    ConfigError,
    Setting,
    dlq_topic_problem,
    env_name,
    group_config_setting,
    parse_listeners,
)
from ..protocol.address import parse_host_port

__all__ = [
    "BY_KEY", "DEFAULT_PROTOCOL_MAP", "FOREIGN_GROUP_CONFIGS", "GROUP_CONFIGS", "GROUP_CONFIG_NAMES",
    "KSHARE_GROUP_CONFIGS", "PROTOCOLS", "SASL_MECHANISMS", "SETTINGS", "ConfigError", "ListenerSpec", "Setting",
    "SidecarConfig", "env_name", "group_config_setting", "load_config", "parse_listeners",
]


@dataclass(frozen=True)
class ListenerSpec:
    """One listener: its name, security protocol, bind address and the address clients are told."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int | None  # None: the bound port (listeners on port 0)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


@dataclass(frozen=True, repr=False)
class SidecarConfig:
    """Resolved, validated settings. Code reads the typed sections (``cfg.state.topic``);
    ``cfg["state.topic"]`` (by Kafka-style name) is kept for plugins, whose factories receive
    this object (docs/plugins/hooks.md), and for tools that go by the documented names."""

    #: Every setting by its Kafka-style name (read-only), as converted at load.
    values: Mapping[str, Any]
    #: Keys set by a file, the environment or the command line (not defaults): DescribeConfigs
    #: reports a group config backed by one of them as STATIC_BROKER_CONFIG, as Kafka does.
    explicit: frozenset[str]
    listener: ListenerSettings
    listener_security: ListenerSecuritySettings
    authorizer: AuthorizerSettings
    passthrough: PassthroughSettings
    server: ServerSettings
    plugins: PluginSettings
    cluster: ClusterSettings
    backend: BackendSettings
    state: StateSettings
    share: ShareGroupSettings
    deadletter: DeadLetterSettings
    quota: QuotaSettings
    console: ConsoleSettings
    #: The listeners to open (``listeners``, or one PLAINTEXT listener on ``listen``).
    specs: tuple[ListenerSpec, ...]
    #: The sidecar-wide defaults of every GROUP config (built once: read on every request).
    group_defaults: Mapping[str, Any] = field(compare=False)

    @classmethod
    def from_values(cls, values: Mapping[str, Any], explicit: Iterable[str] = ()) -> SidecarConfig:
        """Build from values already coerced by their `Setting`; raises ConfigError naming the key
        for what only the combination of settings can get wrong."""
        explicit_keys = frozenset(explicit)
        listener = build_section(ListenerSettings, values)
        listener_security = build_section(ListenerSecuritySettings, values)
        _check_listener_forms(listener, explicit_keys)
        group_defaults = {k: values[src] for k, src in GROUP_CONFIGS.items()}
        group_defaults |= {k: s.default for k, s in FOREIGN_GROUP_CONFIGS.items()}
        cfg = cls(values=MappingProxyType(dict(values)), explicit=explicit_keys, listener=listener,
                  listener_security=listener_security,
                  authorizer=build_section(AuthorizerSettings, values),
                  passthrough=build_section(PassthroughSettings, values),
                  server=build_section(ServerSettings, values),
                  plugins=build_section(PluginSettings, values),
                  cluster=build_section(ClusterSettings, values),
                  backend=build_section(BackendSettings, values),
                  state=build_section(StateSettings, values),
                  share=build_section(ShareGroupSettings, values),
                  deadletter=build_section(DeadLetterSettings, values),
                  quota=build_section(QuotaSettings, values),
                  console=build_section(ConsoleSettings, values),
                  specs=tuple(_listener_specs(listener, listener_security)),
                  group_defaults=MappingProxyType(group_defaults))
        _check_cross_settings(cfg)
        return cfg

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def __repr__(self) -> str:  # secrets never reach a log line through a repr
        shown = {k: ("<redacted>" if BY_KEY[k].secret and v else v) for k, v in self.values.items() if k in BY_KEY}
        return f"SidecarConfig({shown!r})"

    @property
    def advertised(self) -> tuple[str, int]:
        return parse_host_port(self.listener.advertised_listener or self.listener.listen, "advertised.listener")

    @property
    def sasl_mechanisms(self) -> tuple[str, ...]:
        return self.listener_security.mechanisms

    def listener_specs(self) -> list[ListenerSpec]:
        """The listeners to open (``listeners``, or one PLAINTEXT listener on ``listen``)."""
        return list(self.specs)

    def group_config(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A group's effective configs by GROUP config name: sidecar defaults with the group's overrides."""
        resolved = dict(self.group_defaults)
        if overrides:
            resolved.update(overrides)
        return resolved

    def validate_group_config(self, key: str, raw: Any, *, assignors: Iterable[str] | None = None) -> Any:
        """Check one per-group override against Kafka's bounds; raise ConfigError naming the key.

        ``assignors``: the registered assignor names, the allowed values of ``share.assignor``
        (they come from the plugins, which this module does not load; None = not checked)."""
        if key not in GROUP_CONFIG_NAMES:
            raise ConfigError(f"{key} is not a group config: allowed keys are {', '.join(GROUP_CONFIG_NAMES)}")
        setting = group_config_setting(key)
        if setting.kind is bool:  # Kafka's BOOLEAN: true or false, any case — not yes/1/on
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise ConfigError(f"{key} (from group config) = {raw!r}: expected true or false")
            return text == "true"
        low, high = setting.low, setting.high
        if key in GROUP_BOUNDS:  # bounds named by sidecar setting (a table of names) or constants
            low, high = (self.values[b] if isinstance(b, str) else b for b in GROUP_BOUNDS[key])
        choices = setting.choices
        if key == "share.assignor" and assignors is not None:
            choices = tuple(sorted(assignors))
        check = setting.check
        if key == "errors.deadletterqueue.topic.name":
            self._check_dlq_name(str(raw))
            check = None  # Kafka 4.4 refuses only internal names; the rest is checked at write time
        return Setting(key, None, setting.kind, setting.doc, low, high, choices, check).coerce(raw, "group config")

    def _check_dlq_name(self, name: str) -> None:
        """Kafka 4.4's one refusal (GroupConfig: a name starting with ``__``, its message), kshare's
        state topic, and with ``deadletter.strict.names`` a name that could never be written to."""
        key = "errors.deadletterqueue.topic.name"
        if name.startswith("__"):
            raise ConfigError(f"{key}: DLQ topic name must not start with '__'")
        if name and name == self.state.topic:
            raise ConfigError(f"{key} (from group config) = {name!r}: that is kshare's state topic")
        if name and self.deadletter.strict_names:
            prefix = self.deadletter.topic_name_prefix
            if problem := dlq_topic_problem(name):
                raise ConfigError(f"{key} (from group config) = {name!r}: {problem} (deadletter.strict.names)")
            if not name.startswith(prefix):
                raise ConfigError(f"{key} (from group config) = {name!r}: must start with {prefix!r} "
                                  "(errors.deadletterqueue.topic.name.prefix; deadletter.strict.names)")


#: Settings an empty ``KSHARE_*`` variable leaves unset: the image sets ``KSHARE_LISTEN`` (a container
#: must bind all interfaces), which a deployment using ``listeners`` clears with ``KSHARE_LISTEN=""``
#: — an environment variable set by an image cannot be removed, only overridden (compose/kafka39-cluster.yml).
CLEARED_BY_EMPTY_ENV = ("listen",)


def load_config(path: str | Path | None = None, *, env: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> SidecarConfig:
    """Resolve settings: defaults < TOML file < ``KSHARE_*`` environment < explicit overrides."""
    env = os.environ if env is None else env
    values = {s.key: s.default for s in SETTINGS}
    explicit: set[str] = set()
    sources: list[tuple[str, Mapping[str, Any]]] = []
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        sources.append((str(path), _flatten(data)))
    from_env = {s.key: env[env_name(s.key)] for s in SETTINGS if env_name(s.key) in env}
    for key in CLEARED_BY_EMPTY_ENV:
        if from_env.get(key) == "":
            del from_env[key]
    sources.append(("environment", from_env))
    sources.append(("command line", {k: v for k, v in (overrides or {}).items() if v is not None}))
    for source, mapping in sources:
        for key, raw in mapping.items():
            if key not in BY_KEY:
                near = [k for k in BY_KEY if k.split(".")[-1] == key.split(".")[-1]]
                hint = f" (did you mean {near[0]}?)" if near else ""
                raise ConfigError(f"unknown setting {key!r} in {source}{hint}")
            values[key] = BY_KEY[key].coerce(raw, source)
            explicit.add(key)
    for setting in SETTINGS:  # re-check defaults that have requirements (bootstrap.servers)
        setting.coerce(values[setting.key], "defaults" if values[setting.key] == setting.default else "config")
    return SidecarConfig.from_values(values, explicit)


def _check_listener_forms(listener: ListenerSettings, explicit: frozenset[str]) -> None:
    """``listeners`` (Kafka's form) or the one-listener ``listen``, not both."""
    if listener.listeners:
        for legacy in ("listen", "advertised.listener"):
            if legacy in explicit:
                raise ConfigError(f"set either listeners or {legacy}, not both ({legacy} is the one-listener "
                                  f"form; with listeners use advertised.listeners)")
    elif listener.advertised_listeners:
        raise ConfigError("advertised.listeners needs listeners (with listen, use advertised.listener)")


def _check_cross_settings(cfg: SidecarConfig) -> None:
    """Settings valid one by one but not together: one line naming both keys."""
    if cfg.share.min_record_lock_duration_ms > cfg.share.max_record_lock_duration_ms:
        raise ConfigError("group.share.min.record.lock.duration.ms must not exceed "
                          "group.share.max.record.lock.duration.ms")
    queued = cfg.listener.queued_max_request_bytes
    if queued != -1 and queued < cfg.listener.socket_request_max_bytes:
        raise ConfigError("queued.max.request.bytes must be -1 (no limit) or at least socket.request.max.bytes")
    if cfg.share.max_share_sessions < cfg.share.max_size:  # Kafka's broker refuses to start the same way
        raise ConfigError("group.share.max.share.sessions must be greater than or equal to group.share.max.size")
    dlq, prefix = cfg.deadletter.topic_name, cfg.deadletter.topic_name_prefix
    if dlq and not dlq.startswith(prefix):
        raise ConfigError(f"errors.deadletterqueue.topic.name = {dlq!r} must start with "
                          f"errors.deadletterqueue.topic.name.prefix = {prefix!r}")
    if cfg.share.release_backoff_max_ms < cfg.share.release_backoff_ms:
        raise ConfigError("share.release.backoff.max.ms must not be below share.release.backoff.ms")


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """TOML tables become dotted keys: [group.share] delivery.count.limit = 5."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= _flatten(value, full + ".")
        else:
            out[full] = value
    return out


def _listener_specs(listener: ListenerSettings, security: ListenerSecuritySettings) -> list[ListenerSpec]:
    declared: list[tuple[str, str, int]]
    advertised: dict[str, tuple[str, int]]
    if not listener.listeners:
        bind_host, bind_port = parse_host_port(listener.listen, "listen")  # both checked when loaded
        declared = [("PLAINTEXT", bind_host, bind_port)]
        advertised = {"PLAINTEXT": parse_host_port(listener.advertised_listener, "advertised.listener")
                      } if listener.advertised_listener else {}
    else:
        declared = parse_listeners(listener.listeners)
        advertised = {n: (h, p) for n, h, p in parse_listeners(listener.advertised_listeners)
                      } if listener.advertised_listeners else {}
    protocols: dict[str, str] = {}
    for part in listener.security_protocol_map.split(","):
        name, _, protocol = part.strip().partition(":")
        protocols[name.upper()] = protocol
    names = {n for n, _, _ in declared}
    for name in advertised:
        if name not in names:
            raise ConfigError(f"advertised.listeners names {name}, which is not in listeners "
                              f"({', '.join(sorted(names))})")
    specs: list[ListenerSpec] = []
    for name, host, port in declared:
        if name not in protocols:
            raise ConfigError(f"listeners: listener name {name} is not in listener.security.protocol.map "
                              f"(map it, e.g. {name}:SASL_SSL, or use a protocol name: {', '.join(PROTOCOLS)})")
        adv_host, adv_port = advertised.get(name, (host, port))
        # an empty host binds every interface and, as in Kafka, advertises this machine's name
        specs.append(ListenerSpec(name, protocols[name], host, port, adv_host or host or socket.getfqdn(),
                                  adv_port if name in advertised or port != 0 else None))
    if any(s.tls for s in specs) and not security.ssl_keystore_location:
        raise ConfigError("ssl.keystore.location is required for SSL and SASL_SSL listeners (a PEM file with the "
                          "server certificate chain and key)")
    if security.ssl_client_auth != "none" and not security.ssl_truststore_location:
        raise ConfigError(f"ssl.client.auth = {security.ssl_client_auth!r} needs ssl.truststore.location (a PEM "
                          f"file of the CAs that sign client certificates)")
    return specs
