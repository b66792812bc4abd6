"""Every forwarded API has a retriable answer when the backend is gone: for each (api key,
version) kio can encode, structure-aware random requests go through the forwarder's
"backend unavailable" and "coordinator error" paths. Each must give an encodable response of the
request's own version, or close the connection — never another exception (which would become a
traceback and a dropped connection for a well-formed request)."""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode

from kshare_sidecar.backend.clients import BackendClients
from kshare_sidecar.passthrough import forwardable, routes
from kshare_sidecar.passthrough.forwarder import Forwarder
from kshare_sidecar.passthrough.pool import BackendPool
from kshare_sidecar.testing.wirefuzz import FrameFactory
from kshare_sidecar.wire import codec
from kshare_sidecar.wire.errors import CloseConnection

#: Kafka 3.9.2's ApiVersions answer (what the harness's backend advertises), as (min, max).
KAFKA_39 = {0: (0, 11), 1: (0, 17), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9), 10: (0, 6), 11: (0, 9),
            12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 5), 17: (0, 1), 18: (0, 4), 19: (0, 7),
            20: (0, 6), 21: (0, 2), 22: (0, 5), 23: (0, 4), 24: (0, 5), 25: (0, 4), 26: (0, 4), 27: (0, 1),
            28: (0, 4), 29: (0, 3), 30: (0, 3), 31: (0, 3), 32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 4),
            36: (0, 2), 37: (0, 3), 38: (0, 3), 39: (0, 2), 40: (0, 2), 41: (0, 3), 42: (0, 2), 43: (0, 2),
            44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0),
            55: (0, 2), 57: (0, 1), 60: (0, 1), 61: (0, 0), 64: (0, 0), 65: (0, 0), 66: (0, 1), 68: (0, 0),
            69: (0, 0), 71: (0, 0), 72: (0, 0), 75: (0, 0)}

LOCAL = {3, 10, 18, 32, 44, 16, 42, 60, 75, 76, 77, 78, 79, 90, 91, 92}
APIS = [(k, v) for k, (lo, hi) in forwardable(KAFKA_39, LOCAL).items() for v in range(lo, hi + 1)]


@pytest.mark.parametrize("api", APIS, ids=[f"key{k}v{v}" for k, v in APIS])
def test_backend_unavailable_answers_encode(api):
    key, version = api
    forwarder = Forwarder(BackendPool(BackendClients("127.0.0.1:1")))
    factory = FrameFactory(random.Random(key * 100 + version), served=[(key, version, version)], null_rate=0)
    kind, spec = routes.route(key, version)
    checked = 0
    for _ in range(20):
        frame = factory.structured((key, version))
        try:
            decoded = codec.decode_request(frame)
        except CloseConnection:
            continue  # not parseable: the dispatcher closes before the forwarder sees it
        if decoded.null_fields:
            continue
        for answer in _answers(forwarder, frame, decoded, key, version, kind, spec):
            if answer is CLOSED:  # closing the connection is an answer a client retries
                checked += 1
                continue
            if answer is None:
                continue
            body = codec.decode_response(answer[4:], decoded.response_class)[1]
            assert type(body) is decoded.response_class
            checked += 1
    # Every frame may be skipped above (unparseable, or with nulls the forwarder never sees): a
    # version for which none reached an answer would pass having checked nothing.
    assert checked, f"no generated key {key} v{version} request was answered or closed: nothing was checked"


CLOSED = object()


def _answers(forwarder, frame, decoded, key, version, kind, spec):
    try:
        yield forwarder._unavailable(frame, key, version, kind, spec)
    except CloseConnection:
        yield CLOSED
    if kind in (routes.Route.GROUP, routes.Route.TXN):
        try:
            yield forwarder._error(decoded, kind, spec, ErrorCode.coordinator_not_available)
        except CloseConnection:
            yield CLOSED
