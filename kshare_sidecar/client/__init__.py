"""An asyncio share-group (KIP-932) consumer for native Kafka 4.x and kshare alike.

Why it lives inside ``kshare_sidecar`` (and not in a distribution of its own under plugins/):
it is built on the sidecar's own tested pieces — kio for message types and
``backend.brokerconn.BrokerConn`` for the transport — and it is how the project's tests, and later
the Faust driver, consume share groups from asyncio; a separate distribution would have to
duplicate or depend on those anyway. It imports nothing from the request-serving side (``wire``,
``api``, ``service``, ``share``); through ``backend.brokerconn`` it loads the ``backend`` package (about
0.3 s of imports, mostly aiokafka). See docs/client.md.
"""

from .acks import AcknowledgeType
from .consumer import ShareConsumer
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
