"""Pure parts of kshare's extensions against naive models: the backoff formula, overlaying held
ranges onto a persisted state, the state codec's extension field (old records still readable),
the key index, and the group-config validation of the new keys."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kshare_sidecar.config import ConfigError, load_config
from kshare_sidecar.persist.codec import decode_partition, encode_partition
from kshare_sidecar.persist.model import DeliveryState, PartitionState, StateBatch
from kshare_sidecar.persist.records import StoredPartition
from kshare_sidecar.share.engine.backoff import backoff_ms
from kshare_sidecar.share.engine.holds import overlay
from kshare_sidecar.share.engine.keyorder import KeyIndex

AV, AK, AR = DeliveryState.AVAILABLE, DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED


@settings(deadline=None)
@given(st.integers(1, 12), st.integers(0, 100_000), st.floats(1.0, 10.0), st.integers(0, 1_000_000))
def test_backoff_is_min_of_exponential_and_cap(count, base, mult, cap):
    naive = 0 if base == 0 else int(min(base * mult ** (count - 1), cap))
    got = backoff_ms(count, base, mult, cap)
    assert abs(got - naive) <= 1  # float rounding of the power
    assert got <= cap and (got == 0) == (base == 0 or cap == 0)


def test_backoff_examples():
    assert [backoff_ms(n, 1500, 2.0, 5000) for n in (1, 2, 3, 4)] == [1500, 3000, 5000, 5000]
    assert backoff_ms(3, 0, 2.0, 5000) == 0


_EXT = st.sampled_from([(None, None), (None, "r"), (None, "l"), (1_000, None), (2_000, None)])


@st.composite
def states(draw):
    spso = draw(st.integers(0, 5))
    pos, batches = spso, []
    for _ in range(draw(st.integers(0, 6))):
        pos += draw(st.integers(0, 2))
        size = draw(st.integers(1, 4))
        state = draw(st.sampled_from([AV, AK, AR]))
        count = draw(st.integers(1, 3)) if state == AV else draw(st.integers(0, 3))
        batches.append(StateBatch(pos, pos + size - 1, state, count))
        pos += size
    return PartitionState(1, 1, spso, tuple(batches)), pos + 3


@st.composite
def pieces(draw, end):
    offs = sorted(set(draw(st.lists(st.integers(0, end), max_size=6))))
    out, i = [], 0
    while i < len(offs):
        first = last = offs[i]
        while i + 1 < len(offs) and offs[i + 1] == last + 1:
            i += 1
            last = offs[i]
        at, dlq = draw(_EXT)
        out.append(StateBatch(first, last, AV, draw(st.integers(0, 3)), at, dlq))
        i += 1
    return out


def _per_offset(state: PartitionState, end: int) -> dict:
    view = {o: (AV, 0, None, None) for o in range(state.start_offset, end + 1)}
    for b in state.state_batches:
        for o in range(b.first_offset, b.last_offset + 1):
            view[o] = (b.delivery_state, b.delivery_count, b.available_at, b.dead_letter)
    return view


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_overlay_matches_a_per_offset_model(data):
    state, end = data.draw(states())
    ps = data.draw(pieces(end))
    ps = [p for p in ps if p.first_offset >= state.start_offset]
    got = overlay(state, ps)
    model = _per_offset(state, end)
    for p in ps:
        for o in range(p.first_offset, p.last_offset + 1):
            model[o] = (p.delivery_state, p.delivery_count, p.available_at, p.dead_letter)
    assert _per_offset(got, end) == model
    assert got.start_offset == state.start_offset
    bs = got.state_batches
    assert all(a.last_offset < b.first_offset for a, b in zip(bs, bs[1:])), "ascending, non-overlapping"
    assert not any(b.delivery_state == AV and b.delivery_count == 0 and b.available_at is None
                   and b.dead_letter is None for b in bs), "implied batches are left out"


def test_codec_round_trips_extensions_and_reads_old_records():
    state = PartitionState(2, 3, 10, (StateBatch(10, 11, AV, 1, 1_700_000_000_000, None),
                                      StateBatch(12, 12, AV, 2, None, "l"), StateBatch(13, 14, AK, 1)))
    stored = StoredPartition(state, assignment_epoch=3)
    raw = encode_partition(stored)
    assert decode_partition(raw) == stored
    assert b'"at":1700000000000' in raw and b'"dlq":"l"' in raw
    plain = StoredPartition(PartitionState(2, 3, 10, (StateBatch(13, 14, AK, 1),)), assignment_epoch=3)
    assert b"{" not in encode_partition(plain).split(b'"b":')[1], "no extension field when none is used"
    old = b'{"v":1,"se":2,"le":3,"ae":3,"so":10,"b":[[13,14,2,1]]}'  # written before the extensions
    assert decode_partition(old) == plain


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"a", b"b", b"c", None]), min_size=1, max_size=30), st.data())
def test_key_index_head_is_the_lowest_not_done_offset_of_the_key(keys, data):
    idx = KeyIndex()
    for o, k in enumerate(keys):
        idx.learn(o, k)
    done = set(data.draw(st.lists(st.integers(0, len(keys) - 1), max_size=len(keys))))
    for k in (b"a", b"b", b"c"):
        naive = min((o for o, kk in enumerate(keys) if kk == k and o not in done), default=None)
        assert idx.head(k, done.__contains__) == naive
    for o, k in enumerate(keys):
        expected = k is None or min(x for x, kk in enumerate(keys) if kk == k and x not in done | {o} or x == o) == o
        if o not in done:
            assert idx.deliverable(o, done.__contains__) == expected


@pytest.mark.parametrize("key,value,needle,strict", [
    ("errors.deadletterqueue.topic.name", "__x", "DLQ topic name must not start with '__'", False),
    ("errors.deadletterqueue.topic.name", "other", "must start with 'dlq.'", True),
    ("errors.deadletterqueue.topic.name", "dlq.a b", "not a legal topic name", True),
    ("errors.deadletterqueue.topic.name", "dlq." + "x" * 250, "not a legal topic name", True),
    ("share.release.backoff.ms", "-1", "out of range", False),
    ("share.release.backoff.multiplier", "0.9", "out of range", False),
    ("share.release.backoff.multiplier", "nan", "must be float", False),
    ("share.key.ordering", "1", "expected true or false", False),
])
def test_group_config_validation_names_the_key(key, value, needle, strict):
    cfg = load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092", "deadletter.strict.names": strict})
    with pytest.raises(ConfigError) as info:
        cfg.validate_group_config(key, value)
    assert key in str(info.value) and needle in str(info.value)


@pytest.mark.parametrize("name", ["other", "dlq.a b", "dlq." + "x" * 250, "_x"])
def test_group_config_accepts_what_kafka_44_accepts(name):
    """Kafka 4.4's GroupConfig refuses only ``__`` names; the rest is checked at write time."""
    cfg = load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092"})
    assert cfg.validate_group_config("errors.deadletterqueue.topic.name", name) == name


def test_group_config_accepts_good_values():
    cfg = load_config(env={}, overrides={"bootstrap.servers": "127.0.0.1:9092"})
    assert cfg.validate_group_config("errors.deadletterqueue.topic.name", "dlq.orders") == "dlq.orders"
    assert cfg.validate_group_config("errors.deadletterqueue.topic.name", "") == ""
    assert cfg.validate_group_config("share.release.backoff.multiplier", "1.5") == 1.5
    assert cfg.group_config()["errors.deadletterqueue.copy.record.enable"] is False  # Kafka 4.4's default


def test_sidecar_defaults_are_checked_together():
    with pytest.raises(ConfigError, match="errors.deadletterqueue.topic.name"):
        load_config(env={}, overrides={"bootstrap.servers": "h:1", "errors.deadletterqueue.topic.name": "x"})
    with pytest.raises(ConfigError, match="share.release.backoff.max.ms"):
        load_config(env={}, overrides={"bootstrap.servers": "h:1", "share.release.backoff.ms": 5000,
                                       "share.release.backoff.max.ms": 100})
