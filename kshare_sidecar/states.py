"""Kafka's share-group numbers, spelled once: record states and acknowledge types.

Why a leaf module at the top of the package (it imports nothing from kshare): the engine
(`share/`), the persisted form (`persist/`, whose `DeliveryState` is `RecordState`), the
metrics and the share consumer (`client/`) all read these numbers, and `persist/` sits below `share/` in the data flow, so the one
definition has to live where every layer may import it without an upward import or a cycle.

The enums carry Kafka's numbers (RecordState as in SharePartition's in-flight state and the
share-group state records; AcknowledgeType as on the wire of ShareFetch/ShareAcknowledge).
The plain-int copies below are for the engine's hot path: a comparison with an int constant
costs less than an attribute load on an enum class, and range states are stored as ints.
They are taken from the enums, so the numbers still appear only here.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class RecordState(IntEnum):
    """A record's state in a share-partition (ACQUIRED exists only in memory, never persisted).

    Terminal states (ACKNOWLEDGED, ARCHIVED) are the ones >= ACKNOWLEDGED.
    """

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    """AcknowledgeTypes of ShareFetch/ShareAcknowledge (v1; RENEW is v2 with IsRenewAck).

    GAP names offsets that hold no record (log holes, control batches): not an acknowledgement of
    a delivered record, so metrics do not count it.
    """

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


# Plain ints for the hot path (see the module docstring).
AVAILABLE: Final[int] = RecordState.AVAILABLE.value
ACQUIRED: Final[int] = RecordState.ACQUIRED.value
ACKNOWLEDGED: Final[int] = RecordState.ACKNOWLEDGED.value
ARCHIVED: Final[int] = RecordState.ARCHIVED.value

GAP: Final[int] = AcknowledgeType.GAP.value
ACCEPT: Final[int] = AcknowledgeType.ACCEPT.value
RELEASE: Final[int] = AcknowledgeType.RELEASE.value
REJECT: Final[int] = AcknowledgeType.REJECT.value
RENEW: Final[int] = AcknowledgeType.RENEW.value
