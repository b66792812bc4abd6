"""An asyncio share-group (KIP-932) consumer for native Kafka 4.x and kshare alike.

Why it lives inside ``kshare_sidecar`` (and not in a distribution of its own under plugins/):
it is built on the sidecar's own tested pieces — kio for message types and
``backend.brokerconn.BrokerConn`` for the transport — and it is how the project's tests, and later
the Faust driver, consume share groups from asyncio; a separate distribution would have to
duplicate or depend on those anyway. It imports nothing from the request-serving side (``wire``,
``api``, ``service``, ``share``); through ``backend.brokerconn`` it loads the ``backend`` package (about
0.3 s of imports, mostly aiokafka). See docs/client.md.

``ShareConsumer`` loads on first use: the sidecar's services read :mod:`.records` (record
decoding) and :mod:`.protocol` alone, without the consumer.
"""

from typing import TYPE_CHECKING, Any

from .acks import AcknowledgeType
from .errors import (
                     AcknowledgementError,
                     AckStateError,
                     AuthenticationFailedError,
                     ConsumerStoppedError,
                     GroupError,
                     ShareConsumerError,
                     UnsupportedVersionError,
)
from .records import ShareRecord

if TYPE_CHECKING:
    from .consumer import ShareConsumer


def __getattr__(name: str) -> Any:
    if name == "ShareConsumer":
        from .consumer import ShareConsumer

        return ShareConsumer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
                     "AckStateError",
                     "AcknowledgeType",
                     "AcknowledgementError",
                     "AuthenticationFailedError",
                     "ConsumerStoppedError",
                     "GroupError",
                     "ShareConsumer",
                     "ShareConsumerError",
                     "ShareRecord",
                     "UnsupportedVersionError",
]
