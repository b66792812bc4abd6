"""protocol/requests.request_header is written by hand: byte for byte kio's header writer, for
every request class kio knows (header v1 and v2) and any client id."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from kshare_sidecar.protocol.requests import request_header, writer


def _request_classes() -> list[Any]:
    names = {name: key for key, name in api_key_map.items()}
    return [load_request_schema(names[name], version)
            for name, versions in sorted(schema_name_map.items()) if name in names
            for version, entities in sorted(versions.items()) if EntityType.request in entities]


_CLASSES = _request_classes()


class _Stand:
    """Only the class matters to request_header; kio's entities need every field to be built."""


def _kio_header(cls: Any, correlation_id: int, client_id: str | None) -> bytes:
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    writer(header_cls)(buf, header_cls(request_api_key=cls.__api_key__, request_api_version=cls.__version__,
                                       correlation_id=correlation_id, client_id=client_id))
    return buf.getvalue()


def _as_request(cls: Any) -> Any:
    return type(cls.__name__, (_Stand,), {"__api_key__": cls.__api_key__, "__version__": cls.__version__,
                                          "__header_schema__": cls.__header_schema__})()


def test_both_header_versions_are_covered() -> None:
    assert {c.__header_schema__.__version__ for c in _CLASSES} >= {1, 2}


@pytest.mark.parametrize("cls", _CLASSES, ids=lambda c: f"{c.__name__}-v{c.__version__}")
def test_every_request_class(cls: Any) -> None:
    for client_id in ("kshare", None, ""):
        assert request_header(_as_request(cls), 7, client_id) == _kio_header(cls, 7, client_id)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_CLASSES), st.integers(-(2**31), 2**31 - 1), st.none() | st.text(max_size=40))
def test_any_client_id_and_correlation(cls: Any, correlation_id: int, client_id: str | None) -> None:
    assert request_header(_as_request(cls), correlation_id, client_id) == _kio_header(cls, correlation_id, client_id)
