"""orjson codec for the state topic.

Keys are JSON arrays whose first element names the kind, so compaction keeps exactly one
record per entity:

* ``["p", group_id, topic_id, partition]`` — one share-partition (value: a complete snapshot);
* ``["g", group_id]`` — a group record (epochs, initialized share-partitions, configs, the
  subscribed topics' metadata, the assignor);
* ``["m", group_id, member_id]`` — one member of a share group (subscription, epochs, current and
  target assignment), placed on its group record's state partition;
* ``["t", topic_name]`` — the topic-id map entry for one topic (value: its stable UUID);
* ``["o", state_partition]`` — the owner epoch of the sidecar that last took over that state
  partition (value ``{"v": 1, "e": epoch}``): the backend-derived source of owner epochs. In a
  cluster of sidecars also ``"n"``, the node id of that sidecar, and ``"r": true`` once it handed
  the partition over (its in-flight delivery counts written first: the next owner waits for it);
  older builds read the epoch only;
* ``["l", state_partition]`` — the topic's layout (value ``{"v": 1, "layout": name}``): how
  share-partitions are placed on the state partitions (persist/layout.py). One per partition, so
  whichever partition a sidecar replays tells it; written only once the whole topic is in it.

Values are JSON objects with a version field ``"v"``; a ``None`` value is a tombstone. Any key
or value this module does not understand raises :class:`CodecError`; recovery skips such a
record, logs it with its offset and counts it.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

from kshare_sidecar.persist.model import DeliveryState, PartitionState, SharePartitionKey, StateBatch
from kshare_sidecar.persist.records import NO_EPOCH, GroupRecord, MemberRecord, StoredPartition

VALUE_VERSION = 1

KIND_PARTITION = "p"
KIND_GROUP = "g"
KIND_TOPIC_ID = "t"
KIND_OWNER = "o"
KIND_LAYOUT = "l"
KIND_MEMBER = "m"
KINDS = (KIND_PARTITION, KIND_GROUP, KIND_TOPIC_ID, KIND_OWNER, KIND_LAYOUT, KIND_MEMBER)


class CodecError(ValueError):
    """A record the codec cannot decode (garbage, unknown kind, unknown version)."""


# ------------------------------------------------------------------------------------- keys
_intern = sys.intern

def partition_key(key: SharePartitionKey) -> bytes:
    return orjson.dumps([KIND_PARTITION, key.group_id, key.topic_id, key.partition])


def group_key(group_id: str) -> bytes:
    return orjson.dumps([KIND_GROUP, group_id])


def topic_id_key(topic_name: str) -> bytes:
    return orjson.dumps([KIND_TOPIC_ID, topic_name])


def owner_key(state_partition: int) -> bytes:
    return orjson.dumps([KIND_OWNER, state_partition])


def layout_key(state_partition: int) -> bytes:
    return orjson.dumps([KIND_LAYOUT, state_partition])


def member_key(group_id: str, member_id: str) -> bytes:
    return orjson.dumps([KIND_MEMBER, group_id, member_id])


def decode_key(raw: bytes | None) -> tuple[str, Any]:
    """-> (kind, identity): SharePartitionKey, group id, topic name, state partition, or
    (group id, member id)."""
    if raw is None:
        raise CodecError("record has no key")
    try:
        parts = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"key is not JSON: {exc}") from None
    if not isinstance(parts, list) or not parts:
        raise CodecError("key is not a non-empty JSON array")
    kind = parts[0]
    if kind == KIND_PARTITION and len(parts) == 4:
        _, group_id, topic_id, partition = parts
        if type(group_id) is str and type(topic_id) is str and type(partition) is int:
            # interned: 100,000 keys name a few thousand groups and topics (memory held per key)
            return kind, SharePartitionKey(_intern(group_id), _intern(topic_id), partition)
    elif kind in (KIND_GROUP, KIND_TOPIC_ID) and len(parts) == 2 and isinstance(parts[1], str):
        return kind, parts[1]
    elif kind in (KIND_OWNER, KIND_LAYOUT) and len(parts) == 2 and type(parts[1]) is int:
        return kind, parts[1]
    elif kind == KIND_MEMBER and len(parts) == 3 and isinstance(parts[1], str) and isinstance(parts[2], str):
        return kind, (parts[1], parts[2])
    raise CodecError(f"unknown key kind or shape: {parts[:1]!r} with {len(parts)} elements")


# ----------------------------------------------------------------------------------- values
def encode_partition(stored: StoredPartition) -> bytes:
    s = stored.state
    return orjson.dumps({
        "v": VALUE_VERSION,
        "se": s.state_epoch,
        "le": s.leader_epoch,
        "ae": stored.assignment_epoch,
        "so": s.start_offset,
        "b": [_encode_batch(b) for b in s.state_batches],
    })


def _encode_batch(b: StateBatch) -> list:
    """[first, last, state, count], plus a fifth element only for kshare's extensions (a backoff
    deadline ``at``, a pending dead-letter write ``dlq``): records of groups without them keep the
    four-element form older builds read."""
    out: list = [b.first_offset, b.last_offset, int(b.delivery_state), b.delivery_count]
    if b.available_at is not None or b.dead_letter is not None:
        ext: dict = {}
        if b.available_at is not None:
            ext["at"] = b.available_at
        if b.dead_letter is not None:
            ext["dlq"] = b.dead_letter
        out.append(ext)
    return out


def encode_group(record: GroupRecord) -> bytes:
    """``epoch``, ``init`` and ``cfg``; ``ae`` (assignment epoch), ``asg`` (assignor) and ``tm``
    (subscribed topic name -> [topic id, partitions]) once the group has members' records beside
    it; ``oe``, the writer's owner epoch. Older builds also wrote ``type`` (always "share") and ``topics`` (subscriptions), which
    nothing read; :func:`decode_group` ignores them, and older builds read these records (they
    ignore the fields they do not know)."""
    value: dict[str, Any] = {
        "v": VALUE_VERSION,
        "epoch": record.group_epoch,
        "init": {t: list(ps) for t, ps in record.initialized.items()},
        "cfg": dict(record.configs),
    }
    if record.assignment_epoch is not None:
        value["ae"] = record.assignment_epoch
    if record.assignor is not None:
        value["asg"] = record.assignor
    if record.topic_metadata:
        value["tm"] = {name: [tid, n] for name, (tid, n) in record.topic_metadata.items()}
    if record.owner_epoch != NO_EPOCH:
        value["oe"] = record.owner_epoch
    return orjson.dumps(value)


def encode_member(record: MemberRecord) -> bytes:
    """``sub`` (subscribed topic names), ``rack``, ``cid``, ``host``, ``e`` / ``pe`` (member epoch,
    previous member epoch), ``a`` (assigned partitions by topic id), ``t`` (the target
    assignment, absent when the member has none yet) and ``oe``, the writer's owner epoch."""
    value: dict[str, Any] = {
        "v": VALUE_VERSION,
        "sub": list(record.subscribed),
        "rack": record.rack_id,
        "cid": record.client_id,
        "host": record.client_host,
        "e": record.member_epoch,
        "pe": record.previous_epoch,
        "a": {t: list(ps) for t, ps in record.assignment.items()},
    }
    if record.target is not None:
        value["t"] = {t: list(ps) for t, ps in record.target.items()}
    if record.owner_epoch != NO_EPOCH:
        value["oe"] = record.owner_epoch
    return orjson.dumps(value)


