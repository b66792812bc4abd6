"""The sidecar's settings as typed, frozen sections: ``cfg.share.record_lock_duration_ms``.

Why: the code reads attributes mypy can check (a misspelt setting is a type error, not a
KeyError at run time), and every value is converted once, at load, not with ``int(...)`` where
it is used. The key names, defaults, bounds and documentation stay in one place
(`settings.SETTINGS`): each field below names its key with `_key`, and
tests/unit/config/test_config_sections.py checks that every setting maps to exactly one field
and every field to one setting, of the setting's type.

A secret field is left out of its section's ``repr`` (as `SidecarConfig`'s own repr redacts it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .settings import BY_KEY, GROUP_CONFIGS

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

KEY = "kshare.key"  # field metadata: the setting's Kafka-style name


def _key(key: str) -> Any:
    """A section field backed by setting ``key`` (which must exist; secrets stay out of reprs)."""
    return field(metadata={KEY: key}, repr=not BY_KEY[key].secret)


@dataclass(frozen=True)
class ListenerSettings:
    """Where clients connect, and the per-connection limits of every listener."""

    listen: str = _key("listen")
    advertised_listener: str = _key("advertised.listener")
    listeners: str = _key("listeners")
    advertised_listeners: str = _key("advertised.listeners")
    security_protocol_map: str = _key("listener.security.protocol.map")
    socket_request_max_bytes: int = _key("socket.request.max.bytes")
    queued_max_request_bytes: int = _key("queued.max.request.bytes")
    connections_max_idle_ms: int = _key("connections.max.idle.ms")
    request_read_timeout_ms: int = _key("request.read.timeout.ms")
    max_connections: int = _key("max.connections")
    max_connections_per_ip: int = _key("max.connections.per.ip")
    max_connections_per_ip_overrides: str = _key("max.connections.per.ip.overrides")
    max_inflight_requests_per_connection: int = _key("max.inflight.requests.per.connection")


@dataclass(frozen=True)
class ListenerSecuritySettings:
    """The listeners' own TLS and SASL (Kafka's broker names; docs/security.md)."""

    ssl_keystore_location: str = _key("ssl.keystore.location")
    ssl_key_password: str = _key("ssl.key.password")
    ssl_truststore_location: str = _key("ssl.truststore.location")
    ssl_client_auth: str = _key("ssl.client.auth")
    sasl_enabled_mechanisms: str = _key("sasl.enabled.mechanisms")
    sasl_server_max_receive_size: int = _key("sasl.server.max.receive.size")
    connection_failed_authentication_delay_ms: int = _key("connection.failed.authentication.delay.ms")
    connections_max_reauth_ms: int = _key("connections.max.reauth.ms")
    sasl_authenticator: str = _key("sasl.authenticator")
    sasl_credentials_file: str = _key("sasl.credentials.file")

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """``sasl.enabled.mechanisms`` as names, in order, without repeats."""
        return tuple(dict.fromkeys(m.strip() for m in self.sasl_enabled_mechanisms.split(",") if m.strip()))


@dataclass(frozen=True)
class AuthorizerSettings:
    """Authorization against the backend's ACLs (docs/security.md, "Authorization")."""

    class_name: str = _key("authorizer.class.name")
    cache_ms: int = _key("authorizer.cache.ms")
    denial_recheck_ms: int = _key("authorizer.denial.recheck.ms")
    super_users: str = _key("super.users")
    allow_everyone_if_no_acl_found: bool = _key("allow.everyone.if.no.acl.found")
    allow_plaintext_anonymous: bool = _key("authorizer.allow.plaintext.anonymous")


@dataclass(frozen=True)
class PassthroughSettings:
    """Forwarding of the APIs the sidecar does not serve (docs/passthrough.md)."""

    enable: bool = _key("passthrough.enable")
    credentials: str = _key("passthrough.credentials")
    delegation_token_max_lifetime_ms: int = _key("passthrough.delegation.token.max.lifetime.ms")
    delegation_token_idle_ms: int = _key("passthrough.delegation.token.idle.ms")


