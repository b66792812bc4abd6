"""Close the share session when Spark stops the driver-side Python process with SIGTERM.

On ``query.stop()`` PySpark 4.x stops the Python process that hosts the streaming source by
destroying it (SIGTERM). Python's default action for SIGTERM ends the process at once, before
PySpark's ``finally: reader.stop()`` runs, so the share session was never closed: the group
only handed the stopped query's records (and partitions) to other members after the session
timed out (~45 s), and the sidecar logged a session timeout for every graceful stop.

:func:`watch` installs a handler the first time a reader opens its share consumer (that is the
driver's source process; executors and planner workers never open one). On SIGTERM:

- normally, the handler runs every live reader's ordinary ``stop()`` (release what is acquired,
  close the share consumer, which leaves the group) and then ends the process the way the
  signal would have, with the previous handler (the default one: exit on SIGTERM);
- while a librdkafka call of ours is in progress (confluent-kafka runs Python signal handlers
  from inside ``poll``/``commit_sync``), closing the same client there is unsafe: the handler
  raises :class:`SourceStopping` instead, which unwinds the call into PySpark's ``finally`` —
  and that runs ``reader.stop()``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import weakref
from contextlib import contextmanager

log = logging.getLogger("kshare.spark")

_readers: weakref.WeakSet = weakref.WeakSet()
_lock = threading.Lock()
_installed = False
_previous = None
_busy = 0
_stopping = False


class SourceStopping(BaseException):  # noqa: N818 - like KeyboardInterrupt: not an error to catch
    """SIGTERM arrived during a share-consumer call; unwinds into PySpark's ``finally``."""


def watch(reader) -> None:
    """Stop ``reader`` on SIGTERM (installs the handler once, from the main thread only)."""
    global _installed, _previous
    _readers.add(reader)
    with _lock:
        if _installed or threading.current_thread() is not threading.main_thread():
            return
        try:
            _previous = signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError) as exc:  # not the main thread of the main interpreter
            log.debug("kshare source: no SIGTERM handler (%s)", exc)
            return
        _installed = True


def unwatch(reader) -> None:
    _readers.discard(reader)


@contextmanager
def consumer_call():
    """Mark a librdkafka call in progress (the handler must not close the client under it)."""
    global _busy
    _busy += 1
    try:
        yield
    finally:
        _busy -= 1


def _on_sigterm(signum, frame) -> None:
    global _stopping
    if _stopping:
        return  # already stopping: let that finish
    _stopping = True
    if _busy:
        raise SourceStopping("SIGTERM during a share-consumer call: stopping the kshare source")
    for reader in list(_readers):
        try:
            reader.stop()
        except Exception:  # keep going: the other readers and the exit still matter
            log.exception("kshare source: stopping on SIGTERM failed")
    previous = _previous if _previous is not None else signal.SIG_DFL
    if callable(previous):
        previous(signum, frame)
        return
    if previous == signal.SIG_IGN:
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