def encode_topic_id(topic_id: str) -> bytes:
    return orjson.dumps({"v": VALUE_VERSION, "id": topic_id})


def encode_owner(epoch: int, node: int | None = None, released: bool = False) -> bytes:
    value: dict[str, Any] = {"v": VALUE_VERSION, "e": epoch}
    if node is not None:
        value["n"] = node
    if released:
        value["r"] = True
    return orjson.dumps(value)


def owner_record(state_partition: int, epoch: int, node: int | None, released: bool = False) -> tuple[bytes, bytes]:
    """An owner record naming its sidecar (``released``: the handover mark)."""
    return owner_key(state_partition), encode_owner(epoch, node, released)


def encode_layout(layout: str) -> bytes:
    return orjson.dumps({"v": VALUE_VERSION, "layout": layout})


def _load_value(raw: bytes) -> dict:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CodecError(f"value is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CodecError("value is not a JSON object")
    version = value.get("v")
    if version != VALUE_VERSION:
        raise CodecError(f"unknown value version {version!r} (this build reads version {VALUE_VERSION})")
    return value


def _int(value: dict, name: str) -> int:
    v = value.get(name)
    if type(v) is not int:
        raise CodecError(f"field {name!r} missing or not an integer")
    return v


def decode_partition(raw: bytes) -> StoredPartition:
    value = _load_value(raw)
    batches_raw = value.get("b", [])
    if not isinstance(batches_raw, list):
        raise CodecError("field 'b' is not a list")
    se, le, so, ae = value.get("se"), value.get("le"), value.get("so"), value.get("ae")
    if not batches_raw and type(se) is int and type(le) is int and type(so) is int and type(ae) is int:
        # the common record when replaying many share-partitions (an idle one): no batches
        return StoredPartition(PartitionState(se, le, so, ()), ae)
    batches: list[StateBatch] = []
    try:
        for raw in batches_raw:
            first, last, code, count = raw[:4]
            if not all(type(x) is int for x in (first, last, code, count)):
                raise CodecError("state batch fields must be integers")
            at = dlq = None
            if len(raw) == 5:
                ext = raw[4]
                if not isinstance(ext, dict):
                    raise CodecError("state batch extension is not an object")
                at, dlq = ext.get("at"), ext.get("dlq")
                if at is not None and type(at) is not int or dlq is not None and not isinstance(dlq, str):
                    raise CodecError("state batch extension has a bad 'at' or 'dlq'")
            elif len(raw) != 4:
                raise CodecError(f"state batch has {len(raw)} fields")
            batches.append(StateBatch(first, last, DeliveryState(code), count, at, dlq))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, CodecError):
            raise
        raise CodecError(f"bad state batch: {exc}") from None
    state = PartitionState(state_epoch=_int(value, "se"), leader_epoch=_int(value, "le"),
                           start_offset=_int(value, "so"), state_batches=tuple(batches))
    return StoredPartition(state, assignment_epoch=_int(value, "ae"))


