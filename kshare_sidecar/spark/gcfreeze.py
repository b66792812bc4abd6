"""Keep the cyclic garbage collector off the objects a Spark Python process imports.

PySpark's worker daemon runs ``gc.collect()`` after **every task** of a reused Python worker
(``pyspark/daemon.py``), and CPython runs full collections now and then in the driver-side
streaming-source process. Each full collection walks every tracked object: with PySpark, pyarrow,
pandas and confluent-kafka imported that is ~80k objects, and it took 65–100 ms per call on the
benchmark's loaded 2-core machine — half of an executor worker's CPU in a py-spy profile of a
1M-record drain, spent between tasks while the next micro-batch competes for the same
cores. ``gc.freeze()`` moves every object alive at that moment to a permanent generation that
collections skip (the pre-fork pattern of the ``gc`` docs); objects created later are collected
as before, and reference counting frees everything as usual.

:func:`freeze_imports` freezes whenever modules were imported since it last looked: PySpark
imports ~350 more modules (pandas among them) *after* a worker's first read, so freezing only
once left ~34k objects for every collection (still 22–110 ms). It runs at the start of a read
task — right after the daemon's collection, when little besides modules and the task itself is
alive — and when the driver plans a batch. What is frozen is never collected by the cycle
collector; import-time objects live as long as the process anyway.
"""

from __future__ import annotations

import gc
import sys

_modules_seen = 0


def freeze_imports() -> bool:
    """``gc.freeze()`` if modules were imported since the last call; True if it froze."""
    global _modules_seen
    loaded = len(sys.modules)
    if loaded == _modules_seen:
        return False
    _modules_seen = loaded
    gc.freeze()
    return True
