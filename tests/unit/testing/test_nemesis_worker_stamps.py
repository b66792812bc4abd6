"""The nemesis worker's instrument sees the asyncio client's ShareFetches in either form: the
client writes its ShareFetch straight to bytes (``protocol.WireRequest``) — the instrument that
looked for kio's class name saw none of them, and every record's hand-out lost its lower bound."""

from __future__ import annotations

import uuid

from kio.schema.share_acknowledge.v1.request import ShareAcknowledgeRequest

from kshare_sidecar.client import protocol
from tests.e2e.nemesis_worker import _is_share_fetch


def test_the_wire_form_of_a_share_fetch_is_recognised_and_other_requests_are_not():
    req = protocol.share_fetch_wire(1, "c", group_id="g", member_id="m", epoch=0, max_wait_ms=500, min_bytes=1,
                                    max_bytes=1 << 20, max_records=100, batch_size=100,
                                    listed=[(uuid.uuid4(), 0)], acks={}, forgotten=[])
    assert _is_share_fetch(req)
    assert not _is_share_fetch(ShareAcknowledgeRequest.__new__(ShareAcknowledgeRequest))