def _partitions(value: Any) -> dict[str, tuple[int, ...]]:
    """topic id -> partitions (a JSON object of integer lists)."""
    if not isinstance(value, dict):
        raise CodecError("partitions by topic id must be an object")
    out = {}
    for t, ps in value.items():
        if not isinstance(ps, list) or not all(type(p) is int for p in ps):
            raise CodecError(f"partitions of topic {t!r} must be a list of integers")
        out[str(t)] = tuple(ps)
    return out


def decode_group(group_id: str, raw: bytes) -> GroupRecord:
    value = _load_value(raw)
    try:
        init = {str(t): tuple(int(p) for p in ps) for t, ps in value.get("init", {}).items()}
        ae, asg = value.get("ae"), value.get("asg")
        if ae is not None and type(ae) is not int or asg is not None and not isinstance(asg, str):
            raise CodecError("group record has a bad 'ae' or 'asg'")
        tm = {}
        for name, entry in value.get("tm", {}).items():
            tid, n = entry
            if not isinstance(tid, str) or type(n) is not int:
                raise CodecError(f"group record: bad metadata of topic {name!r}")
            tm[str(name)] = (tid, n)
        return GroupRecord(group_id=group_id, group_epoch=_int(value, "epoch"), initialized=init,
                           configs={str(k): str(v) for k, v in value.get("cfg", {}).items()},
                           assignment_epoch=ae, assignor=asg, topic_metadata=tm, owner_epoch=_owner_epoch(value))
    except (TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, CodecError):
            raise
        raise CodecError(f"bad group record: {exc}") from None


