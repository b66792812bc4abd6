"""Built-in persisters: the compacted-topic persister (default) and the memory persister."""

from kshare_sidecar.hookspecs import hookimpl


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
