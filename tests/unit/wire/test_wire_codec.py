from __future__ import annotations

import datetime
import io

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest as FindCoordinatorRequestV2
from kio.schema.metadata.v13.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v13.response import MetadataResponse
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader

from kshare_sidecar.wire import MalformedFrame, UnsupportedRequest, codec


def test_peek_reads_fixed_prefix_of_any_header_version() -> None:
    frame = codec.encode_request(FindCoordinatorRequestV2(key="g", key_type=0), correlation_id=99)[4:]
    peeked = codec.peek(frame)
    assert (peeked.api_key, peeked.api_version, peeked.correlation_id) == (10, 2, 99)
    with pytest.raises(MalformedFrame):
        codec.peek(frame[:7])


def test_decode_request_round_trip_flexible_header_v2() -> None:
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name="orders"),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    decoded = codec.decode_request(codec.encode_request(request, 5, "cid")[4:])
    assert decoded.body == request
    assert decoded.header.client_id == "cid"
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id) == (3, 13, 5)
    assert decoded.response_class is MetadataResponse
    assert decoded.trailing_bytes == 0


def test_unknown_api_key_and_version_are_unsupported() -> None:
    frame = codec.encode_request(FindCoordinatorRequestV2(key="g", key_type=0), 1)[4:]
    with pytest.raises(UnsupportedRequest):
        codec.decode_request((999).to_bytes(2, "big") + frame[2:])
    with pytest.raises(UnsupportedRequest):
        codec.decode_request(frame[:2] + (77).to_bytes(2, "big") + frame[4:])


def test_truncated_body_is_malformed() -> None:
    frame = codec.encode_request(FindCoordinatorRequestV2(key="group-1", key_type=0), 1)[4:]
    with pytest.raises(MalformedFrame):
        codec.decode_request(frame[:-3])


def test_response_header_versions() -> None:
    metadata = MetadataResponse(
        throttle_time=datetime.timedelta(0), brokers=(), topics=(), error_code=ErrorCode.none
    )
    out = codec.encode_response(metadata, 12)
    header, _ = entity_reader(ResponseHeaderV1)(out[4:], 0)
    assert header.correlation_id == 12
    assert MetadataResponse.__header_schema__ is ResponseHeaderV1
    # ApiVersions always answers with response header v0, even for flexible v3.
    assert ApiVersionsResponseV3.__header_schema__ is ResponseHeaderV0
    assert ApiVersionsRequestV3.__flexible__


def test_api_versions_fallback_is_v0_with_ranges() -> None:
    out = codec.api_versions_fallback(31, [(18, 0, 4), (3, 0, 13)])
    assert int.from_bytes(out[:4], "big") == len(out) - 4
    header, body = codec.decode_response(out[4:], ApiVersionsResponseV0)
    assert header.correlation_id == 31
    assert body.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4), (3, 0, 13)]


def test_readers_and_writers_are_cached() -> None:
    assert codec.reader(MetadataRequest) is codec.reader(MetadataRequest)
    assert codec.writer(MetadataResponse) is codec.writer(MetadataResponse)
    buf = io.BytesIO()
    codec.writer(ResponseHeaderV0)(buf, ResponseHeaderV0(correlation_id=1))
    assert buf.getvalue() == b"\x00\x00\x00\x01"
