"""The sidecar assembled: plugins, persister recovery, backend, services, API handlers, listeners.

Why here, at the top of the package: this is the one module that knows every layer. The
services (group/, share/, cluster/) are built from the typed config and handed to the API
handlers (api/), which go into a registry behind one Dispatcher per listener (wire/) — so no
service imports api/ or wire/, and the data flow ``wire → api → group → share → cluster →
share/engine, backend/persist`` has no way back up (docs/architecture.md).

Start order matters: the persister recovers before the listener accepts, so no client sees
half-loaded state; stop order is the reverse, and state writes in flight are awaited.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Any

from . import plugins
from .api import ApiRegistry, Dispatcher, NodeIdentity, build_registry
from .api import admin as admin_api
from .api import configs as configs_api
from .api import coordinator as coordinator_api
from .api import heartbeat as heartbeat_api
from .api import metadata as metadata_api
from .api import shares as shares_api
from .api import versions as versions_api
from .api.sasl import ListenerHandler
from .auth.authorizer import AuthorizerError, BackendAuthorizer, backend_authorizer
from .protocol.constants import SCRAM_MECHANISMS
from .quota.client_quotas import ClientQuotas, client_quotas
from .auth.tls import server_ssl_context
from .cluster.lease import single_lease
from .cluster.view import ClusterView
from .config import ConfigError, ListenerSpec, SidecarConfig
from .config.checks import check_cluster_config
from .default_plugins.persisters import persister_options
from .group.assign import assign_with
from .group.configs import GroupConfigs
from .group.coordinator import ShareGroupCoordinator
from .backend.backend import Backend
from .backend.catalog import BackendCatalog
from .backend.compat import BackendProfile, check_backend
from .backend.clients import BackendClients
from .backend.security import BackendSecurity
from .backend.topic_ids import PersisterTopicIds
from .group.admin import AdminService
from .share.dead_letter import DeadLetterService, DeadLetterWriter
from .share.dead_letter_topics import DeadLetterTopics
from .group.service import GroupService
from .share.cache import SharePartitionCache
from .share.manager import SharePartitionManager
from .share.engine.sessions import ShareSessionCache
from .protocol.address import parse_count_overrides
from .wire.limits import RequestMemoryPool
from .timeutil import Clock
from .wire.server import Listener

log = logging.getLogger("kshare.sidecar")

#: how long a stopping sidecar waits for the requests in flight to be answered before it closes
#: its connections (ShareFetches answer at once then; a pass-through long poll may take this long)
_SETTLE_S = 1.0


class Sidecar:
    """One kshare sidecar. ``await start()``, then ``await stop()``; ``port`` is the bound port."""

    # Built by start(), in this order; stop() closes whichever were built.
    security: BackendSecurity
    clients: BackendClients
    authenticator: Any
    authorizer: BackendAuthorizer | None
    quotas: ClientQuotas | None
    persister: Any
    backend: Backend
    backend_profile: BackendProfile
    coordinator: ShareGroupCoordinator
    group_config: GroupConfigs
    partitions: SharePartitionCache
    deadletter: DeadLetterService
    groups: GroupService
    shares: SharePartitionManager
    admin: AdminService
    node: NodeIdentity
    dispatcher: Dispatcher
    metrics: Any  # metrics.MetricsServer when metrics.port is set
    console: Any  # console.server.Console when console.listen is set

    def __init__(self, config: SidecarConfig, *, persister: Any = None, clock: Clock | None = None) -> None:
        self.config = config
        #: the one clock every service reads (monotonic for deadlines, wall for what is persisted)
        self.clock = clock if clock is not None else Clock()
        self._persister = persister
        self.listener: Listener | None = None  # the first of `listeners`
        self.listeners: list[Listener] = []
        self._memory_pool: RequestMemoryPool | None = None
        self._dispatchers: list[Dispatcher] = []
        self._specs: list[ListenerSpec] = []  # of the listeners opened, in step with _dispatchers
        self._tasks: list[asyncio.Task[Any]] = []
        self.cluster_view: ClusterView | None = None
        self.group_configs: Any = None  # cluster.GroupConfigTail: groups another sidecar coordinates

    @property
    def port(self) -> int:
        assert self.listener is not None
        return self.listener.port

    async def start(self) -> None:
        cfg = self.config
        plugins.load_configured(cfg.plugins)
        self.security = BackendSecurity.from_config(cfg)
        self.clients = BackendClients.from_config(cfg, self.security)  # every backend client
        specs = cfg.listener_specs()
        tls = self._listener_security(specs)
        # Too old for kshare or for the state write mode: one line, before anything else starts
        self.backend_profile = await check_backend(
            cfg.backend.bootstrap_servers, self.security, refresh=cfg.state.write_refresh_ms > 0,
            write_mode=cfg.state.write_mode if cfg.plugins.persister == "topic" else None,
            setup=self.clients.connection_states)
        start = getattr(getattr(self, "authenticator", None), "start", None)
        if start is not None:  # e.g. delegate: the backend offers the mechanisms it relays
            await start(cfg.listener_security.mechanisms)
        await self._start_authorizer()
        self.quotas = client_quotas(cfg, self.clients)
        if self.quotas is not None:  # a backend that cannot answer yet: logged, read again later
            await self.quotas.start()
        await self._start_state(specs)
        hidden = {cfg.state.topic}
        self.backend = Backend(cfg.backend.bootstrap_servers, topic_id_store=PersisterTopicIds(self.persister),
                               internal_topics=hidden, client_options=self.clients.options,
                               security=self.security, connection_states=self.clients.connection_states)
        await self.backend.start()
        restored = self._build_services()
        if not cfg.cluster.name:  # a single sidecar's lease: its backend answering (cluster/lease.py)
            self.backend.lease = self.partitions.lease = single_lease(cfg)
            # the state writers' connections stall with the rest
            self.backend.lease_droppers.append(self.persister.drop_connections)
        first = specs[0]
        self.node = NodeIdentity(node_id=cfg.server.node_id, host=first.advertised_host,
                                 port=first.advertised_port or 0, cluster_id=cfg.server.cluster_id)
        registry = self._build_registry(specs, hidden)
        if cfg.passthrough.enable:
            await self._install_passthrough(registry, hidden)
        else:
            from .passthrough.native import refuse_marking
            refuse_marking(registry)  # nothing can be passed to the backend (docs/migration.md)
        if self.cluster_view is not None:
            await self._join_cluster(registry, hidden, specs)
        for spec in specs:
            await self._open_listener(spec, registry, tls)
        self.listener, self.dispatcher = self.listeners[0], self._dispatchers[0]
        self.node = self.dispatcher.node
        self._tasks.append(asyncio.create_task(self._expire_members(), name="kshare-member-expiry"))
        if cfg.server.metrics_port > 0:  # Prometheus /metrics
            from .metrics import MetricsServer
            self.metrics = MetricsServer(self, cfg.server.metrics_port, cfg.server.metrics_host or specs[0].host)
            self.metrics.start()
        if cfg.console.listen:  # the web console (docs/console.md)
            await self._start_console()
        log.info("kshare sidecar serving share groups on %s for backend %s (%d groups restored)",
                 ", ".join(f"{spec.name}://{d.node.host}:{d.node.port}" for spec, d in zip(specs, self._dispatchers)),
                 cfg.backend.bootstrap_servers, restored)

    async def _start_console(self) -> None:
        try:
            from .console.server import Console
        except ImportError as exc:  # aiohttp is the `console` extra
            raise ConfigError(f"console.listen is set but the console cannot load ({exc}): install "
                              f"kshare-sidecar[console]") from None
        from .console.model import Services

        services = Services(coordinator=self.coordinator, partitions=self.partitions, admin=self.admin,
                            node_id=self.config.server.node_id, cluster_view=self.cluster_view,
                            group_config=self.group_config)
        self.console = Console(self.config, services, authenticator=getattr(self, "authenticator", None),
                               authorizer=self.authorizer, backend=self.backend,
                               client_options=self.clients.options)
        await self.console.start()

    def _listener_security(self, specs: list[ListenerSpec]) -> dict[str, Any]:
        """TLS contexts by protocol and the SASL authenticator, checked before anything starts."""
        cfg = self.config
        tls = {"SSL": server_ssl_context(cfg) if any(spec.protocol == "SSL" for spec in specs) else None,
               "SASL_SSL": server_ssl_context(cfg, sasl=True) if any(spec.protocol == "SASL_SSL" for spec in specs)
               else None}
        sec = cfg.listener_security
        if any(spec.sasl for spec in specs):
            self.authenticator = plugins.get_authenticator(sec.sasl_authenticator, config=cfg,
                                                           backend_security=self.security, backend_clients=self.clients)
            missing = [m for m in sec.mechanisms if m not in self.authenticator.mechanisms]
            if missing:
                raise ConfigError(f"sasl.enabled.mechanisms = {sec.sasl_enabled_mechanisms!r}: the "
                                  f"{sec.sasl_authenticator} authenticator does not serve {', '.join(missing)} "
                                  f"(allowed values: {', '.join(sorted(self.authenticator.mechanisms))})")
        if cfg.passthrough.credentials == "client" and not self.security.sasl:
            raise ConfigError(f"passthrough.credentials = 'client' needs a SASL backend (a PLAIN client's password "
                              f"is replayed, any other client's upstream authenticates with a delegation token of its "
                              f"principal over SCRAM): backend.security.protocol is {self.security.protocol}, allowed "
                              f"values SASL_PLAINTEXT, SASL_SSL")
        return tls

    @property
    def _backend_operations(self) -> bool:
        """Forwarded requests run as the sidecar's principal: the backend's authorized operations
        (computed for it) are the clients' (api.metadata.operations_source)."""
        return self.config.passthrough.credentials != "client"

    def _request_memory_pool(self) -> RequestMemoryPool | None:
        """queued.max.request.bytes: one pool for every listener (None: no limit, Kafka's default)."""
        limit = self.config.listener.queued_max_request_bytes
        if limit <= 0:
            return None
        if self._memory_pool is None:
            self._memory_pool = RequestMemoryPool(limit)
        return self._memory_pool

    def _replays_plain(self) -> bool:
        """passthrough.credentials = client: a PLAIN client's password can be replayed to the backend."""
        return (self.config.passthrough.credentials == "client"
                and self.security.mechanism in ("PLAIN", *SCRAM_MECHANISMS))

    def _needs_tokens(self, specs: list[ListenerSpec]) -> bool:
        """passthrough.credentials = client and a listener can authenticate a client whose password
        the sidecar does not get (SCRAM, a client certificate; PLAIN if it cannot be replayed)."""
        cfg, sec = self.config, self.config.listener_security
        if cfg.passthrough.credentials != "client":
            return False
        certificates = sec.ssl_client_auth != "none" and any(spec.protocol == "SSL" for spec in specs)
        sasl = any(spec.sasl for spec in specs)
        scram = sasl and any(m != "PLAIN" for m in sec.mechanisms)
        return certificates or scram or (sasl and not self._replays_plain())

    async def _start_authorizer(self) -> None:
        self.authorizer = backend_authorizer(self.config, self.clients)
        if self.authorizer is None:
            return
        try:  # no backend authorizer: one clear line, before anything else starts
            await self.authorizer.start()
        except AuthorizerError as exc:
            await self.authorizer.close()
            self.authorizer = None
            raise ConfigError(str(exc)) from None
        log.info("authorization: the backend's ACLs (cache %d ms, super.users %s)", self.config.authorizer.cache_ms,
                 ", ".join(sorted(self.authorizer.super_users)) or "none")

    async def _start_state(self, specs: list[ListenerSpec]) -> None:
        """The persister, recovered (and, in a cluster of sidecars, owning only what it is assigned)."""
        cfg = self.config
        self.persister = self._persister or plugins.get_persister(cfg.plugins.persister,
                                                                  **persister_options(cfg, self.clients))
        if cfg.cluster.name:  # a cluster of sidecars: own only what the group assigns
            check_cluster_config(cfg, specs, self.persister)
            self.persister.enable_cluster(cfg.server.node_id)
        await self.persister.start()
        log.info("share state recovered from persister %r: %s", cfg.plugins.persister, self.persister.recovery_stats)
        self.persister.superseded_listeners.append(self._on_superseded)  # fencing

    def _build_services(self) -> int:
        """The coordinator and the services over it; returns how many groups were restored."""
        cfg = self.config
        assignors = _load_assignors(cfg.plugins.assignor)
        self.coordinator = ShareGroupCoordinator(
            assign=assignors[cfg.plugins.assignor], assignors=assignors, default_assignor=cfg.plugins.assignor,
            clock=self.clock.monotonic_ms, max_size=cfg.share.max_size, session_timeout_ms=cfg.share.session_timeout_ms,
            heartbeat_interval_ms=cfg.share.heartbeat_interval_ms,
            assignment_interval_ms=cfg.share.assignment_interval_ms)
        self.group_config = GroupConfigs(cfg, self.coordinator)  # every service reads group configs here
        self.partitions = SharePartitionCache(persister=self.persister, backend=self.backend,
                                                clock=self.clock.monotonic_ms, wall=self.clock.wall_ms,
                                                group_config=self.group_config,
                                                idle_eviction_ms=cfg.server.partition_idle_eviction_ms)
        self.partitions.start()
        self.dlq_topics = DeadLetterTopics(cfg.deadletter.enabled_topic_set())
        self.deadletter = DeadLetterService(partitions=self.partitions, group_config=self.group_config,
                                            hold_until_written=cfg.deadletter.hold_until_written,
                                            writer=DeadLetterWriter(
                                                self.backend, clients=self.clients,
                                                auto_create=cfg.deadletter.auto_create_topics_enable,
                                                prefix=cfg.deadletter.topic_name_prefix, topics=self.dlq_topics))
        self.partitions.on_change = self.deadletter.kick  # dead-letter holds are drained (docs/extensions.md)
        self.groups = GroupService(coordinator=self.coordinator, partitions=self.partitions, backend=self.backend,
                                   persister=self.persister)
        restored = self.groups.restore()
        self.shares = SharePartitionManager(sessions=ShareSessionCache(cfg.share.max_share_sessions,
                                                             cfg.share.max_share_sessions_per_connection),
                                   partitions=self.partitions, backend=self.backend, group_config=self.group_config,
                                   read_ahead=cfg.server.read_ahead_enable, clock=self.clock.monotonic_ms)
        self.admin = AdminService(config=cfg, coordinator=self.coordinator, groups=self.groups,
                                  partitions=self.partitions, persister=self.persister, backend=self.backend)
        return restored

    def _build_registry(self, specs: list[ListenerSpec], hidden: set[str]) -> ApiRegistry:
        """Every API the sidecar serves itself, bound to the services."""
        registry = build_registry(BackendCatalog(self.backend, hidden))
        if self.config.cluster.name:
            self.cluster_view = ClusterView(self.config.server.node_id,
                                            {spec.name: (spec.advertised_host, spec.advertised_port or 0)
                                             for spec in specs}, self.persister.partitions)
        heartbeat_api.register(registry, self.groups)
        shares_api.register(registry, self.shares, cluster=self.cluster_view, quotas=self.quotas)
        admin_api.register(registry, self.admin, self.backend)
        configs_api.register(registry, self.admin)
        return registry

    def node_for(self, conn: Any) -> NodeIdentity:
        """The sidecar as a client connection's listener advertises it (leader hints in forwarded
        answers must name the address the client can reach with its security settings)."""
        listener = getattr(conn, "listener", None)
        for spec, dispatcher in zip(self._specs, self._dispatchers):
            if spec.name == listener:
                return dispatcher.node
        return self.node

    async def _open_listener(self, spec: ListenerSpec, registry: ApiRegistry, tls: dict[str, Any]) -> None:
        """One listener with its own dispatcher: Metadata and FindCoordinator name the address of
        the listener the client is connected on (Kafka's rule), all with the same node id."""
        cfg = self.config
        limits, sec = cfg.listener, cfg.listener_security
        node = NodeIdentity(node_id=cfg.server.node_id, host=spec.advertised_host, port=spec.advertised_port or 0,
                            cluster_id=cfg.server.cluster_id)
        dispatcher = Dispatcher(registry, node, authorizer=getattr(self, "authorizer", None))
        handler = ListenerHandler(dispatcher, listener=spec.name, mechanisms=sec.mechanisms,
                                  authenticator=getattr(self, "authenticator", None), sasl=spec.sasl,
                                  failure_delay_s=sec.connection_failed_authentication_delay_ms / 1000,
                                  reauth_ms=sec.connections_max_reauth_ms,
                                  keep_plain_credentials=self._replays_plain())
        listener = Listener(handler, spec.host, spec.port, max_frame_bytes=limits.socket_request_max_bytes,
                            max_inflight=limits.max_inflight_requests_per_connection,
                            idle_timeout_s=limits.connections_max_idle_ms / 1000,
                            read_timeout_s=limits.request_read_timeout_ms / 1000,
                            max_connections=limits.max_connections,
                            max_connections_per_ip=limits.max_connections_per_ip,
                            max_connections_per_ip_overrides=parse_count_overrides(
                                limits.max_connections_per_ip_overrides),
                            name=spec.name, security_protocol=spec.protocol,
                            ssl_context=tls.get(spec.protocol),
                            initial_max_frame_bytes=sec.sasl_server_max_receive_size if spec.sasl else None,
                            memory_pool=self._request_memory_pool())
        await listener.start()
        self.listeners.append(listener)
        self._dispatchers.append(dispatcher)
        self._specs.append(spec)
        if spec.advertised_port is None:  # bound to port 0: advertise the port it got
            dispatcher.node = dataclasses.replace(node, port=listener.port)

    async def _install_passthrough(self, registry: ApiRegistry, hidden: set[str]) -> None:
        """Every API the sidecar does not serve goes to the backend (docs/passthrough.md)."""
        from .passthrough import BackendPool, Reserved, install, mixed, native

        self.pool = BackendPool(self.clients)
        await self.pool.start()
        versions_api.register(registry, **versions_api.sidecar_features(
            self.pool.supported_features, self.pool.finalized_features, self.pool.finalized_features_epoch))
        metadata_api.register(registry, BackendCatalog(self.backend, hidden), backend=self.pool,
                              backend_operations=self._backend_operations)
        coordinator_api.register(registry, check=self.pool.check_coordinator)
        txn_prefix = self.persister.transactional_id_prefix
        reserved = Reserved(frozenset(hidden), (f"{txn_prefix}-",), await self.pool.topic_ids(hidden))
        self.forwarder = install(registry, self.pool, replaceable={0, 1, 2}, reserved=reserved,
                                 node=self.node_for)
        self.forwarder.client_credentials = self.config.passthrough.credentials == "client"
        self.forwarder.topics_deleted = self._topics_deleted
        if self._needs_tokens(self._specs or self.config.listener_specs()):
            await self._start_tokens()
        # share groups the backend serves natively, passed through per group (docs/migration.md)
        self.native_groups = native.NativeGroups(self.group_config.overrides)
        mixed.register(registry, self.pool, is_share_group=lambda g: g in self.coordinator.groups and not
                       self.native_groups(g), node_id=lambda: self.node.node_id, hidden=hidden,
                       backend_operations=self._backend_operations, native=self.native_groups)
        native.install(registry, self.native_groups, self.forwarder, self.pool, self.admin)
        await self._install_dlq_opt_in(registry)

    async def _install_dlq_opt_in(self, registry: ApiRegistry) -> None:
        """KIP-1191's topic opt-in kept by kshare on a backend that cannot hold it (passthrough/dlqoptin.py)."""
        from .passthrough import dlqoptin

        await dlqoptin.probe(self.pool, self.config.state.topic, self.dlq_topics)
        for api_key, wrap in ((19, dlqoptin.create_topics), (44, dlqoptin.alter_configs),
                              (32, dlqoptin.describe_configs)):
            entry = registry.get(api_key)
            if entry is not None:
                registry.register(api_key, entry.min_version, entry.max_version,
                                  wrap(entry.handler, self.dlq_topics),
                                  error_response=entry.error_response, raw=entry.raw, replace=True)

    async def _topics_deleted(self, names: list[str], ids: list[uuid.UUID]) -> None:
        for name in names:
            self.dlq_topics.forget(name)
        await self.backend.forget_deleted(names, ids)

    async def _start_tokens(self) -> None:
        """Delegation tokens owned by clients' principals (passthrough/tokens.py), checked once now."""
        from .passthrough.tokens import DelegationTokens, DelegationTokenError

        cfg = self.config.passthrough
        mechanism = self.security.mechanism if self.security.mechanism in SCRAM_MECHANISMS else "SCRAM-SHA-512"
        self.tokens = DelegationTokens(self.pool, mechanism=mechanism,
                                       max_lifetime_ms=cfg.delegation_token_max_lifetime_ms,
                                       idle_ms=cfg.delegation_token_idle_ms)
        try:
            await self.tokens.start()
        except DelegationTokenError as exc:
            raise ConfigError(f"passthrough.credentials = 'client' needs delegation tokens at the backend for "
                              f"clients without a replayable password: {exc}") from None
        self.forwarder.tokens = self.tokens
        renewer = ":".join(self.tokens.renewer or ("?", "?"))
        log.info("pass-through as the client's principal: delegation tokens over %s, made by %s", mechanism, renewer)

    async def _join_cluster(self, registry: ApiRegistry, hidden: set[str], specs: list[ListenerSpec]) -> None:
        """Route by ownership (Metadata leaders, FindCoordinator) and join the sidecars' group;
        the listener opens once the first assignment is taken over (or after a bounded wait)."""
        from .cluster.membership import ClusterMembership, GroupConfigTail, PeerConfigs
        from .cluster.peers import reset_clients

        cfg, view = self.config, self.cluster_view
        assert view is not None  # built with the registry when cluster.name is set
        pool = getattr(self, "pool", None)
        metadata_api.register(registry, BackendCatalog(self.backend, hidden), backend=pool, cluster=view,
                              backend_operations=self._backend_operations)
        coordinator_api.register(registry, check=pool.check_coordinator if pool is not None else None, cluster=view)
        self.group_configs = GroupConfigTail(clients=self.clients, topic=self.persister.topic,
                                             partitions=self.persister.partitions)
        self.membership = ClusterMembership(
            name=cfg.cluster.name, persister=self.persister, view=view,
            clients=self.clients, session_timeout_ms=cfg.cluster.session_timeout_ms,
            heartbeat_interval_ms=cfg.cluster.heartbeat_interval_ms, tail=self.group_configs)
        self.partitions.lease = self.membership.lease
        self.membership.on_lapse.append(lambda: self.backend.suspend("this sidecar's cluster lease lapsed"))
        self.membership.on_renew.append(self.backend.resume)
        self.membership.on_renew.append(lambda: reset_clients(self.listeners))
        self.group_configs.listeners.append(self.partitions.reconfigure_group)
        await self.group_configs.start()
        self.admin.remote_group_configs = self.group_configs.configs
        self.group_config.remote = self.group_configs.configs
        self.admin.remote_state = self.group_configs
        plaintext = next((spec.name for spec in specs if spec.protocol == "PLAINTEXT"), None)
        self.admin.peer_configs = PeerConfigs(view, plaintext)
        await self.membership.start(wait_s=3 * cfg.cluster.session_timeout_ms / 1000)
        log.info("cluster %s: node %d owns state partitions %s", cfg.cluster.name, cfg.server.node_id,
                 sorted(self.persister.owned))

    def _on_superseded(self, reason: str) -> None:
        """A newer sidecar owns the share state: stop serving (close the listener; clients
        reconnect to the new owner). Nothing is released or written in the backend."""
        for listener in self.listeners:
            task = asyncio.create_task(listener.stop(), name="kshare-superseded-stop")
            self._tasks.append(task)

    async def _expire_members(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.groups.expire_members()
            except Exception:  # noqa: BLE001 - expiry must go on whatever one pass met
                log.exception("member expiry failed")

    async def stop(self) -> None:
        if getattr(self, "metrics", None) is not None:  # Prometheus /metrics
            self.metrics.stop()
            self.metrics = None
        partitions = getattr(self, "partitions", None)
        if partitions is not None:
            # acquire nothing more; parked ShareFetches answer with what they hold, and every
            # answer in flight is written before the connections close (one never written would
            # count a delivery no consumer saw)
            partitions.quiesce()
            await asyncio.gather(*(listener.settle(_SETTLE_S) for listener in self.listeners))
        for listener in self.listeners:
            await listener.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for name in ("console", "forwarder", "tokens", "pool", "shares", "deadletter", "partitions", "membership",
                     "group_configs", "backend", "persister", "authenticator", "authorizer", "quotas"):
            part = getattr(self, name, None)
            if part is not None:
                try:
                    await part.close()
                except Exception:
                    log.exception("closing %s failed", name)


def _load_assignors(default: str) -> dict[str, Callable[..., Any]]:
    """Every registered assignor, built once: groups choose among them with ``share.assignor``.

    The sidecar's own must build (start-up fails otherwise, naming the allowed values); another
    that fails to build is logged and left out, so no group can choose it and the rest still
    work (the plugin failure policy, docs/plugins/index.md)."""
    out = {default: assign_with(plugins.get_assignor(default))}
    for name in sorted(plugins.get_assignors()):
        if name in out:
            continue
        try:
            out[name] = assign_with(plugins.get_assignor(name))
        except Exception as exc:  # a third-party factory: any error must stay its own
            log.error("assignor %r could not be built and cannot be chosen by share.assignor: %s: %s",
                      name, type(exc).__name__, exc)
    return out

