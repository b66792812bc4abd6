"""ApiEntry.divert: a decoded request the entry's handler must not serve goes elsewhere as the
bytes it came in (a share group the backend serves natively, passthrough/native.py)."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest
from kio.schema.share_group_heartbeat.v1.response import ShareGroupHeartbeatResponse

from .conftest import FakeConnection, request_frame


def _request(group: str) -> ShareGroupHeartbeatRequest:
    return ShareGroupHeartbeatRequest(group_id=group, member_id="m", member_epoch=0, rack_id=None,
                                      subscribed_topic_names=("orders",))


async def test_a_diverted_request_reaches_the_raw_handler_as_it_came(dispatcher) -> None:
    served: list[str] = []
    raw: list[tuple[object, bytes]] = []

    async def heartbeat(ctx, header, request):
        served.append(request.group_id)
        return ShareGroupHeartbeatResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                                           error_message=None, member_id="m", member_epoch=1,
                                           heartbeat_interval=datetime.timedelta(seconds=5), assignment=None)

    async def elsewhere(conn, frame, release):
        raw.append((conn, frame))
        release()
        return b"answer"

    registry = dispatcher.registry
    registry.register(76, 1, 1, heartbeat)
    registry.set_divert(76, lambda body: elsewhere if body.group_id == "native" else None)
    conn, released = FakeConnection(), []
    frame = request_frame(_request("native"), 9)
    assert await dispatcher.handle(frame, conn, lambda: released.append(True)) == b"answer"
    assert raw == [(conn, frame)] and released == [True] and served == []
    out = await dispatcher.handle(request_frame(_request("kshare")), conn)
    assert out is not None and served == ["kshare"] and len(raw) == 1

    registry.register(76, 1, 1, heartbeat, replace=True)  # registering again drops the divert
    await dispatcher.handle(request_frame(_request("native")), conn)
    assert served == ["kshare", "native"]
