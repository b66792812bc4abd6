"""Splitting a byte stream into Kafka frames (sans-I/O).

Every Kafka request and response is an int32 big-endian size followed by that many bytes. The
decoder is fed whatever the socket produced and hands back complete frames as immutable
``bytes`` (kio's readers reject writable buffers). The size is checked as soon as the four
prefix bytes are known, before any payload is buffered, so a hostile or confused peer cannot make
the sidecar allocate more than ``max_frame_bytes`` (Kafka's ``socket.request.max.bytes``,
default 100 MiB, closes the connection the same way).
"""

from __future__ import annotations

from ..protocol.requests import frame
from .errors import FrameTooLarge, MalformedFrame

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "FrameDecoder", "FramePieces", "frame"]  # frame: the inverse of FrameDecoder

#: Kafka's default ``socket.request.max.bytes``.
DEFAULT_MAX_FRAME_BYTES = 104_857_600

_SIZE_BYTES = 4


class FramePieces(list):  # of bytes | bytearray | memoryview
    """One response frame as consecutive buffers, the size prefix at the start of the first: a
    ShareFetch answer whose record bytes are views of the backend's buffers. The connection hands
    them to the socket one by one (never joined, so never copied), as Kafka's broker sends a
    FileRecords after the header it built."""

    def joined(self) -> bytes:
        """The frame as one ``bytes`` (a copy: for tests and tools, not the serving path)."""
        return b"".join(self)


class FrameDecoder:
    """Incremental frame splitter: ``feed(data)`` returns the frames completed by ``data``."""

    __slots__ = ("_buffer", "_max_frame_bytes", "_need")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes <= 0:
            raise ValueError("max_frame_bytes must be positive")
        self._max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._need: int | None = None  # payload size of the frame being assembled, once known

    @property
    def max_frame_bytes(self) -> int:
        return self._max_frame_bytes

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        """Applies from the next frame's size prefix (a SASL listener lifts its pre-authentication
        limit once the client has authenticated)."""
        if value <= 0:
            raise ValueError("max_frame_bytes must be positive")
        self._max_frame_bytes = value

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (for tests and diagnostics)."""
        return len(self._buffer)

    @property
    def partial_frame_bytes(self) -> int:
        """The announced payload size of the frame being assembled (0 when none has started, or
        only part of its size prefix is here): what a memory pool reserves for it."""
        return self._need or 0

    @property
    def pending(self) -> bool:
        """Whether part of a frame (even part of its size prefix) is held."""
        return bool(self._buffer) or self._need is not None

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return complete frame payloads (without the size prefix), in order.

        Raises :class:`FrameTooLarge` or :class:`MalformedFrame`; after either the decoder is
        unusable and the connection must be closed.
        """
        self._buffer += data
        frames: list[bytes] = []
        while True:
            if self._need is None:
                if len(self._buffer) < _SIZE_BYTES:
                    return frames
                size = int.from_bytes(self._buffer[:_SIZE_BYTES], "big", signed=True)
                if size < 0:
                    raise MalformedFrame(f"negative frame size {size}")
                if size > self._max_frame_bytes:
                    raise FrameTooLarge(
                        f"frame of {size} bytes exceeds the maximum of {self._max_frame_bytes}"
                    )
                del self._buffer[:_SIZE_BYTES]
                self._need = size
            if len(self._buffer) < self._need:
                return frames
            frames.append(bytes(self._buffer[: self._need]))
            del self._buffer[: self._need]
            self._need = None
