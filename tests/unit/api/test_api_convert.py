from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.response import MetadataResponse as MetadataResponseV1
from kio.schema.metadata.v13 import response as v13
from kio.schema.share_fetch.v1.response import ShareFetchResponse as ShareFetchResponseV1
from kio.schema.share_fetch.v2.response import ShareFetchResponse as ShareFetchResponseV2
from kio.static.constants import EntityType

from kshare_sidecar.api import ConversionError, convert, convert_to_version, target_class
from kshare_sidecar.wire import codec

CANONICAL = v13.MetadataResponse(
    throttle_time=datetime.timedelta(0),
    brokers=(v13.MetadataResponseBroker(node_id=1, host="h", port=9092, rack="r"),),
    cluster_id="c",
    controller_id=1,
    topics=(
        v13.MetadataResponseTopic(
            error_code=ErrorCode.none,
            name="t",
            topic_id=uuid.uuid4(),
            partitions=(
                v13.MetadataResponsePartition(error_code=ErrorCode.none, partition_index=0, leader_id=1),
            ),
        ),
    ),
    error_code=ErrorCode.none,
)


def test_down_convert_drops_newer_fields_and_resolves_nested_classes() -> None:
    old = convert_to_version(CANONICAL, 1)
    assert type(old) is MetadataResponseV1
    assert type(old.topics[0]).__module__ == "kio.schema.metadata.v1.response"
    assert type(old.topics[0].partitions[0]).__module__ == "kio.schema.metadata.v1.response"
    assert not hasattr(old.topics[0], "topic_id")
    assert old.brokers[0].rack == "r" and old.controller_id == 1
    codec.encode_response(old, 1)  # encodable


def test_same_class_is_identity() -> None:
    assert convert(CANONICAL, v13.MetadataResponse) is CANONICAL


def test_mappings_and_int_millis_are_accepted() -> None:
    cls = target_class(79, 2, EntityType.response)
    response = convert(
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "error_message": None,
            "acquisition_lock_timeout": 30000,
            "responses": [],
            "node_endpoints": [{"node_id": 1, "host": "h", "port": 1, "rack": None}],
        },
        cls,
    )
    assert response.acquisition_lock_timeout == datetime.timedelta(seconds=30)
    assert response.node_endpoints[0].host == "h"
    assert isinstance(response.responses, tuple)
    older = convert(response, target_class(79, 1, EntityType.response))
    assert not hasattr(older, "acquisition_lock_timeout")


def test_share_fetch_v2_to_v1() -> None:
    v2 = convert(
        {
            "throttle_time": 0, "error_code": 0, "error_message": None, "acquisition_lock_timeout": 15000,
            "responses": [], "node_endpoints": [],
        },
        ShareFetchResponseV2,
    )
    v1 = convert_to_version(v2, 1)
    assert type(v1) is ShareFetchResponseV1
    codec.encode_response(v1, 1)


def test_missing_required_field_is_an_error() -> None:
    with pytest.raises(ConversionError, match="brokers"):
        convert({"throttle_time": 0, "topics": []}, MetadataResponseV1)


def test_target_class_lookup() -> None:
    assert target_class(3, 1, EntityType.response) is MetadataResponseV1
    assert target_class(3, 13, EntityType.response, "MetadataResponse") is v13.MetadataResponse
