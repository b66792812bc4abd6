"""Share groups' records (KIP-932): the pure engine (``engine/``) and the asyncio rooms around it.

Kafka's names, from ``kafka.server.share``: ``manager.SharePartitionManager`` serves ShareFetch
and ShareAcknowledge, ``cache.SharePartitionCache`` holds the loaded share-partitions and
``delayed_fetch.DelayedShareFetch`` parks a fetch until records arrive. See docs/architecture.md.
"""
