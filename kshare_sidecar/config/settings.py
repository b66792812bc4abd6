"""Every sidecar setting, declared once: key (Kafka's name), default, type, bounds, documentation.

`SETTINGS` is the single source of the key names: loading (file, ``KSHARE_*`` environment,
flags) validates against it, `doc` renders docs/configuration.md from it, and the typed
sections of `sections` name each key once (a unit test checks the mapping both ways).
A bad value is rejected with one line naming the key and the allowed values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..protocol.constants import SASL_MECHANISMS as CLIENT_SASL_MECHANISMS
from ..protocol.constants import SECURITY_PROTOCOLS
from .values import (  # noqa: F401 - the public ones are imported from here too
    DEFAULT_PROTOCOL_MAP,
    PROTOCOLS,
    SASL_MECHANISMS,
    dlq_topic_problem,
    parse_listeners,
    _bootstrap,
    _host_port,
    _ip_overrides,
    _listeners,
    _mechanisms,
    _offset_reset,
    _optional_host_port,
    _protocol_map,
    _refresh_interval,
    _tag_list_problem,
    _topic_list_problem,
)



class ConfigError(ValueError):
    """A configuration value is unknown or out of range; the message names the key."""


@dataclass(frozen=True)
class Setting:
    key: str
    default: Any
    kind: type
    doc: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], str | None] | None = None  # returns an error text or None
    secret: bool = False  # a password or key: never echoed in errors, reprs or logs

    def coerce(self, raw: Any, source: str) -> Any:
        value: Any
        try:
            if self.kind is bool:
                value = raw if isinstance(raw, bool) else str(raw).strip().lower() in ("1", "true", "yes", "on")
                if not isinstance(raw, bool) and str(raw).strip().lower() not in (
                        "1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError
            elif self.kind is int:
                if isinstance(raw, bool):
                    raise ValueError
                value = int(raw)
            elif self.kind is float:
                if isinstance(raw, bool):
                    raise ValueError
                value = float(raw)
                if value != value or value in (float("inf"), float("-inf")):
                    raise ValueError
            else:
                value = str(raw)
        except (TypeError, ValueError):
            shown = "<redacted>" if self.secret else repr(raw)
            raise ConfigError(f"{self.key} (from {source}) must be {self.kind.__name__}, got {shown}") from None
        if self.low is not None and value < self.low or self.high is not None and value > self.high:
            raise ConfigError(
                f"{self.key} (from {source}) = {value} is out of range: allowed {self.low}..{self.high}")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{self.key} (from {source}) = {value!r}: allowed values are {', '.join(self.choices)}")
        if self.check is not None and (problem := self.check(value)):
            raise ConfigError(f"{self.key} (from {source}) = {value!r}: {problem}")
        return value


_S = Setting
SETTINGS: tuple[Setting, ...] = (
    # -- the sidecar itself
    _S("bootstrap.servers", "", str, "Backend cluster (Kafka or Redpanda) bootstrap servers.", check=_bootstrap),
    _S("listen", "127.0.0.1:9192", str, "Address of the single PLAINTEXT listener when `listeners` is not set "
       "(an empty KSHARE_LISTEN counts as not set: it clears the image's 0.0.0.0:9192 for `listeners`).",
       check=_host_port),
    _S("advertised.listener", "", str, "host:port clients are told to connect to (default: listen); with `listen` "
       "only.", check=_optional_host_port),
    _S("listeners", "", str, "Kafka's form: NAME://host:port[,...], e.g. PLAINTEXT://127.0.0.1:9192,"
       "SASL_SSL://0.0.0.0:9194 ('' = one PLAINTEXT listener on `listen`).", check=_listeners),
    _S("advertised.listeners", "", str, "NAME://host:port[,...] clients are told to connect to, per listener "
       "(default: the listener's own address).", check=_listeners),
    _S("listener.security.protocol.map", DEFAULT_PROTOCOL_MAP, str, "NAME:PROTOCOL[,...]: the security protocol "
       "of each listener name.", check=_protocol_map),
    # -- the listeners' own security (Kafka's broker names; docs/security.md)
    _S("ssl.keystore.location", "", str, "PEM file with the server certificate chain and its key (SSL and "
       "SASL_SSL listeners)."),
    _S("ssl.key.password", "", str, "Password of the key in ssl.keystore.location.", secret=True),
    _S("ssl.truststore.location", "", str, "PEM file of CAs that sign client certificates (ssl.client.auth)."),
    _S("ssl.client.auth", "none", str, "Client certificates on SSL listeners: required/requested make the "
       "principal User:<subject DN>.", choices=("none", "requested", "required")),
    _S("sasl.enabled.mechanisms", "PLAIN", str, "Comma-separated SASL mechanisms of SASL_* listeners.",
       check=_mechanisms),
    _S("sasl.server.max.receive.size", 524288, int, "Largest frame a client may send on a SASL listener before it "
       "has authenticated.", 1024, 2**31 - 1),
    _S("connection.failed.authentication.delay.ms", 100, int, "Delay of the failure answer (and close) after a "
       "failed authentication, which slows password guessing.", 0, 60000),
    _S("connections.max.reauth.ms", 0, int, "KIP-368: lifetime of an authenticated SASL session; clients "
       "re-authenticate before it ends, or their connection is closed (0 = sessions never end).", 0, 2**31 - 1),
    _S("sasl.authenticator", "static", str, "Authenticator plugin that checks SASL credentials (built-ins: static, "
       "delegate)."),
    _S("sasl.credentials.file", "", str, "static authenticator: file of user:password or "
       "user:SCRAM-SHA-nnn:salt=...,stored_key=...,server_key=...,iterations=N lines."),
    # -- authorization against the backend's ACLs (docs/security.md, "Authorization")
    _S("authorizer.class.name", "", str, "'' : no authorization; 'backend': share-group APIs are authorized with "
       "the backend's ACLs for the client's principal (Kafka's rules and error codes).", choices=("", "backend")),
    _S("authorizer.cache.ms", 5000, int, "How long a principal's ACLs read from the backend are used before a "
       "background refresh.", 100, 3_600_000),
    _S("authorizer.denial.recheck.ms", 1000, int, "A refusal is never taken from the cache: the principal's ACLs "
       "are read again first (a grant made a moment ago is honoured, as a broker does); one principal's re-reads "
       "are at least this far apart, so a client that keeps being refused costs the backend one DescribeAcls set "
       "per interval (its refusals wait for the next read).", 100, 60_000),
    _S("super.users", "", str, "Principals allowed everything without ACLs, ';'-separated as in Kafka "
       "(User:admin;User:kshare); the backend's super.users cannot be read over the protocol."),
    _S("allow.everyone.if.no.acl.found", False, bool, "As Kafka's StandardAuthorizer: when no ACL at all (for any "
       "principal) matches a resource, everyone is allowed on it; false (Kafka's default): only what an ACL "
       "allows. On, each refresh also reads every principal's ACLs (one unfiltered DescribeAcls)."),
    _S("authorizer.allow.plaintext.anonymous", True, bool, "User:ANONYMOUS on PLAINTEXT listeners (health checks "
       "on loopback) is not checked; false: checked against its ACLs, as Kafka does."),
    _S("passthrough.credentials", "sidecar", str, "Whose credentials forwarded requests use at the backend: "
       "'sidecar' (the backend.sasl.* user) or 'client' (the client's own principal, so the backend authorizes "
       "the client: a SASL PLAIN client's password replayed, any other authenticated client through a delegation "
       "token owned by its principal; anonymous clients cannot use pass-through).", choices=("sidecar", "client")),
    _S("passthrough.delegation.token.max.lifetime.ms", 3600000, int, "passthrough.credentials = client: the "
       "max_lifetime asked for each client principal's delegation token (the backend grants at most its "
       "delegation.token.expiry.time.ms); a fresh token is made after 80 % of the granted lifetime.",
       1000, 2**62),
    _S("passthrough.delegation.token.idle.ms", 300000, int, "passthrough.credentials = client: a principal "
       "without upstream connections this long has its delegation token expired at the backend.", 1000, 2**62),
    _S("node.id", 1, int, "Node id the sidecar presents as coordinator and partition leader.", 0, 2**31 - 1),
    _S("cluster.id", "kshare", str, "Cluster id reported in Metadata."),
    # -- a cluster of sidecars (docs/deployment.md, "Running N sidecars")
    _S("cluster.name", "", str, "Name of the cluster of sidecars this one belongs to ('' = a single sidecar). "
       "Sidecars with the same name and state.topic share the share groups: the backend's consumer group "
       "kshare-cluster-<name> spreads the state partitions over them. Each needs its own node.id and advertised "
       "address. A single sidecar's state topic serves as it is (share-partitions are placed by topic-partition; "
       "an older build's layout is moved once, docs/persistence.md)."),
    _S("cluster.session.timeout.ms", 10000, int, "How long a sidecar of the cluster may go silent before the backend "
       "gives its state partitions to the others (the failover gap after a crash; a clean stop hands over at "
       "once). Also the length of the lease a sidecar serves by, less a safety margin of a fifth (at least two "
       "heartbeat intervals): one that cannot renew its membership stops serving before its partitions can be "
       "given away; a single sidecar's lease is its backend answering (docs/deployment.md).", 1000, 1800000),
    _S("cluster.heartbeat.interval.ms", 1000, int, "Heartbeat interval of the sidecars' group (how soon the others "
       "notice a rebalance).", 100, 600000),
    _S("socket.request.max.bytes", 100 * 1024 * 1024, int, "Largest request frame accepted.", 1024, 2**31 - 1),
    _S("queued.max.request.bytes", -1, int, "Bytes that request frames being received may hold across all "
       "connections before no more are read (-1 = no limit, Kafka's default; at least socket.request.max.bytes).",
       -1, 2**62),
    # -- the backend's security (Kafka's client setting names under backend.; docs/security.md)
    _S("backend.security.protocol", "PLAINTEXT", str, "How the sidecar connects to the backend.",
       choices=SECURITY_PROTOCOLS),
    _S("backend.sasl.mechanism", "PLAIN", str, "SASL mechanism towards the backend (GSSAPI is not supported).",
       choices=CLIENT_SASL_MECHANISMS),
    _S("backend.sasl.jaas.config", "", str, "Kafka JAAS line with username=\"...\" password=\"...\" "
       "(PLAIN/SCRAM login modules); or use backend.sasl.username/password.", secret=True),
    _S("backend.sasl.username", "", str, "SASL user towards the backend."),
    _S("backend.sasl.password", "", str, "SASL password (prefer the environment or a file).", secret=True),
    _S("backend.sasl.password.file", "", str, "File holding the SASL password."),
    _S("backend.sasl.oauthbearer.token.file", "", str, "File holding the OAUTHBEARER token (re-read at each "
       "authentication)."),
    _S("backend.sasl.oauthbearer.token.endpoint.url", "", str, "OAUTHBEARER: OAuth 2 token endpoint; the sidecar "
       "gets tokens with the client-credentials grant (KIP-768) and caches them."),
    _S("backend.sasl.oauthbearer.client.credentials.client.id", "", str, "OAUTHBEARER: client id at the token "
       "endpoint."),
    _S("backend.sasl.oauthbearer.client.credentials.client.secret", "", str, "OAUTHBEARER: client secret at the "
       "token endpoint (prefer the environment or a file).", secret=True),
    _S("backend.sasl.oauthbearer.client.credentials.client.secret.file", "", str, "File holding the client secret."),
    _S("backend.sasl.oauthbearer.scope", "", str, "OAUTHBEARER: scope requested from the token endpoint."),
    _S("backend.sasl.oauthbearer.token.command", "", str, "OAUTHBEARER: command (run without a shell) printing a "
       "JWT; re-run when the cached token nears its exp."),
    _S("backend.sasl.login.refresh.window.factor", 0.8, float, "A cached OAUTHBEARER token is replaced once this "
       "fraction of its lifetime has passed (Kafka's default 0.8).", 0.5, 1.0),
    _S("backend.ssl.truststore.location", "", str, "PEM file of CAs to trust ('' = the system's)."),
    _S("backend.ssl.keystore.location", "", str, "PEM file with the client certificate chain and key (mTLS)."),
    _S("backend.ssl.key.password", "", str, "Password of the key in backend.ssl.keystore.location.", secret=True),
    _S("backend.ssl.endpoint.identification.algorithm", "https", str, "https: verify the broker's host name "
       "against its certificate; '' : do not.", choices=("https", "")),
    # Kafka's client (and broker) names: they bound every connection the sidecar opens to the backend
    _S("socket.connection.setup.timeout.ms", 10000, int, "How long the sidecar waits for a connection to a backend "
       "broker to be established (TCP and TLS; aiokafka's connections also their ApiVersions and SASL exchange) "
       "before it drops the attempt, instead of waiting out TCP's SYN retransmissions (KIP-601). Each consecutive "
       "failure to the same broker doubles it, up to socket.connection.setup.timeout.max.ms, with ±20 % jitter; "
       "a connection established resets it (docs/architecture.md, \"Decisions\").", 1, 2**31 - 1),
    _S("socket.connection.setup.timeout.max.ms", 30000, int, "Longest setup timeout the doubling reaches "
       "(a value below socket.connection.setup.timeout.ms is used for every attempt, as Kafka does).",
       1, 2**31 - 1),
    _S("share.partition.idle.eviction.ms", 600000, int, "kshare: a loaded share-partition with nothing acquired "
       "that no request asked for in this long is dropped from memory; its next fetch or acknowledgement loads it "
       "again from the state topic (0 = never; docs/capacity.md).", 0, 2**31 - 1),
    _S("read.ahead.enable", True, bool, "Read a share-partition's next window from the backend in the background "
       "before it is acknowledged, so a consumer that works between polls acquires from the cache (a poll after "
       "a 150 ms pause: ShareFetch p75 14 -> 2 ms; read amplification 1.10 on and off in the 1M throughput "
       "run; docs/benchmarks.md)."),
    _S("passthrough.enable", True, bool, "Forward every API the sidecar does not serve to the backend, so clients "
       "need only the sidecar as bootstrap (false: share-group APIs only)."),
    # -- listener limits (Kafka's names and defaults; request.read.timeout.ms is kshare's own)
    _S("connections.max.idle.ms", 600000, int, "Close a connection idle this long (no request, nothing in flight).",
       1000, 2**31 - 1),
    _S("request.read.timeout.ms", 60000, int, "A started request frame must arrive completely within this (slow-loris).",
       100, 2**31 - 1),
    _S("max.connections", 2**31 - 1, int, "Client connections the listener accepts; beyond, new ones are closed.",
       1, 2**31 - 1),
    _S("max.connections.per.ip", 2**31 - 1, int, "Client connections per client address; beyond, new ones are closed.",
       1, 2**31 - 1),
    _S("max.connections.per.ip.overrides", "", str, "Per-address exceptions to max.connections.per.ip: "
       "'host:count' pairs, comma-separated (for example 127.0.0.1:200,10.0.0.7:5).",
       check=_ip_overrides),
    _S("max.inflight.requests.per.connection", 64, int, "Outstanding responses per connection before it stops reading.",
       1, 10000),
    _S("metrics.port", 0, int, "Prometheus metrics port (0 = off).", 0, 65535),
    _S("metrics.host", "", str, "Address the metrics port binds ('' = the first listener's host: a sidecar "
       "listening on loopback serves its metrics on loopback only; 0.0.0.0 = every interface)."),
    # -- client quotas: the backend's consumer_byte_rate applied to ShareFetch (docs/compatibility.md)
    _S("client.quota.enable", True, bool, "Apply the backend's consumer_byte_rate quotas (user and client-id "
       "entities, read with DescribeClientQuotas) to ShareFetch as a broker does: ThrottleTimeMs and a muted "
       "connection. Needs DESCRIBE_CONFIGS on CLUSTER for the sidecar's backend principal; false: no throttling."),
    _S("client.quota.refresh.ms", 5000, int, "How often the backend's client quotas are read again.", 100,
       3_600_000),
    _S("quota.window.num", 11, int, "Samples a client's byte rate is measured over (Kafka's broker setting).", 2,
       1000),
    _S("quota.window.size.seconds", 1, int, "Length of each sample (Kafka's broker setting).", 1, 3600),
    # -- the web console (docs/console.md)
    _S("console.listen", "", str, "host:port of the web console's own HTTP(S) listener ('' = off). Without "
       "authentication it must be a loopback address unless console.allow.remote.unauthenticated is true.",
       check=_optional_host_port),
    _S("console.actions.enable", False, bool, "Let the console change things (reset a group's start offset, "
       "delete a group, redrive dead letters), each checked with the ACLs of the Kafka API it corresponds to; "
       "false: read-only."),
    _S("console.authentication", "auto", str, "auto: the console asks for credentials when any listener "
       "requires authentication (SASL, or SSL with ssl.client.auth=required); required: always; none: never "
       "(loopback only, unless console.allow.remote.unauthenticated).", choices=("auto", "required", "none")),
    _S("console.ssl.enable", False, bool, "Serve the console over HTTPS with ssl.keystore.location (needed for "
       "HTTP Basic authentication on a non-loopback address)."),
    _S("console.ssl.client.auth", "none", str, "Client certificates on the console (mTLS, CAs from "
       "ssl.truststore.location): required/requested make the principal User:<subject DN>, as on the Kafka "
       "listeners.", choices=("none", "requested", "required")),
    _S("console.allow.remote.unauthenticated", False, bool, "Allow a console without authentication on a "
       "non-loopback address (anyone who can reach it sees every group; actions stay off unless enabled)."),
    _S("console.sample.interval.ms", 5000, int, "How often the console samples each group for its plots "
       "(10 minutes are kept).", 1000, 60000),
    _S("console.redrive.max.records.per.second", 500, int, "Highest rate a redrive started from the console "
       "may ask for (records per second); also its default.", 1, 100000),
    _S("persister", "topic", str, "Persister plugin name (built-ins: topic, memory)."),
    _S("assignor", "simple", str, "Share-group assignor plugin name: the default of the per-group "
       "share.assignor (kshare's own group config)."),
    _S("plugins.load", "", str, "Comma-separated allowlist of plugin entry points or distributions "
       "('' = every installed plugin; built-ins always load)."),
    _S("plugins.disable", "", str, "Comma-separated plugin names to block (entry points, distributions "
       "or built-in modules): the way out of a broken plugin."),
    _S("plugins.trace", False, bool, "Log every plugin hook call and registration."),
    _S("state.topic", "__kshare_state", str, "Compacted topic holding share-group state."),
    _S("state.topic.partitions", 16, int, "Partitions of the state topic when created.", 1, 1000),
    _S("state.topic.replication.factor", -1, int, "Replication factor (-1 = broker default).", -1, 32),
    _S("state.write.linger.ms", 0, int, "How long a state partition's writer waits for more writes before it "
       "writes a batch. 0: no timer, like Kafka's share.coordinator.append.linger.ms=-1 (adaptive): what was "
       "queued meanwhile goes in one batch, and writes queued while one is in flight go in the next.", 0, 1000),
    _S("state.write.mode", "fenced", str,
       "How state is written: fenced (one idempotent produce per write under a transactional id's producer "
       "epoch: a superseded sidecar's writes are refused by the backend), transactional (a Kafka transaction "
       "per write) or idempotent (plain idempotent produce for backends without transactions; weaker "
       "fencing, docs/persistence.md).", choices=("fenced", "transactional", "idempotent")),
    _S("state.write.refresh.ms", 3600000, int,
       "fenced mode: how often each state writer takes a new producer epoch (KIP-360 conditional InitProducerId) "
       "and rewrites its owner record, so the backend's producer-id and transactional-id expiry never forgets it. "
       "0 = never (else at least 60000): for backends that expire neither and cannot serve that request "
       "(tansu, docs/compatibility.md).",
       0, 86400000, check=_refresh_interval),
    _S("state.transaction.timeout.ms", 60000, int,
       "Transaction timeout of the state writers: a frozen writer's open transaction is aborted by the backend "
       "after this.", 1000, 900000),
    # -- broker-level share-group settings (Kafka group.share.* names and defaults)
    _S("group.share.delivery.count.limit", 5, int, "Deliveries before a record is archived.", 2, 10),
    _S("group.share.record.lock.duration.ms", 30000, int, "Acquisition lock duration.", 1000, 3600000),
    _S("group.share.min.record.lock.duration.ms", 15000, int, "Lowest per-group lock duration.", 1000, 3600000),
    _S("group.share.max.record.lock.duration.ms", 60000, int, "Highest per-group lock duration.", 1000, 3600000),
    _S("group.share.partition.max.record.locks", 2000, int, "In-flight window per share-partition.", 100, 10000),
    _S("group.share.max.share.sessions", 2000, int, "Share sessions the sidecar holds (at least group.share.max.size); "
       "a full cache refuses new ones with SHARE_SESSION_LIMIT_REACHED after MaxWaitMs and evicts none.", 1, 1000000),
    _S("share.sessions.max.per.connection", 100, int, "Share sessions one client connection may hold (kshare's own: "
       "a Kafka client opens one per connection); beyond, SHARE_SESSION_LIMIT_REACHED.", 1, 1000000),
    _S("group.share.session.timeout.ms", 45000, int, "Member session timeout.", 1000, 1800000),
    _S("group.share.heartbeat.interval.ms", 5000, int, "Heartbeat interval given to members.", 100, 1800000),
    _S("group.share.max.size", 200, int, "Members per share group.", 1, 1000),
    _S("group.share.assignment.interval.ms", 1000, int, "Least time between assignment recomputations.", 0, 60000),
    # bounds of the per-group overrides (Kafka 4.3.1's broker names and defaults)
    _S("group.share.min.session.timeout.ms", 45000, int, "Lowest per-group share.session.timeout.ms.", 1, 2**31 - 1),
    _S("group.share.max.session.timeout.ms", 60000, int, "Highest per-group share.session.timeout.ms.", 1, 2**31 - 1),
    _S("group.share.min.heartbeat.interval.ms", 5000, int, "Lowest per-group share.heartbeat.interval.ms.", 1,
       2**31 - 1),
    _S("group.share.max.heartbeat.interval.ms", 15000, int, "Highest per-group share.heartbeat.interval.ms.", 1,
       2**31 - 1),
    _S("group.share.max.assignment.interval.ms", 15000, int, "Highest per-group share.assignment.interval.ms.", 0,
       2**31 - 1),
    _S("group.share.max.delivery.count.limit", 10, int, "Highest per-group share.delivery.count.limit.", 2, 10),
    _S("group.share.max.partition.max.record.locks", 4000, int, "Highest per-group share.partition.max.record.locks.",
       100, 10000),
    _S("group.share.renew.acknowledge.enable", True, bool, "Default of share.renew.acknowledge.enable: false "
       "refuses RENEW acknowledgements (INVALID_RECORD_STATE), as Kafka 4.4 does."),
    _S("share.auto.offset.reset", "latest", str, "Default initial SPSO for new share-partitions.",
       check=_offset_reset),
    _S("share.isolation.level", "read_uncommitted", str, "Default isolation level for share groups.",
       choices=("read_uncommitted", "read_committed")),
    # -- dead-letter queues (KIP-1191, Kafka 4.4's names and defaults; docs/extensions.md)
    _S("errors.deadletterqueue.topic.name", "", str, "Default dead-letter topic of share groups ('' = none; "
       "kshare's sidecar-wide default, Kafka has only the group config): rejected records and records archived "
       "at the delivery count limit are written there.", check=dlq_topic_problem),
    _S("errors.deadletterqueue.copy.record.enable", False, bool, "Copy the record's key and value onto the "
       "dead-letter topic, not only the __dlq.errors.* headers (Kafka 4.4's default, false)."),
    _S("errors.deadletterqueue.topic.name.prefix", "dlq.", str, "Prefix a dead-letter topic name must have for "
       "records to be written to it ('' = any name); checked at write time, as Kafka 4.4 does."),
    _S("errors.deadletterqueue.auto.create.topics.enable", False, bool, "Create a missing dead-letter topic at "
       "its first write (with errors.deadletterqueue.group.enable=true); otherwise records for a missing topic "
       "are archived without a write, as Kafka 4.4 does."),
    _S("deadletter.enabled.topics", "", str, "kshare: topics that accept dead-letter records on a backend whose "
       "topic configs cannot hold errors.deadletterqueue.group.enable (before Kafka 4.4), comma-separated; "
       "added to the opt-ins recorded when a topic is created or altered through the sidecar.",
       check=_topic_list_problem),
    _S("deadletter.hold.until.written", False, bool, "kshare: keep a dead-lettered record held (not archived) "
       "until its dead-letter write succeeds, retrying while the topic is missing, lacks the opt-in or the "
       "backend fails (Kafka 4.4 archives at once); a write that can never succeed still archives."),
    _S("deadletter.strict.names", False, bool, "kshare: refuse with INVALID_CONFIG a group's "
       "errors.deadletterqueue.topic.name that is not a legal topic name or lacks "
       "errors.deadletterqueue.topic.name.prefix (Kafka 4.4 accepts it and archives at write time)."),
    # -- kshare's own extensions (no Kafka equivalent; docs/extensions.md)
    _S("share.release.backoff.ms", 0, int, "kshare: delay before a released (or lock-expired) record is available "
       "again, after its first delivery (0 = at once, as Kafka).", 0, 3600000),
    _S("share.release.backoff.multiplier", 2.0, float, "kshare: factor applied to the backoff per further "
       "delivery.", 1, 100),
    _S("share.release.backoff.max.ms", 60000, int, "kshare: longest release backoff.", 0, 3600000),
    _S("share.key.ordering", False, bool, "kshare: at most one in-flight delivery per record key per "
       "share-partition, in offset order."),
)
BY_KEY = {s.key: s for s in SETTINGS}

#: Per-group dynamic configs (IncrementalAlterConfigs on GROUP resources) → their default source.
GROUP_CONFIGS: dict[str, str] = {
    "share.auto.offset.reset": "share.auto.offset.reset",
    "share.isolation.level": "share.isolation.level",
    "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
    "share.session.timeout.ms": "group.share.session.timeout.ms",
    "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms",
    "share.delivery.count.limit": "group.share.delivery.count.limit",
    "share.partition.max.record.locks": "group.share.partition.max.record.locks",
    "share.assignment.interval.ms": "group.share.assignment.interval.ms",
    "share.renew.acknowledge.enable": "group.share.renew.acknowledge.enable",
    "share.assignor": "assignor",
    "errors.deadletterqueue.topic.name": "errors.deadletterqueue.topic.name",
    "errors.deadletterqueue.copy.record.enable": "errors.deadletterqueue.copy.record.enable",
    "share.release.backoff.ms": "share.release.backoff.ms",
    "share.release.backoff.multiplier": "share.release.backoff.multiplier",
    "share.release.backoff.max.ms": "share.release.backoff.max.ms",
    "share.key.ordering": "share.key.ordering",
}

#: GROUP configs of kshare's own, unknown to Kafka. A describe of all configs lists one only when
#: the group sets it, so a group without kshare extras is described exactly as Kafka 4.4.0
#: describes it (the differential parity tests compare those answers); asked for by name, it is
#: always described.
KSHARE_GROUP_CONFIGS: frozenset[str] = frozenset({
    "share.assignor", "share.release.backoff.ms", "share.release.backoff.multiplier", "share.release.backoff.max.ms",
    "share.key.ordering", "share.coordinator"})

#: Per-group bounds of the share.* configs (Kafka 4.3.1 GroupConfig): sidecar setting names or
#: constants; a group may set any value in them (not only lower the sidecar's default).
GROUP_BOUNDS: dict[str, tuple[int | str, int | str]] = {
    "share.record.lock.duration.ms": ("group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
    "share.session.timeout.ms": ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    "share.assignment.interval.ms": (0, "group.share.max.assignment.interval.ms"),
    "share.delivery.count.limit": (2, "group.share.max.delivery.count.limit"),
    "share.partition.max.record.locks": (100, "group.share.max.partition.max.record.locks"),
}

#: GROUP configs Kafka 4.4.0 accepts for its consumer (KIP-848) and streams (KIP-1071) groups.
#: They belong to the backend's group coordinator, not to kshare's share groups: kshare accepts,
#: stores and describes them with Kafka's defaults and bounds so admin scripts written for 4.4 work
#: unchanged (docs/compatibility.md), and acts on none of them.
FOREIGN_GROUP_CONFIGS: dict[str, Setting] = {s.key: s for s in (
    Setting("consumer.session.timeout.ms", 45000, int, "Consumer group session timeout.", 45000, 60000),
    Setting("consumer.heartbeat.interval.ms", 5000, int, "Consumer group heartbeat interval.", 5000, 15000),
    Setting("consumer.assignment.interval.ms", 1000, int, "Consumer group assignment interval.", 0, 15000),
    Setting("streams.session.timeout.ms", 45000, int, "Streams group session timeout.", 45000, 60000),
    Setting("streams.heartbeat.interval.ms", 5000, int, "Streams group heartbeat interval.", 5000, 15000),
    Setting("streams.assignment.interval.ms", 1000, int, "Streams group assignment interval.", 0, 15000),
    Setting("streams.initial.rebalance.delay.ms", 3000, int, "Streams group initial rebalance delay.", 0, 2**31 - 1),
    Setting("streams.num.standby.replicas", 0, int, "Streams group standby replicas.", 0, 2),
    # Kafka 4.4's
    Setting("streams.rack.aware.assignment.tags", "", str, "Client tag keys streams standby replicas are spread "
            "over (comma-separated, no duplicates).", check=_tag_list_problem),
    Setting("streams.assignor.name", "sticky", str, "Streams group task assignor (Kafka 4.4's registered "
            "assignors: sticky).", choices=("sticky",)),
    # kshare's own, and a group's choice only (no sidecar-wide default): docs/migration.md
    Setting("share.coordinator", "sidecar", str, "kshare: where this share group is served: sidecar (kshare's "
            "coordinator and state) or backend (the backend's native share groups, Kafka 4.2+: the sidecar passes "
            "the group's share requests through; set by kshare state migrate-to-native).",
            choices=("sidecar", "backend")),
)}

#: Every GROUP config name kshare accepts, in Kafka's (alphabetical) describe order.
GROUP_CONFIG_NAMES: tuple[str, ...] = tuple(sorted({*GROUP_CONFIGS, *FOREIGN_GROUP_CONFIGS}))


def group_config_setting(name: str) -> Setting:
    """The setting describing a GROUP config's type and documentation (KeyError if unknown)."""
    return FOREIGN_GROUP_CONFIGS[name] if name in FOREIGN_GROUP_CONFIGS else BY_KEY[GROUP_CONFIGS[name]]


def env_name(key: str) -> str:
    return "KSHARE_" + key.upper().replace(".", "_")

