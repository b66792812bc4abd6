"""The backend check at start-up: is this cluster new enough for kshare and its state write mode?

Why: every part of kshare leans on broker APIs that arrived in different releases — read_committed
fetches and record format v2 (Kafka 0.11), the idempotent producer's epochs (0.11) and KIP-360's
conditional epoch bump (2.5) for ``state.write.mode=fenced``, transactions for ``transactional`` —
and without a check an old backend fails late and obscurely (an InitProducerId refused an hour
after start-up, when the fenced writers first refresh). So before anything else talks to the
backend, one ApiVersions answer is compared with what kshare and the chosen mode send; a backend
that falls short is refused with one line naming its release (:mod:`.releases`), the missing API
and what to do. What is only *optional* (DescribeTopicPartitions, topic ids, KIP-848 consumer
groups, Produce by topic id, the backend's own share groups) is logged as one INFO line naming what
differs; the layers concerned already degrade (docs/compatibility.md, "Backends").

ApiVersions does not tell whether the backend's topics carry topic ids (a ZooKeeper cluster
assigns them only from inter-broker protocol 2.8 on): one Metadata request for every topic
probes that, and ids are minted for a backend without them (:mod:`.topic_ids`).

The requirements below are read from the code that sends the requests: ``backend/`` (Metadata v1+,
Fetch v4+, ListOffsets v1+), ``persist/epochwriter.py`` (fenced: InitProducerId v0-5 under a
transactional id, v3+ for the refresh, Produce v3+), aiokafka 0.14's producers (idempotent and
transactional: InitProducerId, AddPartitionsToTxn and EndTxn at v0 only, FindCoordinator) and
``persist/topicsetup.py`` (CreateTopics, DescribeConfigs).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from ..protocol.address import parse_bootstrap
from ..protocol.requests import decode_response, request_payload
from .brokerconn import BrokerConn, BrokerConnError
from .kio_bridge import make, request_module
from .releases import metadata_mode, release

if TYPE_CHECKING:
    from .connection_states import ClusterConnectionStates

log = logging.getLogger("kshare.backend")

#: The releases kshare's backend matrix runs on (docs/compatibility.md): the advice for one too old.
TESTED = ("2.8", "4.4")
_UPGRADE = f"upgrade the backend (kshare is tested on Kafka {TESTED[0]} to {TESTED[1]})"
_DOCS = 'docs/compatibility.md, "Backends"'


@dataclass(frozen=True)
class Need:
    """An API kshare sends, in the versions it can speak, and why."""

    api_key: int
    name: str
    versions: range
    why: str
    since: str  # the Kafka release that brought the lowest of ``versions``

    def unmet(self, versions: Mapping[int, tuple[int, int]]) -> bool:
        low, high = versions.get(self.api_key, (0, -1))
        return not any(low <= v <= high for v in self.versions)

    def describe(self, versions: Mapping[int, tuple[int, int]]) -> str:
        if self.api_key not in versions:
            return f"{self.name}, which the backend does not serve"
        low, high = versions[self.api_key]
        wanted = f"v{self.versions.start}" + ("+" if len(self.versions) > 1 else "")
        if low > self.versions.stop - 1:
            wanted = f"v{self.versions.start}-v{self.versions.stop - 1}"
        return f"{self.name} {wanted} ({self.why}; Kafka {self.since}+), and the backend serves v{low}-v{high}"


#: What every sidecar sends to the backend (the share engine's reads and topic metadata).
CORE = (
    Need(3, "Metadata", range(1, 13), "topic metadata", "0.10"),
    Need(1, "Fetch", range(4, 13), "read_committed reads of record format v2", "0.11"),
    Need(2, "ListOffsets", range(1, 8), "log offsets", "0.10.1"),
)
#: What the topic persister sends whatever its mode: the state topic and its writes.
STATE_TOPIC = (
    Need(0, "Produce", range(3, 13), "state writes in record format v2", "0.11"),
    Need(19, "CreateTopics", range(0, 8), "creating the state topic", "0.10.1"),
    Need(32, "DescribeConfigs", range(0, 5), "checking the state topic is compacted", "0.11"),
    Need(10, "FindCoordinator", range(1, 7), "the state writers' transaction coordinator", "0.11"),
)
_INIT = Need(22, "InitProducerId", range(0, 6), "the state writers' producer epochs", "0.11")
_INIT_V0 = Need(22, "InitProducerId", range(0, 1), "aiokafka's producer speaks v0 only", "0.11")
#: Each ``state.write.mode``'s own APIs (docs/persistence.md, "Write modes").
MODE_NEEDS: dict[str, tuple[Need, ...]] = {
    "fenced": (_INIT,),
    "idempotent": (_INIT_V0,),
    "transactional": (_INIT_V0, Need(24, "AddPartitionsToTxn", range(0, 1), "aiokafka's transactions", "0.11"),
                      Need(26, "EndTxn", range(0, 1), "aiokafka's transactions", "0.11")),
}
#: ``fenced`` with ``state.write.refresh.ms`` > 0: the refresh is KIP-360's conditional bump.
REFRESH_NEED = Need(22, "InitProducerId", range(3, 6), "the fenced writers' refresh, KIP-360's conditional epoch "
                                                       "bump", "2.5")

#: Optional abilities: (API key, lowest version, what clients miss without it).
OPTIONAL: tuple[tuple[int, int, str], ...] = (
    (75, 0, "no DescribeTopicPartitions (clients describe topics with Metadata)"),
    (68, 1, "no KIP-848 consumer groups (group.protocol=consumer)"),
    (0, 13, "no Produce by topic id (clients name topics)"),
)


class BackendIncompatibleError(Exception):
    """The backend cannot serve kshare (or its state write mode); ``str()`` is the one line."""

    error_code = ErrorCode.unsupported_version


@dataclass
class BackendProfile:
    """What the start-up check learnt: API versions, finalized features and the topic-id probe."""

    versions: dict[int, tuple[int, int]]
    finalized: dict[str, int] = field(default_factory=dict)
    topic_ids: bool | None = None  # None: no topic to tell by

    @property
    def release(self) -> str:
        return release(self.versions)

    @property
    def mode(self) -> str | None:
        return metadata_mode(self.versions, self.finalized)

    def label(self) -> str:
        """``"Kafka 2.8 (ZooKeeper)"`` — what the answer shows, for log lines."""
        return self.release + (f" ({self.mode})" if self.mode else "")

    def native_share_groups(self) -> bool:
        """The backend runs KIP-932 share groups of its own: 4.1+ at share.version >= 1 (4.1 lists
        the share APIs even at level 0), or 4.0's early access, which has no feature level and
        lists ShareGroupHeartbeat v0 only when it is switched on (4.1 made it v1)."""
        return self.finalized.get("share.version", 0) >= 1 or self.versions.get(76, (1, 1))[0] == 0

    def differences(self) -> list[str]:
        """What clients see differently on this backend (one phrase each)."""
        found = [text for api, version, text in OPTIONAL if self.versions.get(api, (0, -1))[1] < version]
        if self.topic_ids is False or self.versions.get(3, (0, -1))[1] < 10:
            found.append("topic ids minted by kshare (the backend has none)")
        if self.native_share_groups():
            found.append("the backend's own share groups are not reachable through kshare, which serves its own")
        return found


def refusal(profile: BackendProfile, write_mode: str | None, refresh: bool) -> str | None:
    """The one line refusing ``profile``'s backend for kshare (``write_mode``: the topic
    persister's mode, None for a persister that writes nothing there), or None when it serves all."""
    versions = profile.versions
    head = f"backend {profile.label()}, from its ApiVersions"
    for need in CORE + (STATE_TOPIC if write_mode else ()):
        if need.unmet(versions):
            return f"{head}: kshare needs {need.describe(versions)}: {_UPGRADE}; {_DOCS}"
    if write_mode is None:
        return None
    for need in MODE_NEEDS[write_mode] + ((REFRESH_NEED,) if write_mode == "fenced" and refresh else ()):
        if need.unmet(versions):
            fix = _fix(versions)
            return f"{head}: state.write.mode = {write_mode!r} needs {need.describe(versions)}: {fix}; {_DOCS}"
    return None


