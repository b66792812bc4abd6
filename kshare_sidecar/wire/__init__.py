"""The wire layer: Kafka framing and kio encoding (sans-I/O), plus a thin asyncio server.

``framing`` and ``codec`` never touch sockets; ``connection`` and ``server`` own the I/O and know
nothing about individual APIs (they call a :class:`FrameHandler`, which ``kshare_sidecar.api``
provides). See docs/wire.md.
"""

from .connection import CloseCallback, Connection, FrameHandler
from .errors import CloseConnection, FrameTooLarge, MalformedFrame, UnsupportedRequest
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FramePieces, frame
from .server import Listener, serve

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "CloseCallback",
    "CloseConnection",
    "Connection",
    "FrameDecoder",
    "FrameHandler",
    "FramePieces",
    "FrameTooLarge",
    "Listener",
    "MalformedFrame",
    "UnsupportedRequest",
    "frame",
    "serve",
]
