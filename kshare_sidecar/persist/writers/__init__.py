"""The state topic's writers, one strategy per ``state.write.mode``, chosen once (:func:`for_mode`).

Every strategy keeps one writer per owned state partition and answers the store's four questions
the same way: ``commit`` (durably write a batch, or raise ``WriterFencedError`` /
``CommitOutcomeUnknownError``), ``settle`` (let an unconfirmed commit end without fencing the
current owner), ``reopen`` (a new writer that fences every other) and ``drop``. What differs:

* :mod:`.fenced` (the default): idempotent batches under a transactional id's producer epoch,
  fenced by the partition leader (persist/epochwriter.py);
* :mod:`.transactional`: one Kafka transaction per batch (aiokafka's transactional producer);
* :mod:`.idempotent`: plain idempotent produce, for backends without transactions; fenced by the
  replay's owner rule and the state-topic watch (:mod:`.watch`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kshare_sidecar.persist.writers.base import StateWriters

if TYPE_CHECKING:
    from kshare_sidecar.persist.settings import TopicSettings

__all__ = ["StateWriters", "for_mode"]


def for_mode(settings: TopicSettings) -> StateWriters:
    """The writers of ``settings.write_mode`` (persist/settings.py's WRITE_MODES)."""
    if settings.write_mode == "fenced":
        from kshare_sidecar.persist.writers.fenced import FencedWriters
        return FencedWriters(settings)
    if settings.write_mode == "transactional":
        from kshare_sidecar.persist.writers.transactional import TransactionalWriters
        return TransactionalWriters(settings)
    from kshare_sidecar.persist.writers.idempotent import IdempotentWriters
    return IdempotentWriters(settings)
