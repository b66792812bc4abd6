"""The hand-written Produce body (protocol/produce.py) is byte for byte kio's, every version."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kshare_sidecar.backend.kio_bridge import make, request_module
from kshare_sidecar.protocol.produce import FIRST_VERSION, LAST_VERSION, produce_body
from kshare_sidecar.protocol.requests import request_body


def _kio(version: int, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int) -> bytes:
    m = request_module(0, version)
    return request_body(make(m.ProduceRequest, transactional_id=None, acks=acks,
                             timeout=datetime.timedelta(milliseconds=timeout_ms), topic_data=(
                                 make(m.TopicProduceData, name=topic, partition_data=(
                                     make(m.PartitionProduceData, index=partition, records=records),)),)))


@given(st.integers(FIRST_VERSION, LAST_VERSION), st.text(min_size=1, max_size=200),
       st.integers(0, 2**31 - 1), st.binary(max_size=400), st.sampled_from([-1, 0, 1]),
       st.integers(0, 2**31 - 1))
def test_the_same_bytes_as_kio(version: int, topic: str, partition: int, records: bytes, acks: int,
                               timeout_ms: int) -> None:
    assert produce_body(version, topic, partition, records, acks=acks, timeout_ms=timeout_ms) == \
        _kio(version, topic, partition, records, acks, timeout_ms)


@pytest.mark.parametrize("version", [FIRST_VERSION, LAST_VERSION])
def test_a_record_batch_longer_than_a_one_byte_length(version: int) -> None:
    records = bytes(range(256)) * 700  # a compact length of three varint bytes
    assert produce_body(version, "__kshare_state", 7, records) == _kio(version, "__kshare_state", 7, records, -1, 30_000)


@pytest.mark.parametrize("version", [2, 13])
def test_other_versions_are_refused(version: int) -> None:
    with pytest.raises(ValueError, match=f"Produce v{version}"):
        produce_body(version, "t", 0, b"")