def decode_member(ident: tuple[str, str], raw: bytes) -> MemberRecord:
    value = _load_value(raw)
    sub, rack, cid, host = value.get("sub"), value.get("rack"), value.get("cid"), value.get("host")
    if not isinstance(sub, list) or not all(isinstance(t, str) for t in sub):
        raise CodecError("member record: 'sub' must be a list of topic names")
    if rack is not None and not isinstance(rack, str) or not isinstance(cid, str) or not isinstance(host, str):
        raise CodecError("member record: bad 'rack', 'cid' or 'host'")
    target = value.get("t")
    return MemberRecord(group_id=ident[0], member_id=ident[1], subscribed=tuple(sub), rack_id=rack,
                        client_id=cid, client_host=host, member_epoch=_int(value, "e"),
                        previous_epoch=_int(value, "pe"), assignment=_partitions(value.get("a", {})),
                        target=None if target is None else _partitions(target), owner_epoch=_owner_epoch(value))


def _owner_epoch(value: dict) -> int:
    """``oe``: the writer's owner epoch (absent in records of older builds)."""
    oe = value.get("oe", NO_EPOCH)
    if type(oe) is not int:
        raise CodecError("field 'oe' is not an integer")
    return oe


def decode_topic_id(raw: bytes) -> str:
    value = _load_value(raw)
    topic_id = value.get("id")
    if not isinstance(topic_id, str) or not topic_id:
        raise CodecError("topic-id record has no 'id'")
    return topic_id


def decode_owner(raw: bytes) -> int:
    return _int(_load_value(raw), "e")


def decode_owner_mark(raw: bytes) -> tuple[int, int | None, bool]:
    """An owner record's ``(epoch, node id or None, released)``."""
    value = _load_value(raw)
    node = value.get("n")
    return _int(value, "e"), node if type(node) is int else None, value.get("r") is True


def decode_layout(raw: bytes) -> str:
    layout = _load_value(raw).get("layout")
    if not isinstance(layout, str) or not layout:
        raise CodecError("layout record has no 'layout'")
    return layout


def decode(raw_key: bytes | None, raw_value: bytes | None) -> tuple[str, Any, Any]:
    """-> (kind, identity, entity or None for a tombstone)."""
    kind, ident = decode_key(raw_key)
    if raw_value is None:
        return kind, ident, None
    if kind == KIND_PARTITION:
        return kind, ident, decode_partition(raw_value)
    if kind == KIND_GROUP:
        return kind, ident, decode_group(ident, raw_value)
    if kind == KIND_OWNER:
        return kind, ident, decode_owner(raw_value)
    if kind == KIND_LAYOUT:
        return kind, ident, decode_layout(raw_value)
    if kind == KIND_MEMBER:
        return kind, ident, decode_member(ident, raw_value)
    return kind, ident, decode_topic_id(raw_value)


def encode(kind: str, ident: Any, entity: Any) -> tuple[bytes, bytes | None]:
    """The record of an entity (None: a tombstone), its bytes exactly sized: orjson's output keeps a
    4 KiB buffer behind each value, and a burst of 100,000 queued state writes (a thousand groups
    initializing their share-partitions) held 800 MB of them."""
    key, value = _encode(kind, ident, entity)
    return memoryview(key).tobytes(), None if value is None else memoryview(value).tobytes()


def _encode(kind: str, ident: Any, entity: Any) -> tuple[bytes, bytes | None]:
    if kind == KIND_PARTITION:
        return partition_key(ident), None if entity is None else encode_partition(entity)
    if kind == KIND_GROUP:
        return group_key(ident), None if entity is None else encode_group(entity)
    if kind == KIND_TOPIC_ID:
        return topic_id_key(ident), None if entity is None else encode_topic_id(entity)
    if kind == KIND_OWNER:
        return owner_key(ident), None if entity is None else encode_owner(entity)
    if kind == KIND_LAYOUT:
        return layout_key(ident), None if entity is None else encode_layout(entity)
    if kind == KIND_MEMBER:
        return member_key(*ident), None if entity is None else encode_member(entity)
    raise ValueError(f"unknown kind {kind!r}")
