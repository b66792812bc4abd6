"""Kafka's protocol as every layer needs it: constants, kio request framing, addresses, key types.

Why a package of its own, at the bottom of the layering: the server (``wire/``), the backend
client (``backend/``), the share consumer (``client/``), the CLI's admin client (``cli/kclient.py``)
and the test harness's probe all encode kio requests and read Kafka's numbers. Before this package
each carried its own copy (four request framings, four ``host:port`` parsers, two meanings of
``TopicPartition``). Modules here import only the standard library and kio — never another
``kshare_sidecar`` package — so anything may import them without an upward edge or a cycle.

- :mod:`.constants` — API keys, config resource types / sources / types / operations, offset
  specs, coordinator key types, group types and states (error codes are kio's ``ErrorCode``);
- :mod:`.requests` — a request's header + body bytes, a response's header and body, cached kio
  readers and writers;
- :mod:`.blocking` — one blocking socket connection, one request at a time (CLI, harness probe);
- :mod:`.address` — ``host:port`` and bootstrap lists;
- :mod:`.types` — ``TopicPartition`` (by name) and ``TopicIdPartition`` (by topic id).
"""
