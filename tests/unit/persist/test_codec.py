"""Codec: round trips, stable keys, and rejection of anything unknown."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.persist import codec
from kshare_sidecar.persist.codec import CodecError
from kshare_sidecar.persist.model import DeliveryState, PartitionState, SharePartitionKey, StateBatch
from kshare_sidecar.persist.ownership import group_home, state_partition_for
from kshare_sidecar.persist.records import GroupRecord, MemberRecord, StoredPartition

keys = st.builds(SharePartitionKey, st.text(min_size=1, max_size=20), st.uuids().map(str), st.integers(0, 10_000))
batches = st.lists(st.builds(StateBatch, st.integers(0, 2**40), st.integers(0, 2**40),
                             st.sampled_from([DeliveryState.AVAILABLE, DeliveryState.ACKNOWLEDGED,
                                              DeliveryState.ARCHIVED]), st.integers(0, 100)), max_size=5)
stored = st.builds(lambda se, le, ae, so, b: StoredPartition(PartitionState(se, le, so, tuple(b)), ae),
                   st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1), st.integers(-1, 2**31 - 1),
                   st.integers(-1, 2**62), batches)


@given(key=keys, value=stored)
def test_partition_roundtrip(key, value):
    raw_key, raw_value = codec.encode(codec.KIND_PARTITION, key, value)
    assert codec.decode(raw_key, raw_value) == (codec.KIND_PARTITION, key, value)
    assert codec.partition_key(key) == raw_key  # deterministic: compaction needs identical keys
    assert codec.decode(raw_key, None) == (codec.KIND_PARTITION, key, None)


def test_group_and_topic_id_roundtrip():
    rec = GroupRecord("g", group_epoch=3, initialized={"tid": (0, 1, 2)},
                      configs={"share.record.lock.duration.ms": "15000"})
    assert codec.decode(*codec.encode(codec.KIND_GROUP, "g", rec)) == (codec.KIND_GROUP, "g", rec)
    assert codec.decode(*codec.encode(codec.KIND_TOPIC_ID, "orders", "u-1")) == (codec.KIND_TOPIC_ID, "orders", "u-1")


def test_layout_record_roundtrip():
    raw_key, raw_value = codec.encode(codec.KIND_LAYOUT, 3, "topic-partition")
    assert raw_key == b'["l",3]' and orjson.loads(raw_value) == {"v": 1, "layout": "topic-partition"}
    assert codec.decode(raw_key, raw_value) == (codec.KIND_LAYOUT, 3, "topic-partition")


def test_group_record_of_an_older_build_decodes():
    """Records written before ``type`` and ``topics`` were dropped (nothing read them) still decode,
    to the same record; new records no longer carry them."""
    old = (b'{"v":1,"type":"share","epoch":4,"topics":["a","b"],"init":{"tid":[0,2]},'
           b'"cfg":{"share.isolation.level":"read_committed"}}')
    kind, ident, rec = codec.decode(codec.group_key("g"), old)
    assert (kind, ident) == (codec.KIND_GROUP, "g")
    assert rec == GroupRecord("g", group_epoch=4, initialized={"tid": (0, 2)},
                              configs={"share.isolation.level": "read_committed"})
    assert set(orjson.loads(codec.encode_group(rec))) == {"v", "epoch", "init", "cfg"}


parts = st.dictionaries(st.uuids().map(str), st.lists(st.integers(0, 10_000), max_size=4).map(tuple), max_size=3)
members = st.builds(MemberRecord, st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=36),
                    st.lists(st.text(min_size=1, max_size=10), max_size=3).map(tuple),
                    st.none() | st.text(max_size=5), st.text(max_size=10), st.text(max_size=20),
                    st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1), parts, st.none() | parts)


@given(member=members)
def test_member_roundtrip_and_placement_with_its_group(member):
    ident = (member.group_id, member.member_id)
    raw_key, raw_value = codec.encode(codec.KIND_MEMBER, ident, member)
    assert codec.decode(raw_key, raw_value) == (codec.KIND_MEMBER, ident, member)
    assert codec.decode(raw_key, None) == (codec.KIND_MEMBER, ident, None)
    assert raw_key == codec.member_key(*ident)
    # the group's coordinator owns its members' records: same state partition as the group record
    for n in (1, 7, 16):
        assert state_partition_for(codec.KIND_MEMBER, ident, n, "topic-partition") == group_home(member.group_id, n)
        assert state_partition_for(codec.KIND_MEMBER, ident, n, "key") == group_home(member.group_id, n)


def test_group_record_with_members_roundtrip_and_older_builds_read_it():
    rec = GroupRecord("g", group_epoch=5, initialized={"tid": (0, 1)}, configs={}, assignment_epoch=4,
                      assignor="simple", topic_metadata={"orders": ("tid", 2)}, owner_epoch=7)
    raw = codec.encode_group(rec)
    assert codec.decode(codec.group_key("g"), raw) == (codec.KIND_GROUP, "g", rec)
    assert codec.decode(codec.group_key("g"), raw)[2].owner_epoch == 7  # not compared: checked alone
    member = MemberRecord("g", "m", member_epoch=3, owner_epoch=7)
    assert codec.decode(*codec.encode(codec.KIND_MEMBER, ("g", "m"), member))[2].owner_epoch == 7
    assert codec.decode_group("g", b'{"v":1,"epoch":1}').owner_epoch == -1  # older builds: no owner epoch
    # what an older build's decoder reads from it: epoch, init and cfg, the rest ignored
    value = orjson.loads(raw)
    assert (value["epoch"], value["init"], value["cfg"]) == (5, {"tid": [0, 1]}, {})


def test_value_has_version_field():
    value = orjson.loads(codec.encode_topic_id("x"))
    assert value["v"] == codec.VALUE_VERSION


@pytest.mark.parametrize("raw_key,raw_value", [
    (b"not json", b"{}"),
    (b'"string"', b"{}"),
    (b"[]", b"{}"),
    (b'["q","x"]', b'{"v":1}'),
    (b'["p","g","t","0"]', b'{"v":1}'),
    (b'["t","name"]', b'{"v":2,"id":"x"}'),
    (b'["t","name"]', b'{"id":"x"}'),
    (b'["t","name"]', b'[1]'),
    (b'["p","g","t",0]', b'{"v":1,"se":1,"le":1,"ae":1,"so":1,"b":[[1,2,3,4]]}'),  # state 3 unknown
    (b'["p","g","t",0]', b'{"v":1,"se":1,"le":1,"ae":1,"so":1,"b":[[1,2]]}'),
    (b'["p","g","t",0]', b'{"v":1,"le":1,"ae":1,"so":1}'),
    (b'["g","g"]', b'{"v":1,"epoch":1,"init":[1]}'),
    (b'["l","3"]', b'{"v":1,"layout":"topic-partition"}'),
    (b'["l",3]', b'{"v":1}'),
    (b'["g","g"]', b'{"v":1,"epoch":1,"ae":"1"}'),
    (b'["g","g"]', b'{"v":1,"epoch":1,"tm":{"t":["id"]}}'),
    (b'["m","g"]', b'{"v":1}'),
    (b'["m","g",3]', b'{"v":1}'),
    (b'["m","g","m"]', b'{"v":1,"sub":["t"],"rack":null,"cid":"c","host":"h","pe":1,"a":{}}'),  # no "e"
    (b'["m","g","m"]', b'{"v":1,"sub":"t","rack":null,"cid":"c","host":"h","e":1,"pe":1,"a":{}}'),
    (b'["m","g","m"]', b'{"v":1,"sub":["t"],"rack":null,"cid":"c","host":"h","e":1,"pe":1,"a":{"t":[0.5]}}'),
    (b'["m","g","m"]', b'{"v":1,"sub":["t"],"rack":null,"cid":"c","host":"h","e":1,"pe":1,"a":{},"t":[]}'),
    (b'["m","g","m"]', b'{"v":1,"sub":["t"],"rack":null,"cid":"c","host":"h","e":1,"pe":1,"a":{},"oe":"1"}'),
    (None, b"{}"),
])
def test_garbage_raises_codec_error(raw_key, raw_value):
    with pytest.raises(CodecError):
        codec.decode(raw_key, raw_value)