@dataclass(frozen=True)
class QuotaSettings:
    """The backend's client quotas applied to ShareFetch (quota/client_quotas.py)."""

    enable: bool = _key("client.quota.enable")
    refresh_ms: int = _key("client.quota.refresh.ms")
    window_num: int = _key("quota.window.num")
    window_size_seconds: int = _key("quota.window.size.seconds")


@dataclass(frozen=True)
class ServerSettings:
    """The sidecar as clients see it, and its own switches."""

    node_id: int = _key("node.id")
    cluster_id: str = _key("cluster.id")
    metrics_port: int = _key("metrics.port")
    metrics_host: str = _key("metrics.host")
    read_ahead_enable: bool = _key("read.ahead.enable")
    partition_idle_eviction_ms: int = _key("share.partition.idle.eviction.ms")


@dataclass(frozen=True)
class ConsoleSettings:
    """The web console (kshare_sidecar/console, docs/console.md): '' listen = off."""

    listen: str = _key("console.listen")
    actions_enable: bool = _key("console.actions.enable")
    authentication: str = _key("console.authentication")
    ssl_enable: bool = _key("console.ssl.enable")
    ssl_client_auth: str = _key("console.ssl.client.auth")
    allow_remote_unauthenticated: bool = _key("console.allow.remote.unauthenticated")
    sample_interval_ms: int = _key("console.sample.interval.ms")
    redrive_max_records_per_second: int = _key("console.redrive.max.records.per.second")


@dataclass(frozen=True)
class PluginSettings:
    """Which plugins are loaded and which persister and default assignor they provide."""

    persister: str = _key("persister")
    assignor: str = _key("assignor")
    load: str = _key("plugins.load")
    disable: str = _key("plugins.disable")
    trace: bool = _key("plugins.trace")


@dataclass(frozen=True)
class ClusterSettings:
    """A cluster of sidecars (docs/deployment.md): '' name = a single sidecar."""

    name: str = _key("cluster.name")
    session_timeout_ms: int = _key("cluster.session.timeout.ms")
    heartbeat_interval_ms: int = _key("cluster.heartbeat.interval.ms")


@dataclass(frozen=True)
class BackendSettings:
    """The backend cluster and how the sidecar authenticates to it (Kafka's client names under
    ``backend.``; backend/security.py builds a BackendSecurity from this)."""

    bootstrap_servers: str = _key("bootstrap.servers")
    security_protocol: str = _key("backend.security.protocol")
    sasl_mechanism: str = _key("backend.sasl.mechanism")
    sasl_jaas_config: str = _key("backend.sasl.jaas.config")
    sasl_username: str = _key("backend.sasl.username")
    sasl_password: str = _key("backend.sasl.password")
    sasl_password_file: str = _key("backend.sasl.password.file")
    sasl_oauthbearer_token_file: str = _key("backend.sasl.oauthbearer.token.file")
    sasl_oauthbearer_token_endpoint_url: str = _key("backend.sasl.oauthbearer.token.endpoint.url")
    sasl_oauthbearer_client_id: str = _key("backend.sasl.oauthbearer.client.credentials.client.id")
    sasl_oauthbearer_client_secret: str = _key("backend.sasl.oauthbearer.client.credentials.client.secret")
    sasl_oauthbearer_client_secret_file: str = _key("backend.sasl.oauthbearer.client.credentials.client.secret.file")
    sasl_oauthbearer_scope: str = _key("backend.sasl.oauthbearer.scope")
    sasl_oauthbearer_token_command: str = _key("backend.sasl.oauthbearer.token.command")
    sasl_login_refresh_window_factor: float = _key("backend.sasl.login.refresh.window.factor")
    ssl_truststore_location: str = _key("backend.ssl.truststore.location")
    ssl_keystore_location: str = _key("backend.ssl.keystore.location")
    ssl_key_password: str = _key("backend.ssl.key.password")
    ssl_endpoint_identification_algorithm: str = _key("backend.ssl.endpoint.identification.algorithm")
    socket_connection_setup_timeout_ms: int = _key("socket.connection.setup.timeout.ms")
    socket_connection_setup_timeout_max_ms: int = _key("socket.connection.setup.timeout.max.ms")


