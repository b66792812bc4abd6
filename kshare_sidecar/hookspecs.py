"""Plugin hook specifications for kshare (pluggy project name ``kshare_sidecar``).

Every hook is a ``register_*`` hook in the style of ``llm``: the host passes a ``register``
callback and the plugin calls it once per thing it provides. Nothing is returned, so the host
keeps full control over validation, duplicate names and error messages.

Plugin authors write::

    from kshare_sidecar.hookspecs import hookimpl   # or: from kshare_sidecar import hookimpl

    @hookimpl
    def register_assignors(register):
        register("my-assignor", MyAssignor, description="...")

An implementation may accept any subset of a hook's documented arguments. Each spec below is
documented (with its exact signature as a heading) in ``docs/plugins/hooks.md``.
"""

from __future__ import annotations

from pluggy import HookimplMarker, HookspecMarker

PROJECT_NAME = "kshare_sidecar"

hookspec = HookspecMarker(PROJECT_NAME)
hookimpl = HookimplMarker(PROJECT_NAME)


@hookspec
def register_assignors(register):
    """Register share-group partition assignors.

    Call ``register(name, factory, description="")`` once per assignor. ``factory(**options)``
    returns an object implementing :class:`kshare_sidecar.assignors.Assignor` (a ``name``
    attribute and a pure, synchronous ``assign(spec) -> GroupAssignment``). Names are unique
    across all plugins. A share group selects one by name with kshare's group config
    ``share.assignor``; groups without a choice use the sidecar setting ``assignor``.
    """


@hookspec
def register_persisters(register):
    """Register share-group state persisters.

    Call ``register(name, factory, description="")`` once per persister. ``factory(**options)``
    returns an object implementing :class:`kshare_sidecar.persist.Persister` (async
    ``start``/``recover``/``close``, ``initialize``/``read``/``write``/``delete``/
    ``read_summary`` with Kafka's state-epoch and leader-epoch fencing, group records, the topic-id
    map, and the cluster part: ``owner_epoch``, the reload/superseded listeners,
    ``drop_connections``, ``topic``, ``cluster`` ...). The sidecar setting ``persister`` selects one
    by name; only the built-in ``topic`` is given options (``settings``: its typed
    ``persist.settings.TopicSettings``, built from the ``state.*`` settings and the backend's by
    ``default_plugins.persisters.persister_options``), any other is called with none.
    """


@hookspec
def register_authenticators(register):
    """Register SASL authenticators: what checks the credentials of clients of SASL listeners.

    Call ``register(name, factory, description="")`` once per authenticator.
    ``factory(config=..., backend_security=..., backend_clients=...)`` (the
    :class:`~kshare_sidecar.config.SidecarConfig`, the backend's
    :class:`~kshare_sidecar.backend.security.BackendSecurity` and the
    :class:`~kshare_sidecar.backend.clients.BackendClients` that makes every connection to the
    backend; accept ``**_`` for arguments added later) returns an object implementing
    :class:`kshare_sidecar.auth.authenticators.Authenticator`: a ``mechanisms`` set, async
    ``verify_plain(username, password) -> bool``, async ``scram_credential(mechanism, username)
    -> ScramCredential | None`` and async ``close()``; optionally ``scram_relay(mechanism)`` (the
    SCRAM exchange answered elsewhere, as ``delegate`` relays it to the backend) and async
    ``start(mechanisms)`` (checks at start-up). The sidecar setting ``sasl.authenticator`` selects
    one by name.
    """
