"""Share groups' membership: KIP-848-style epochs, heartbeats, session timeouts and target
assignment (``coordinator``, pure), the share-partitions a group has initialized
(``initialization``), a group as records (``persisted``), and the asyncio services over them:
``service.GroupService`` (heartbeats, initialization, group records) and ``admin.AdminService``
(describe, list, offsets, configs, delete)."""
