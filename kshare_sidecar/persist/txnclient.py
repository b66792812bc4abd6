"""What the state writers' aiokafka producers need beyond aiokafka's defaults: a faster retry
after CONCURRENT_TRANSACTIONS, telling a fenced producer from other failures, and the state of a
producer's transaction.

Why a module of its own: all are about aiokafka's transactional producer, not about the
persister's rules; and this is the one place that reaches into aiokafka's private names, where
it has no public API (:func:`transaction_manager`).
"""

from __future__ import annotations

from typing import Any

import aiokafka.producer.sender as _aiokafka_sender
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced, TransactionalIdAuthorizationFailed
from aiokafka.producer.transaction_manager import TransactionManager, TransactionState

from kshare_sidecar.persist.epochwriter import EpochFencedError

#: How soon a transaction that met CONCURRENT_TRANSACTIONS asks again. Back-to-back state
#: transactions on one transactional.id always meet it: the coordinator answers EndTxn once the
#: commit is decided, and refuses the next AddPartitionsToTxn until the markers of the previous
#: one are written (~1-3 ms on a healthy broker; KAFKA-5477). aiokafka retries after a fixed
#: 20 ms (its ``BACKOFF_OVERRIDE``, like Java's producer with its default retry.backoff.ms), which
#: made 20-25 ms the median state write and every acknowledgement wait for it
#: (one aiokafka transaction measured 25 ms median back to back, 7.4 ms with 2 ms here).
#: The constant is module-wide in aiokafka; the sidecar's only transactional producers are
#: these state writers, so lowering it there changes nothing else.
CONCURRENT_TXN_RETRY_S = 0.002


def fast_concurrent_txn_retry() -> None:
    """Lower aiokafka's retry after CONCURRENT_TRANSACTIONS to CONCURRENT_TXN_RETRY_S (idempotent)."""
    if getattr(_aiokafka_sender, "BACKOFF_OVERRIDE", None) is not None:
        _aiokafka_sender.BACKOFF_OVERRIDE = min(_aiokafka_sender.BACKOFF_OVERRIDE, CONCURRENT_TXN_RETRY_S)


_FENCING_ERRORS = (ProducerFenced, InvalidProducerEpoch, TransactionalIdAuthorizationFailed, EpochFencedError)


def is_fenced(exc: BaseException) -> bool:
    """The producer (or epoch writer) was fenced by a newer owner, by its class or its message."""
    if isinstance(exc, _FENCING_ERRORS):
        return True
    text = f"{type(exc).__name__} {exc}".lower()
    return "fenced" in text or "invalidproducerepoch" in text


def transaction_manager(producer: Any) -> TransactionManager | None:
    """The transaction manager of an idempotent or transactional aiokafka producer. aiokafka has no
    public API for a transaction's state (committing, aborting, fatal) nor for waiting until an
    EndTxn is answered, which settling an unconfirmed commit needs (persist/writers/transactional.py):
    its private ``_txn_manager`` is read here and nowhere else."""
    return producer._txn_manager


def is_fatal(producer: Any) -> bool:
    """Whether an aiokafka producer's transaction manager is in a fatal error (it can write no more)."""
    tm = transaction_manager(producer)  # None only for a producer without idempotence (none here)
    return tm is not None and tm.is_fatal_error()


__all__ = ["CONCURRENT_TXN_RETRY_S", "TransactionState", "fast_concurrent_txn_retry", "is_fatal", "is_fenced",
           "transaction_manager"]