def _fix(versions: Mapping[int, tuple[int, int]]) -> str:
    """What to do instead: a mode this backend serves (fenced first: it fences like transactional
    and costs less), or an upgrade."""
    for mode in ("fenced", "transactional"):
        needs = MODE_NEEDS[mode] + ((REFRESH_NEED,) if mode == "fenced" else ())
        if not any(need.unmet(versions) for need in needs):
            return "use state.write.mode = 'fenced' (the default)" if mode == "fenced" else \
                f"use state.write.mode = {mode!r}, or {_UPGRADE}"
    return _UPGRADE


async def check_backend(bootstrap_servers: str, security: Any, *, write_mode: str | None, refresh: bool,
                        timeout_s: float = 30.0, setup: ClusterConnectionStates | None = None) -> BackendProfile:
    """Ask the backend (its first bootstrap server that answers) for its ApiVersions and topic ids;
    raise :class:`BackendIncompatibleError` with the refusal line, or log one INFO line naming the
    release and what differs, and return the profile. A connection failure raises
    :class:`BrokerConnError` (the CLI then names the cause: TLS, SASL, nothing listening). ``setup``:
    the sidecar's connection setup timeouts (backend/connection_states.py)."""
    profile = await _ask(bootstrap_servers, security, timeout_s, setup)
    line = refusal(profile, write_mode, refresh)
    if line is not None:
        raise BackendIncompatibleError(line)
    differs = profile.differences()
    log.info("backend %s, from its ApiVersions: serves kshare%s; %s", profile.label(),
             f" and state.write.mode = {write_mode!r}" if write_mode else "",
             "differs: " + "; ".join(differs) if differs else "nothing differs")
    return profile


