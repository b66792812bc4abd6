from __future__ import annotations

import pytest

from kshare_sidecar.wire import FrameDecoder, FrameTooLarge, MalformedFrame, frame


def test_frames_split_across_feeds_and_batched() -> None:
    stream = frame(b"one") + frame(b"") + frame(b"three!")
    decoder = FrameDecoder(max_frame_bytes=16)
    got: list[bytes] = []
    for i in range(len(stream)):  # one byte at a time
        got += decoder.feed(stream[i : i + 1])
    assert got == [b"one", b"", b"three!"]
    assert decoder.buffered == 0
    assert FrameDecoder(16).feed(stream) == [b"one", b"", b"three!"]


def test_frames_are_immutable_bytes() -> None:
    (payload,) = FrameDecoder().feed(frame(b"abc"))
    assert type(payload) is bytes  # kio readers reject bytearray


def test_frame_at_limit_is_accepted_and_over_limit_rejected_before_buffering() -> None:
    assert FrameDecoder(max_frame_bytes=4).feed(frame(b"abcd")) == [b"abcd"]
    decoder = FrameDecoder(max_frame_bytes=4)
    with pytest.raises(FrameTooLarge):
        decoder.feed((5).to_bytes(4, "big"))  # rejected from the prefix alone


def test_negative_size_is_malformed() -> None:
    with pytest.raises(MalformedFrame):
        FrameDecoder().feed((-1).to_bytes(4, "big", signed=True))


def test_max_must_be_positive() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(0)
