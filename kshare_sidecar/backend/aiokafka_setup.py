"""aiokafka's connects bounded by the connection setup timeout (connection_states.py).

Why: aiokafka bounds a connect (``AIOKafkaConnection.connect``: TCP, TLS, ApiVersions, SASL) only
by ``request_timeout_ms``, and ``AIOKafkaClient`` makes each connection while holding one lock for
all of them, so a broker whose SYNs are lost holds up every connection of that client for 30 s.

How, without forking aiokafka: aiokafka makes every connection with the module function
``aiokafka.client.create_conn``, awaited directly by ``AIOKafkaClient.bootstrap`` and
``AIOKafkaClient._get_conn``. :func:`bound` wraps those two methods on one client *instance*
(instance attributes shadow the class's) so that, for the duration of the call, a context variable
names that client's :class:`ClusterConnectionStates`; ``create_conn``, replaced once in
``aiokafka.client`` by :func:`_create_conn`, bounds the whole connection setup by the schedule when
the variable names one and is aiokafka's own call otherwise. Only the clients passed to
:func:`bound` change; every other aiokafka client in the process (an application's, a test's)
connects as before. aiokafka is pinned (0.14); :func:`bound` fails loudly if these seams move.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import aiokafka.client as aiokafka_client
from aiokafka.client import AIOKafkaClient

from .connection_states import ClusterConnectionStates

T = TypeVar("T")

_STATES: ContextVar[ClusterConnectionStates | None] = ContextVar("kshare_connection_states", default=None)
_HOOKED = ("bootstrap", "_get_conn")  # the AIOKafkaClient methods that call create_conn
_original_create_conn: Callable[..., Awaitable[Any]] | None = None


class ConnectionSetupTimeout(TimeoutError):
    """A backend connection was not set up within its setup timeout."""


async def _create_conn(host: str, port: int, **kwargs: Any) -> Any:
    assert _original_create_conn is not None
    states = _STATES.get()
    if states is None:
        return await _original_create_conn(host, port, **kwargs)
    attempt = states.connecting(host, port)
    try:
        # cancelled past the timeout, aiokafka's connect closes its half-made connection itself
        conn = await asyncio.wait_for(_original_create_conn(host, port, **kwargs), attempt.timeout_s)
    except TimeoutError:
        states.failed(attempt)
        raise ConnectionSetupTimeout(
            f"connection to {host}:{port} not set up within {attempt.timeout_s:.1f} s (socket.connection.setup."
            f"timeout.ms, after {attempt.failures} consecutive failures)") from None
    except Exception:
        states.failed(attempt)
        raise
    states.ready(attempt)
    return conn


def _install() -> None:
    global _original_create_conn
    if _original_create_conn is None:
        current = getattr(aiokafka_client, "create_conn", None)
        if current is None or not all(callable(getattr(AIOKafkaClient, m, None)) for m in _HOOKED):
            raise RuntimeError("aiokafka no longer makes connections with aiokafka.client.create_conn from "
                               f"AIOKafkaClient.{'/'.join(_HOOKED)}: backend/aiokafka_setup.py needs updating")
        _original_create_conn = current
        aiokafka_client.create_conn = _create_conn


def _with_states(method: Callable[..., Awaitable[Any]], states: ClusterConnectionStates) -> Callable[..., Any]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        token = _STATES.set(states)
        try:
            return await method(*args, **kwargs)
        finally:
            _STATES.reset(token)
    return call


def aiokafka_client_of(obj: Any) -> AIOKafkaClient:
    """The ``AIOKafkaClient`` of an aiokafka producer (``client``), consumer or admin client
    (``_client``), or ``obj`` itself."""
    for client in (obj, getattr(obj, "client", None), getattr(obj, "_client", None)):
        if isinstance(client, AIOKafkaClient):
            return client
    raise TypeError(f"{type(obj).__name__} holds no AIOKafkaClient")


def bound(obj: T, states: ClusterConnectionStates | None) -> T:
    """``obj`` (an ``AIOKafkaClient``, or a producer, consumer or admin client) with every
    connection it makes bounded by ``states``' setup timeout; ``states`` None: ``obj`` unchanged."""
    if states is None:
        return obj
    _install()
    client = aiokafka_client_of(obj)
    for name in _HOOKED:
        if name not in vars(client):  # bound twice: one wrapper is enough
            setattr(client, name, _with_states(getattr(client, name), states))
    return obj


__all__ = ["ConnectionSetupTimeout", "aiokafka_client_of", "bound"]
