"""Moving share groups between kshare and Kafka's native share groups, both ways (docs/migration.md).

A tool beside the server, as ``cli/`` and ``testing/`` are, not a layer of it: it reads kshare's
state with the persister's replay (``persist/``), talks to a native Kafka cluster and to a running
sidecar with admin requests over ``backend/``'s raw connections (the backend's security settings), and
never writes kshare's state itself — a running sidecar does, through its own persister. Why a
package of its own rather than ``persist/``: persist/ stores kshare's state and knows nothing of
native Kafka's admin APIs, nor should it; the move is a procedure over both.

- :mod:`.plan`: what a move carries and what it cannot (pure);
- :mod:`.admin`: the admin requests (either end);
- :mod:`.kshare`: kshare's state of a group, from the state topic;
- :mod:`.moves`: the two procedures, their refusals and the drain wait.
"""