@dataclass(frozen=True)
class StateSettings:
    """The state topic and its writers (docs/persistence.md)."""

    topic: str = _key("state.topic")
    topic_partitions: int = _key("state.topic.partitions")
    topic_replication_factor: int = _key("state.topic.replication.factor")
    write_linger_ms: int = _key("state.write.linger.ms")
    write_mode: str = _key("state.write.mode")
    write_refresh_ms: int = _key("state.write.refresh.ms")
    transaction_timeout_ms: int = _key("state.transaction.timeout.ms")


@dataclass(frozen=True)
class ShareGroupSettings:
    """Kafka's broker-level ``group.share.*`` settings and the sidecar-wide defaults of the
    per-group ``share.*`` configs (including kshare's own extensions, docs/extensions.md)."""

    delivery_count_limit: int = _key("group.share.delivery.count.limit")
    record_lock_duration_ms: int = _key("group.share.record.lock.duration.ms")
    min_record_lock_duration_ms: int = _key("group.share.min.record.lock.duration.ms")
    max_record_lock_duration_ms: int = _key("group.share.max.record.lock.duration.ms")
    partition_max_record_locks: int = _key("group.share.partition.max.record.locks")
    max_share_sessions: int = _key("group.share.max.share.sessions")
    max_share_sessions_per_connection: int = _key("share.sessions.max.per.connection")
    session_timeout_ms: int = _key("group.share.session.timeout.ms")
    heartbeat_interval_ms: int = _key("group.share.heartbeat.interval.ms")
    max_size: int = _key("group.share.max.size")
    assignment_interval_ms: int = _key("group.share.assignment.interval.ms")
    min_session_timeout_ms: int = _key("group.share.min.session.timeout.ms")
    max_session_timeout_ms: int = _key("group.share.max.session.timeout.ms")
    min_heartbeat_interval_ms: int = _key("group.share.min.heartbeat.interval.ms")
    max_heartbeat_interval_ms: int = _key("group.share.max.heartbeat.interval.ms")
    max_assignment_interval_ms: int = _key("group.share.max.assignment.interval.ms")
    max_delivery_count_limit: int = _key("group.share.max.delivery.count.limit")
    max_partition_max_record_locks: int = _key("group.share.max.partition.max.record.locks")
    renew_acknowledge_enable: bool = _key("group.share.renew.acknowledge.enable")
    auto_offset_reset: str = _key("share.auto.offset.reset")
    isolation_level: str = _key("share.isolation.level")
    release_backoff_ms: int = _key("share.release.backoff.ms")
    release_backoff_multiplier: float = _key("share.release.backoff.multiplier")
    release_backoff_max_ms: int = _key("share.release.backoff.max.ms")
    key_ordering: bool = _key("share.key.ordering")


@dataclass(frozen=True)
class DeadLetterSettings:
    """The dead-letter topic with KIP-1191's names (docs/extensions.md)."""

    topic_name: str = _key("errors.deadletterqueue.topic.name")
    copy_record_enable: bool = _key("errors.deadletterqueue.copy.record.enable")
    topic_name_prefix: str = _key("errors.deadletterqueue.topic.name.prefix")
    auto_create_topics_enable: bool = _key("errors.deadletterqueue.auto.create.topics.enable")
    enabled_topics: str = _key("deadletter.enabled.topics")
    hold_until_written: bool = _key("deadletter.hold.until.written")
    strict_names: bool = _key("deadletter.strict.names")

    def enabled_topic_set(self) -> frozenset[str]:
        """``deadletter.enabled.topics`` as a set of names."""
        return frozenset(n.strip() for n in self.enabled_topics.split(",") if n.strip())


#: The sections, by the attribute name `SidecarConfig` gives each.
SECTIONS: dict[str, type[DataclassInstance]] = {
    "listener": ListenerSettings, "listener_security": ListenerSecuritySettings, "authorizer": AuthorizerSettings,
    "passthrough": PassthroughSettings, "server": ServerSettings, "plugins": PluginSettings,
    "cluster": ClusterSettings, "backend": BackendSettings, "state": StateSettings, "share": ShareGroupSettings,
    "deadletter": DeadLetterSettings, "quota": QuotaSettings, "console": ConsoleSettings,
}

