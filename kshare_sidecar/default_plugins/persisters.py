"""Built-in persisters: the compacted-topic persister (default) and the memory persister."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kshare_sidecar.hookspecs import hookimpl

if TYPE_CHECKING:
    from kshare_sidecar.backend.clients import BackendClients
    from kshare_sidecar.config import SidecarConfig


def _topic_persister(settings):
    from kshare_sidecar.persist.topic import TopicPersister  # aiokafka imported only when used

    return TopicPersister(settings)


def _memory_persister(**options):
    from kshare_sidecar.persist.memory import MemoryPersister

    return MemoryPersister(**options)


@hookimpl
def register_persisters(register):
    register("topic", _topic_persister,
             description="state in a compacted topic on the backend (default), transactional writers")
    register("memory", _memory_persister, description="in-process state for tests and demos (not durable)")


def persister_options(cfg: SidecarConfig, clients: BackendClients) -> dict[str, Any]:
    """The options the sidecar config gives the persister it names: the built-in ``topic`` gets its
    typed settings (``settings``: persist/settings.py's ``TopicSettings``, from the state.* keys and
    the backend clients' address and security); ``memory`` and outside persisters get none."""
    if cfg.plugins.persister != "topic":
        return {}
    from kshare_sidecar.persist.settings import TopicSettings  # aiokafka imported only when used

    return {"settings": TopicSettings.from_config(cfg, clients)}
