"""Share sessions: epoch rules, limit, close and TCP-disconnect semantics (reference section 5)."""

import uuid

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.share.engine.sessions import SessionError, ShareSessionCache, next_epoch

TP = (uuid.UUID(int=1), 0)


def test_open_then_strict_next_epochs():
    cache = ShareSessionCache()
    session, replaced = cache.open(("g", "m"), conn_id=1)
    assert replaced is None and session.epoch == 1
    cache.advance(("g", "m"), 1, conn_id=1)
    with pytest.raises(SessionError) as err:
        cache.advance(("g", "m"), 1, conn_id=1)
    assert err.value.code == ErrorCode.invalid_share_session_epoch
    assert cache.advance(("g", "m"), 2, conn_id=1).epoch == 3


def test_unknown_session():
    with pytest.raises(SessionError) as err:
        ShareSessionCache().advance(("g", "m"), 4, conn_id=1)
    assert err.value.code == ErrorCode.share_session_not_found
    with pytest.raises(SessionError):
        ShareSessionCache().close(("g", "m"))


def test_epoch_wraps_to_one():
    assert next_epoch(2**31 - 1) == 1 and next_epoch(5) == 6


def test_reopen_replaces_without_losing_partitions_to_caller():
    cache = ShareSessionCache()
    s, _ = cache.open(("g", "m"), 1)
    s.partitions.add(TP)
    s2, replaced = cache.open(("g", "m"), 1)
    assert replaced is s and replaced.partitions == {TP} and s2.partitions == set()


def test_limit_reached_and_existing_session_kept():
    cache = ShareSessionCache(max_sessions=1)
    cache.open(("g", "a"), 1)
    with pytest.raises(SessionError) as err:
        cache.open(("g", "b"), 2)
    assert err.value.code == ErrorCode.share_session_limit_reached
    assert len(cache) == 1 and cache.get(("g", "a")) is not None
    cache.open(("g", "a"), 1)  # reopening one's own session is always possible
    assert len(cache) == 1


def test_close_connection_closes_only_its_sessions():
    cache = ShareSessionCache()
    cache.open(("g", "a"), 1)
    cache.open(("g", "b"), 1)
    cache.open(("g", "c"), 2)
    closed = cache.close_connection(1)
    assert sorted(s.key for s in closed) == [("g", "a"), ("g", "b")]
    assert list(cache.sessions) == [("g", "c")]
    assert cache.close_connection(1) == []


def test_session_follows_reconnect():
    cache = ShareSessionCache()
    cache.open(("g", "a"), 1)
    cache.advance(("g", "a"), 1, conn_id=7)
    assert cache.close_connection(1) == []
    assert [s.key for s in cache.close_connection(7)] == [("g", "a")]


def test_one_connection_holds_at_most_its_share_and_evicts_nobody():
    cache = ShareSessionCache(max_sessions=10, max_per_connection=2)
    cache.open(("g", "other"), 9)
    cache.open(("g", "a"), 1)
    cache.open(("g", "b"), 1)
    for i in range(1000):  # a client asking for a thousand more on its connection
        with pytest.raises(SessionError) as err:
            cache.open(("g", f"m{i}"), 1)
        assert err.value.code == ErrorCode.share_session_limit_reached and "per connection" in str(err.value)
    assert len(cache) == 3 and cache.get(("g", "other")) is not None
    cache.open(("g", "a"), 1)  # reopening its own session (epoch 0 again) is not a new one
    cache.open(("g", "c"), 2)  # another connection is not affected
    assert len(cache) == 4