_T = TypeVar("_T", bound="DataclassInstance")


def build_section(cls: type[_T], values: Mapping[str, Any]) -> _T:
    """One section from resolved (already validated and converted) values by Kafka-style name."""
    return cls(**{f.name: values[f.metadata[KEY]] for f in dataclasses.fields(cls)})


def section_keys(cls: type[DataclassInstance]) -> dict[str, str]:
    """A section's field name → the setting key it is read from."""
    return {f.name: f.metadata[KEY] for f in dataclasses.fields(cls)}


def _group_key(name: str) -> Any:
    """A `GroupConfig` field backed by GROUP config ``name`` (see settings.GROUP_CONFIGS)."""
    return field(metadata={KEY: name})


#: GroupConfig.of's views by the configs they were built from (few distinct ones: the defaults and
#: each group's overrides); cleared when full rather than tracked per group
_VIEWS: dict[frozenset[tuple[str, type, Any]], GroupConfig] = {}
_MAX_VIEWS = 4096


@dataclass(frozen=True)
class GroupConfig:
    """One share group's effective configs (Kafka's GroupConfig), typed.

    Why a separate view: a group's configs travel by their GROUP config names (DescribeConfigs,
    IncrementalAlterConfigs, group records), so the services receive a mapping by name
    (``SidecarConfig.group_config``); this reads it once, converting each value, so the services
    use attributes. A name missing from the mapping (tests, embedders passing a partial one) takes
    the default of the sidecar setting behind it: kshare's extensions are then off."""

    auto_offset_reset: str = _group_key("share.auto.offset.reset")
    isolation_level: str = _group_key("share.isolation.level")
    record_lock_duration_ms: int = _group_key("share.record.lock.duration.ms")
    session_timeout_ms: int = _group_key("share.session.timeout.ms")
    heartbeat_interval_ms: int = _group_key("share.heartbeat.interval.ms")
    delivery_count_limit: int = _group_key("share.delivery.count.limit")
    partition_max_record_locks: int = _group_key("share.partition.max.record.locks")
    assignment_interval_ms: int = _group_key("share.assignment.interval.ms")
    renew_acknowledge_enable: bool = _group_key("share.renew.acknowledge.enable")
    assignor: str = _group_key("share.assignor")
    deadletter_topic_name: str = _group_key("errors.deadletterqueue.topic.name")
    deadletter_copy_record_enable: bool = _group_key("errors.deadletterqueue.copy.record.enable")
    release_backoff_ms: int = _group_key("share.release.backoff.ms")
    release_backoff_multiplier: float = _group_key("share.release.backoff.multiplier")
    release_backoff_max_ms: int = _group_key("share.release.backoff.max.ms")
    key_ordering: bool = _group_key("share.key.ordering")

    @classmethod
    def of(cls, configs: Mapping[str, Any] | None) -> GroupConfig:
        """The typed view of a group's configs by name (``None``: every default).

        Memoised by value: every ShareFetch reads its group's configs, and building the view
        field by field was a tenth of the fetch handler's time (the view is frozen, so one is shared)."""
        configs = configs or {}
        try:
            # the type too: 1 == True == 1.0, and a str-typed config would type them differently
            key: frozenset[tuple[str, type, Any]] | None = frozenset((k, type(v), v) for k, v in configs.items())
        except TypeError:  # an unhashable value: typed below, not memoised
            key = None
        view = _VIEWS.get(key) if key is not None else None
        if view is None:
            view = cls._build(configs)
            if key is not None:
                if len(_VIEWS) >= _MAX_VIEWS:
                    _VIEWS.clear()
                _VIEWS[key] = view
        return view

    @classmethod
    def _build(cls, configs: Mapping[str, Any]) -> GroupConfig:
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            name = f.metadata[KEY]
            setting = BY_KEY[GROUP_CONFIGS[name]]
            values[f.name] = setting.kind(configs[name]) if name in configs else setting.default
        return cls(**values)
