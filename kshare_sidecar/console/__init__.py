"""The web console served by the sidecar (docs/console.md): share groups, their share-partitions
and dead letters as pages and JSON, and — when enabled — reset, delete and redrive.

A thin layer over the services' memory (model.py reads, never writes) and over the admin service
and dlq/ for actions; above the services (group/, share/) in the data flow, like api/: nothing below imports it.
"""
