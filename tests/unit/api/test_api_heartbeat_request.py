"""The hand-read ShareGroupHeartbeat request (api/heartbeat_request.py) against kio's decoding:
the same fields for every request kio reads, and None — kio's path — for every frame it does not
read as the usual shape, malformed ones included."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest

from kshare_sidecar.api.heartbeat_request import decode
from kshare_sidecar.wire import codec
from kshare_sidecar.wire.errors import MalformedFrame

text = st.text(max_size=40)
requests = st.builds(
    ShareGroupHeartbeatRequest,
    group_id=text, member_id=text, member_epoch=st.integers(-(2**31), 2**31 - 1),
    rack_id=st.none() | text, subscribed_topic_names=st.none() | st.lists(text, max_size=5).map(tuple))


def _frame(request, correlation_id: int, client_id: str | None) -> bytes:
    return codec.encode_request(request, correlation_id, client_id)[4:]  # without the size prefix


def _same(fast: codec.DecodedRequest, slow: codec.DecodedRequest) -> None:
    assert fast.header.correlation_id == slow.header.correlation_id
    assert fast.header.client_id == slow.header.client_id
    assert (fast.api_key, fast.api_version) == (slow.api_key, slow.api_version)
    for name in ("group_id", "member_id", "member_epoch", "rack_id", "subscribed_topic_names"):
        assert getattr(fast.body, name) == getattr(slow.body, name), name
    assert fast.request_class is slow.request_class and fast.response_class is slow.response_class
    assert (fast.trailing_bytes, fast.null_fields) == (0, ())


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(requests, st.integers(-(2**31), 2**31 - 1), st.none() | text)
def test_reads_what_kio_reads(request, correlation_id, client_id) -> None:
    frame = _frame(request, correlation_id, client_id)
    fast = decode(frame)
    assert fast is not None
    _same(fast, codec.decode_request(frame))


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(requests, st.none() | text, st.data())
def test_any_other_frame_is_left_to_kio(request, client_id, data) -> None:
    """Cut, extended or with bytes changed: the fast path reads it as kio does, or not at all."""
    frame = bytearray(_frame(request, 7, client_id))
    how = data.draw(st.sampled_from(["cut", "extend", "flip"]))
    if how == "cut":
        frame = frame[:data.draw(st.integers(0, len(frame) - 1))]
    elif how == "extend":
        frame += data.draw(st.binary(min_size=1, max_size=8))
    else:
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(frame) - 1))
            frame[i] = data.draw(st.integers(0, 255))
    frame = bytes(frame)
    fast = decode(frame)
    if fast is None:
        return
    try:
        slow = codec.decode_request(frame)
    except MalformedFrame:
        raise AssertionError("read by hand a frame kio rejects") from None
    _same(fast, slow)


def test_nulls_and_other_apis_go_to_kio() -> None:
    frame = _frame(ShareGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=0, rack_id=None,
                                              subscribed_topic_names=None), 1, "c")
    assert decode(frame) is not None
    null_group = frame[:frame.index(b"c") + 2] + b"\x00" + frame[frame.index(b"c") + 4:]
    assert decode(null_group) is None  # non-nullable null: INVALID_REQUEST from kio's path
    assert decode(b"\x00\x4c\x00\x00" + frame[4:]) is None  # version 0
    assert decode(b"\x00\x03\x00\x01" + frame[4:]) is None  # another API
    assert decode(frame + b"\x00") is None  # trailing bytes: kio's path logs them
