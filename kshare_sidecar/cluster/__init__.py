"""A cluster of sidecars: pure pieces — the sticky assignment of state partitions
to live sidecars, the membership codec and the cluster view that routing reads.

The asyncio membership (aiokafka group over the state topic) lives in
``kshare_sidecar/service/cluster.py``; the placement of entities on state partitions in
``kshare_sidecar/persist/ownership.py`` (``state_partition_for``). See docs/deployment.md.
"""
