"""Why a connection must end.

Kafka answers protocol violations by closing the socket rather than by sending an error: a peer
that sends an oversized frame, an unparsable header or an API/version the broker does not serve
cannot be trusted to read a response correctly either. Every exception here therefore means
"close this connection"; the message names the reason for the log line.
"""

from __future__ import annotations


class CloseConnection(Exception):
    """The connection must be closed (after the responses already queued before it are sent)."""


class FrameTooLarge(CloseConnection):
    """A size prefix above the configured maximum (Kafka: ``socket.request.max.bytes``)."""


class MalformedFrame(CloseConnection):
    """A negative size, a frame too short for a request header, or a body kio cannot parse."""


class UnsupportedRequest(CloseConnection):
    """An API key or version that is not served (ApiVersions is the one exception, see codec)."""


class TimedOut(CloseConnection):
    """Idle beyond ``connections.max.idle.ms``, or a frame not completed within
    ``request.read.timeout.ms`` (slow-loris)."""


class TooManyConnections(CloseConnection):
    """``max.connections.per.ip`` or ``max.connections`` reached; the new connection is closed."""


class CloseAfterResponse(CloseConnection):
    """Send ``response`` (a framed answer, e.g. SASL_AUTHENTICATION_FAILED), then close.

    Kafka answers a failed authentication and then closes the channel; whoever raises this has
    already logged its own line, so the connection logs the close at debug level only.
    """

    def __init__(self, reason: str, response: bytes | None) -> None:
        super().__init__(reason)
        self.response = response
