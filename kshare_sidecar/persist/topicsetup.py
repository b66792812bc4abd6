"""Creating and checking the state topic (for :class:`~kshare_sidecar.persist.topic.TopicPersister`).

Why a module of its own: this is admin-client talk that runs once at start-up, before any writer
exists — the topic persister's writing and replaying never need it. The persister keeps the one
decision that changes it (adopting an existing topic's partition count); these functions only ask
the backend and create the topic.

* A missing topic is created (when allowed) with ``cleanup.policy=compact`` and the settings of
  :data:`DEFAULT_TOPIC_CONFIGS`; the topic is never named in a Metadata request before it exists.
* An existing topic that is not compacted is refused with a message naming the topic and the fix
  (with ``delete`` the state of idle share-partitions would be lost).
* A backend that does not serve an API the configured ``state.write.mode`` needs is refused with
  one line naming the API and the mode to use (:func:`check_write_mode`), before any writer
  starts (on tansu, which has no EndTxn, the transactional writers' start stopped the broker).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.protocol.admin import ApiVersionRequest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError, for_code

from kio.schema.errors import ErrorCode

from kshare_sidecar.persist.errors import BackendWriteError, StateTopicMisconfiguredError, WriteModeUnsupportedError

log = logging.getLogger("kshare_sidecar.persist.topic")

UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.unknown_topic_or_partition)

DEFAULT_TOPIC_CONFIGS: dict[str, str] = {
    "cleanup.policy": "compact",
    # Roll segments often so superseded snapshots become cleanable soon (the active segment is
    # never compacted); small segments keep each cleaning pass short.
    "segment.ms": "600000",  # 10 minutes
    "segment.bytes": "16777216",  # 16 MiB
    # Clean as soon as 10% of the log is superseded snapshots (broker default is 50%).
    "min.cleanable.dirty.ratio": "0.1",
    # Tombstones stay readable for an hour: long enough for any replay in progress to see them.
    "delete.retention.ms": "3600000",
}


#: The backend APIs each ``state.write.mode`` sends (docs/persistence.md, "Write modes"), by key.
#: ``fenced`` also relies on the partition leader refusing an older producer epoch, which no
#: ApiVersions answer shows (tests/integration/test_epoch_writer.py checks it per backend).
WRITE_MODE_APIS: dict[str, dict[int, str]] = {
    "fenced": {22: "InitProducerId"},
    "idempotent": {22: "InitProducerId"},
    "transactional": {22: "InitProducerId", 24: "AddPartitionsToTxn", 26: "EndTxn"},
}


def missing_apis(mode: str, advertised: Collection[int]) -> list[str]:
    """The names of the APIs ``mode`` needs that ``advertised`` (API keys) lacks."""
    return [name for key, name in WRITE_MODE_APIS[mode].items() if key not in advertised]


async def check_write_mode(admin: AIOKafkaAdminClient, mode: str) -> None:
    """Refuse ``mode`` when the backend does not serve every API it needs, naming the API and
    the mode to use instead."""
    client = admin._client  # aiokafka 0.14 (pinned): the admin's AIOKafkaClient
    node = client.get_random_node()
    if node is None:
        await client.force_metadata_update()
        node = client.get_random_node()
    response = await client.send(node, ApiVersionRequest())
    if response.error_code:
        raise BackendWriteError(f"the backend refused ApiVersions: {for_code(response.error_code).__name__}")
    advertised = {entry[0] for entry in response.api_versions}
    missing = missing_apis(mode, advertised)
    if missing:
        # fenced is suggested, not idempotent: it needs no more of the backend and fences better
        fix = "use state.write.mode = 'fenced' (the default)" if not missing_apis("fenced", advertised) else \
            "this backend cannot hold kshare's state (no idempotent producer)"
        raise WriteModeUnsupportedError(
            f"state.write.mode = {mode!r} needs {', '.join(missing)}, which the backend does not serve: {fix}; "
            f"docs/persistence.md, \"Write modes\"")


class _UnknownStateTopic(BackendWriteError):
    """The broker asked does not know the state topic (yet)."""


async def describe_partitions(admin: AIOKafkaAdminClient, topic: str) -> int | None:
    """The partition count of ``topic``; None when it does not exist."""
    # Never ask for the topic by name before it exists: a Metadata request naming it would
    # let a broker with auto.create.topics.enable create it with cleanup.policy=delete.
    if topic not in await admin.list_topics():
        return None
    (meta,) = await admin.describe_topics([topic])
    error = meta.get("error_code", 0)
    if error == UNKNOWN_TOPIC_OR_PARTITION:
        return None
    if error:
        raise BackendWriteError(f"cannot describe state topic {topic!r}: {for_code(error).__name__}")
    return len(meta["partitions"])


async def create_or_describe(admin: AIOKafkaAdminClient, topic: str, *, partitions: int, replication_factor: int,
                             configs: dict[str, str], create: bool, timeout_s: float) -> int:
    """The partition count of ``topic``, creating it first when it is missing (``create``: allowed;
    ``partitions``, ``replication_factor``, ``configs``: for a new topic only)."""
    count = await describe_partitions(admin, topic)
    if count is not None:
        return count
    if not create:
        raise StateTopicMisconfiguredError(
            f"state topic {topic!r} does not exist and create_topic is off; create it with "
            f"cleanup.policy=compact or let kshare create it")
    # aiokafka only accepts replication_factor=-1 (broker default, CreateTopics v4+) when
    # replica_assignments is not None; an empty mapping assigns nothing explicitly.
    new = NewTopic(name=topic, num_partitions=partitions, replication_factor=replication_factor,
                   topic_configs=configs, replica_assignments={} if replication_factor == -1 else None)
    response = await admin.create_topics([new])
    for name, code, *rest in response.topic_errors:
        if code and not issubclass(for_code(code), TopicAlreadyExistsError):
            message = rest[0] if rest else ""
            raise BackendWriteError(
                f"cannot create state topic {name!r}: {for_code(code).__name__} {message or ''}".strip())
        if not code:
            log.info("created state topic %r (%d partitions, configs %s)", name, partitions, configs)
    deadline = time.monotonic() + timeout_s
    while (count := await describe_partitions(admin, topic)) is None:
        if time.monotonic() > deadline:
            raise BackendWriteError(f"state topic {topic!r} did not appear after creation")
        await asyncio.sleep(0.1)
    return count


async def check_compacted(admin: AIOKafkaAdminClient, topic: str, timeout_s: float) -> None:
    """Refuse a state topic whose cleanup.policy is not ``compact``, naming the fix."""
    policy = await cleanup_policy_when_known(admin, topic, timeout_s)
    if policy != "compact":
        raise StateTopicMisconfiguredError(
            f"state topic {topic!r} exists with cleanup.policy={policy!r}, but kshare keeps share-group "
            f"state there and needs cleanup.policy=compact (with 'delete' the state of idle share-partitions "
            f"would be lost). Fix: kafka-configs.sh --bootstrap-server <backend> --alter --entity-type topics "
            f"--entity-name {topic} --add-config cleanup.policy=compact  (or: rpk topic alter-config "
            f"{topic} --set cleanup.policy=compact), or configure another state topic name.")


async def cleanup_policy_when_known(admin: AIOKafkaAdminClient, topic: str, timeout_s: float) -> str:
    """The state topic's cleanup.policy. On a multi-broker backend the broker the admin client
    asks may learn of a topic created a moment ago only after a metadata round: UNKNOWN_TOPIC
    is retried until ``timeout_s`` (the request timeout; a start-up race, seen with three brokers)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await cleanup_policy(admin, topic)
        except _UnknownStateTopic:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def cleanup_policy(admin: AIOKafkaAdminClient, topic: str) -> str:
    """``topic``'s cleanup.policy as the backend reports it (comma-separated, spaces removed)."""
    responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=None)])
    for response in responses:
        for resource in response.resources:
            error_code, error_message, _type, _name, entries = resource[:5]
            if error_code:
                cls = _UnknownStateTopic if error_code == UNKNOWN_TOPIC_OR_PARTITION else BackendWriteError
                raise cls(f"cannot read configs of state topic {topic!r}: "
                          f"{for_code(error_code).__name__} {error_message or ''}")
            for entry in entries:
                if entry[0] == "cleanup.policy":
                    return ",".join(part.strip() for part in (entry[1] or "").split(","))
    raise StateTopicMisconfiguredError(f"state topic {topic!r}: cleanup.policy not reported")
