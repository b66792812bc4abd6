"""Kafka's errors as kshare raises them: one base class, and one map from error code to class.

Why: a failure that Kafka names with an error code used to be raised as six classes of the same
shape (a code and a message), one per layer, so a handler could not tell that a service's, the
backend's and its own were the same thing. Each is now a :class:`KafkaError`; a subclass stays
where callers catch it apart from the others (``BackendError``: the backend failed;
``PartitionError``: one share-partition cannot serve). The code itself is kio's
:class:`~kio.schema.errors.ErrorCode`, which knows its name and whether clients retry it.

:func:`for_code` is the map, as aiokafka's ``errors.for_code``: a class that stands for certain
codes registers them with :func:`stands_for` where it is defined, and ``for_code`` answers with
the most specific class for a code (:class:`KafkaError` for the rest).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kio.schema.errors import ErrorCode

_KNOWN = frozenset(int(code) for code in ErrorCode)


class KafkaError(Exception):
    """A failure named by a Kafka error code, with a message for the client (``str()`` is the
    message, or the code's name without one). A request handler raises it to answer with the
    code instead of a result (``api/registry.py`` writes the API's error response). A code kio
    does not know (a newer broker's) becomes UNKNOWN_SERVER_ERROR, its number kept in the
    message, so a client never receives a code its Kafka version cannot read."""

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        if int(code) not in _KNOWN:
            message = f"error code {int(code)}" + (f": {message}" if message else "")
            code = ErrorCode.unknown_server_error
        self.code = ErrorCode(code)
        self.message = message
        super().__init__(message if message is not None else self.code.name.upper())


_E = TypeVar("_E", bound=type[KafkaError])
_BY_CODE: dict[ErrorCode, type[KafkaError]] = {}


def stands_for(*codes: ErrorCode | int) -> Callable[[_E], _E]:
    """Class decorator: ``for_code`` answers with this class for ``codes`` (one class per code)."""

    def register(cls: _E) -> _E:
        for code in codes:
            other = _BY_CODE.setdefault(ErrorCode(code), cls)
            if other is not cls:
                raise ValueError(f"{ErrorCode(code).name.upper()} already stands for {other.__name__}")
        return cls

    return register


def for_code(code: ErrorCode | int) -> type[KafkaError]:
    """The class raised for ``code``: the one registered for it, else :class:`KafkaError`."""
    return _BY_CODE.get(ErrorCode(code), KafkaError) if int(code) in _KNOWN else KafkaError
