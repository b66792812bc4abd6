"""Hostile *authenticated* clients (tests/e2e/test_hostile_clients.py): a SASL_PLAINTEXT listener on
native Kafka 4.4 and on a sidecar over Kafka 3.9, and a blocking client that authenticates with
SASL PLAIN from a chosen loopback address and then sends what it likes.

The client is the project's blocking kio connection (protocol/blocking.py) after a SASL PLAIN
exchange done by hand (SaslHandshake v1, SaslAuthenticate v2), so the hostile requests are exactly
the frames a broker would get from any authenticated client.
"""

from __future__ import annotations

import socket
import time
import uuid

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from kshare_sidecar.protocol.blocking import BlockingConnection
from kshare_sidecar.testing.kafka import KafkaBroker, free_port

USERS = {"alice": "alice-Plain-4f1", "mallory": "mallory-Plain-9c2"}
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{u}="{p}"' for u, p in USERS.items()) + ";"


class SaslPlainBroker(KafkaBroker):
    """Kafka with a SASL_PLAINTEXT listener (PLAIN, the USERS) beside its PLAINTEXT one."""

    sasl_port = 0

    def _properties(self) -> dict[str, str]:
        props = super()._properties()
        self.sasl_port = self.sasl_port or free_port()
        props["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
        props["advertised.listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
        props["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
        props["listener.name.sasl_plaintext.sasl.enabled.mechanisms"] = "PLAIN"
        props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = JAAS
        return props

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


def plain(user: str) -> dict:
    """confluent-kafka settings for a PLAIN user."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user]}


class AuthedConnection(BlockingConnection):
    """A blocking connection from ``source`` (a loopback address) that has authenticated with SASL
    PLAIN as ``user``. Raises ConnectionError if the server closes it before that."""

    def __init__(self, host: str, port: int, user: str = "mallory", *, source: str = "127.0.0.1",
                 timeout: float = 15.0) -> None:
        self.address = f"{host}:{port}"
        self.client_id = f"hostile-{user}"
        self.sock = socket.create_connection((host, port), timeout=timeout, source_address=(source, 0))
        self.sock.settimeout(timeout)
        self._correlation = 0
        try:
            hs = self.call(SaslHandshakeRequest(mechanism="PLAIN"))
            if hs.error_code.value != 0:
                raise ConnectionError(f"SaslHandshake refused: {hs.error_code.name}")
            auth = self.call(SaslAuthenticateRequest(auth_bytes=b"\0" + user.encode() + b"\0" +
                                                     USERS[user].encode()))
            if auth.error_code.value != 0:
                raise ConnectionError(f"SaslAuthenticate refused: {auth.error_code.name}")
        except BaseException:
            self.close()
            raise

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the server closes (EOF or reset) within ``timeout``; False if it stays open."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


def member_id() -> str:
    """A member id as clients make them (22 characters of a UUID's base64, like Kafka's Uuid)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def wait_for(predicate, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def share_fetch(conn: BlockingConnection, group: str, member: str, epoch: int, topic_id, partitions=(0,), *,
                wait_ms: int = 0, max_records: int = 500, max_bytes: int = 50 * 1024 * 1024, acks=None):
    """One ShareFetch v1 (what Kafka 4.4 and the sidecar both serve); ``acks``: {partition: [(first,
    last, type)]}. Returns (response, seconds it took)."""
    import datetime

    from kio.schema.share_fetch.v1.request import (
        AcknowledgementBatch,
        FetchPartition,
        FetchTopic,
        ShareFetchRequest,
    )
    from kio.static.primitive import i8, i32, i32Timedelta, i64

    acks = acks or {}
    topics = () if topic_id is None else (FetchTopic(topic_id=topic_id, partitions=tuple(
        FetchPartition(partition_index=i32(p), acknowledgement_batches=tuple(
            AcknowledgementBatch(first_offset=i64(f), last_offset=i64(last), acknowledge_types=(i8(t),))
            for f, last, t in acks.get(p, ())))
        for p in partitions)),)
    request = ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=i32(epoch),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=wait_ms)), min_bytes=i32(1),
        max_bytes=i32(max_bytes), max_records=i32(max_records), batch_size=i32(max_records), topics=topics,
        forgotten_topics_data=())
    started = time.monotonic()
    response = conn.call(request)
    return response, time.monotonic() - started


def acquired(response) -> list[tuple[int, int, int]]:
    """(first offset, last offset, delivery count) of every AcquiredRecords in a ShareFetch answer."""
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in response.responses for p in t.partitions for a in p.acquired_records]


def topic_id(conn: BlockingConnection, topic: str):
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    answer = conn.call(MetadataRequest(topics=(MetadataRequestTopic(name=topic, topic_id=None),),
                                       allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return answer.topics[0].topic_id


def rss_mib(pid: int) -> float:
    from pathlib import Path

    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class LegitConsumer:
    """A well-behaved confluent-kafka ShareConsumer (PLAIN user alice, implicit acknowledgement) in a
    thread: what the hostile client must not starve. ``records``: (partition, offset, delivery count,
    monotonic time received)."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        import threading

        self.records: list[tuple[int, int, int, float]] = []
        self.errors: list = []
        self._stop = threading.Event()
        self._args = (bootstrap, group, topic)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import ShareConsumer

        bootstrap, group, topic = self._args
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "error_cb": self.errors.append,
                                  "log_level": 0, **plain("alice")})
        consumer.subscribe([topic])
        try:
            while not self._stop.is_set():
                for m in consumer.poll(0.5):
                    if m.error() is None:
                        self.records.append((m.partition(), m.offset(), m.delivery_count(), time.monotonic()))
        finally:
            consumer.close()

    def offsets(self) -> set[tuple[int, int]]:
        return {(p, o) for p, o, _, _ in self.records}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def join(conn: BlockingConnection, group: str, member: str, topic: str, timeout_s: float = 60.0) -> None:
    """ShareGroupHeartbeat until the member is assigned a partition (Kafka initializes a share
    group's state for a topic only once a member subscribed to it has an assignment)."""
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
    from kio.schema.types import TopicName
    from kio.static.primitive import i8, i32

    # FindCoordinator first, as clients do: it is what makes a broker create __consumer_offsets
    conn.call(FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,)))
    epoch, deadline = 0, time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = conn.call(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=i32(epoch),
                                                      subscribed_topic_names=(TopicName(topic),) if epoch == 0
                                                      else None))
        if answer.error_code.value in (14, 15, 16):  # the coordinator is loading: as a client, ask again
            time.sleep(0.5)
            continue
        assert answer.error_code.value == 0, answer
        epoch = answer.member_epoch
        if answer.assignment is not None and answer.assignment.topic_partitions:
            return
        time.sleep(0.5)
    raise AssertionError(f"member {member} of {group} got no assignment in {timeout_s} s")
