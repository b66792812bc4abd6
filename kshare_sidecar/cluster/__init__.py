"""A cluster of sidecars: the sticky assignment of state partitions to live sidecars (``assign``),
the lease (``lease``), the cluster view that routing reads (``view``) — pure pieces — and the
asyncio parts over the backend: ``membership`` (the sidecars' consumer group over the state topic)
and ``state_tail`` (every group's configs and owner marks read from the state topic). The
placement of entities on state partitions is ``kshare_sidecar/persist/ownership.py``
(``state_partition_for``). See docs/deployment.md.
"""
