"""Built-in persisters: the compacted-topic persister (default) and the memory persister."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kshare_sidecar.hookspecs import hookimpl

if TYPE_CHECKING:
    from kshare_sidecar.backend.security import BackendSecurity
    from kshare_sidecar.config import SidecarConfig


def _topic_persister(**options):
    from kshare_sidecar.persist.topic import TopicPersister  # aiokafka imported only when used

    return TopicPersister(**options)


def _memory_persister(**options):
    from kshare_sidecar.persist.memory import MemoryPersister

    return MemoryPersister(**options)


@hookimpl
def register_persisters(register):
    register("topic", _topic_persister,
             description="state in a compacted topic on the backend (default), transactional writers")
    register("memory", _memory_persister, description="in-process state for tests and demos (not durable)")


def persister_options(cfg: SidecarConfig, security: BackendSecurity) -> dict[str, Any]:
    """The options the sidecar config gives the persister it names (the built-in ``topic`` reads the
    state.* keys and the backend's security; ``memory`` and outside persisters get none)."""
    if cfg.plugins.persister != "topic":
        return {}
    state = cfg.state
    return {"bootstrap_servers": cfg.backend.bootstrap_servers, "topic": state.topic,
            "partitions": state.topic_partitions, "replication_factor": state.topic_replication_factor,
            "linger_ms": float(state.write_linger_ms),
            "transaction_timeout_ms": state.transaction_timeout_ms,
            # past the transaction timeout a commit is settled by reading the state back
            "commit_timeout_s": min(30.0, state.transaction_timeout_ms / 1000),
            "write_mode": state.write_mode, "writer_refresh_s": state.write_refresh_ms / 1000,
            "client_options": security.aiokafka_options()}