async def _ask(bootstrap_servers: str, security: Any, timeout_s: float,
               setup: ClusterConnectionStates | None = None) -> BackendProfile:
    last: Exception | None = None
    for host, port in parse_bootstrap(bootstrap_servers):
        conn = BrokerConn(host, port, security=security, connect_timeout_s=min(10.0, timeout_s), setup=setup)
        try:
            return await _profile(conn, timeout_s)
        except (BrokerConnError, TimeoutError, OSError) as exc:
            last = exc
        finally:
            await conn.close()
    raise BrokerConnError(f"no backend bootstrap server answered ApiVersions ({bootstrap_servers}): {last}")


async def _call(conn: BrokerConn, api_key: int, version: int, timeout_s: float, **values: Any) -> Any:
    module = request_module(api_key, version)
    cls = next(getattr(module, name) for name in dir(module) if name.endswith("Request") and
               getattr(getattr(module, name), "__api_key__", None) == api_key)
    payload = await conn.request(request_payload(make(cls, **values), 0, "kshare"), timeout_s=timeout_s)
    return decode_response(bytes(payload), load_response_schema(api_key, version))[1]


async def _profile(conn: BrokerConn, timeout_s: float) -> BackendProfile:
    # v0 first: every Kafka since 0.10 answers it (a newer version to an older broker gets a v0
    # error answer); v3+ (2.4+) adds the features, v4 those whose lowest level is 0 (KIP-1022).
    answer = await _call(conn, 18, 0, timeout_s)
    if answer.error_code:
        raise BrokerConnError(f"the backend refused ApiVersions: {ErrorCode(answer.error_code).name}")
    versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
    profile = BackendProfile(versions)
    if versions[18][1] >= 3:
        answer = await _call(conn, 18, min(versions[18][1], 4), timeout_s, client_software_name="kshare",
                             client_software_version="1")
        profile.finalized = {str(f.name): int(f.max_version_level) for f in answer.finalized_features}
    metadata = max((v for v in range(1, 13) if versions[3][0] <= v <= versions[3][1]), default=None) \
        if 3 in versions else None
    if metadata is not None and metadata >= 10:
        answer = await _call(conn, 3, metadata, timeout_s, topics=None, allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False)
        profile.topic_ids = _has_topic_ids(answer.topics)
    return profile


def _has_topic_ids(topics: Iterable[Any]) -> bool | None:
    """True when the topics carry ids, False when they are zero, None when there is no topic."""
    ids = [t.topic_id for t in topics if not t.is_internal]
    if not ids:
        return None
    return any(topic_id not in (None, uuid.UUID(int=0)) for topic_id in ids)
