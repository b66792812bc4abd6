"""The state writers hidden from transaction listings (passthrough/reserved.py): ListTransactions
answers without them, and a DescribeTransactions answer joined as bytes from the backend's part
and the sidecar's."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st
from kio.schema.describe_transactions.v0 import response as dt0
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v1 import response as lt1

from kshare_sidecar.passthrough import Reserved
from kshare_sidecar.passthrough.reserved import join_described
from kshare_sidecar.wire import codec

RESERVED = Reserved(frozenset({"__kshare_state"}), ("kshare-state-",))


def _listing(*ids: str) -> lt1.ListTransactionsResponse:
    return lt1.ListTransactionsResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                                        unknown_state_filters=(), transaction_states=tuple(
                                            lt1.TransactionState(transactional_id=t, producer_id=i,
                                                                 transaction_state="Empty")
                                            for i, t in enumerate(ids)))


def test_list_transactions_leaves_out_the_state_writers_only():
    answer = _listing("app-1", "kshare-state-__kshare_state-0", "app-2", "kshare-state-__kshare_state-1")
    kept = RESERVED.listed(answer)
    assert [t.transactional_id for t in kept.transaction_states] == ["app-1", "app-2"]
    assert RESERVED.listed(_listing("app-1")) is None  # nothing to hide: the bytes go back as they came


def _state(transactional_id: str, code: ErrorCode = ErrorCode.none, partitions: int = 0) -> dt0.TransactionState:
    return dt0.TransactionState(
        error_code=code, transactional_id=transactional_id, transaction_state="Ongoing",
        transaction_timeout=datetime.timedelta(seconds=60),
        transaction_start_time=datetime.datetime(2026, 11, 27, tzinfo=datetime.timezone.utc), producer_id=7,
        producer_epoch=1, topics=(dt0.TopicData(topic="t", partitions=tuple(range(partitions))),) if partitions else ())


def _answer(states, throttle_ms: int = 0) -> bytes:
    return codec.encode_response(dt0.DescribeTransactionsResponse(
        throttle_time=datetime.timedelta(milliseconds=throttle_ms), transaction_states=tuple(states)), 42)


@given(st.lists(st.integers(0, 300), max_size=70), st.lists(st.integers(0, 3), min_size=1, max_size=3),
       st.integers(0, 10))
def test_a_joined_describe_transactions_answer_reads_as_both_parts(backend_parts, hidden_parts, throttle_ms):
    """Any number of entries (array lengths past one uvarint byte), any sizes: the joined answer is
    the backend's entries (bytes untouched) then the hidden ones, with the backend's header."""
    backend = [_state(f"app-{i}", partitions=n) for i, n in enumerate(backend_parts)]
    hidden = [_state(f"kshare-state-s-{i}", ErrorCode.transactional_id_not_found, n) for i, n in enumerate(hidden_parts)]
    joined = join_described(bytearray(_answer(backend, throttle_ms)), _answer(hidden))
    header, body = codec.decode_response(joined[4:], dt0.DescribeTransactionsResponse)
    assert int.from_bytes(joined[:4], "big") == len(joined) - 4
    assert header.correlation_id == 42 and body.throttle_time == datetime.timedelta(milliseconds=throttle_ms)
    assert list(body.transaction_states) == backend + hidden
