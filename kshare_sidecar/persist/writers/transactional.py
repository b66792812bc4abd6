"""``state.write.mode=transactional``: one Kafka transaction per batch, by aiokafka's transactional
producer under ``transactional.id`` ``<prefix>-<topic>-<partition>``. Starting a second writer for
the same partition bumps the producer epoch and the coordinator fences the first; its open
transaction is aborted. A commit that times out is *not* a failure: the producer is never
re-initialised to recover from it (that would fence a live owner); :meth:`settle` waits for its
transaction to end and the partition is re-read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer

from kshare_sidecar.persist.errors import CommitOutcomeUnknownError
from kshare_sidecar.persist.txnclient import TransactionState, fast_concurrent_txn_retry, is_fatal, is_fenced, \
    transaction_manager
from kshare_sidecar.persist.writers.base import StateWriters

if TYPE_CHECKING:
    from kshare_sidecar.persist.ops import Record

log = logging.getLogger("kshare_sidecar.persist.topic")


class TransactionalWriters(StateWriters):
    """aiokafka transactional producers, one per state partition."""

    # the coordinator fences a superseded writer: its transaction cannot commit
    replay_rule = "key"

    def new(self, partition: int) -> AIOKafkaProducer:
        fast_concurrent_txn_retry()
        s = self.settings
        return s.bound(AIOKafkaProducer(
            bootstrap_servers=s.bootstrap_servers,
            transactional_id=s.transactional_id(partition),
            enable_idempotence=True,
            acks="all",
            linger_ms=0,
            # Other retriable errors (coordinator moves, NOT_ENOUGH_REPLICAS) wait 20 ms, as Java's
            # producer waits for CONCURRENT_TRANSACTIONS; that case itself: txnclient.CONCURRENT_TXN_RETRY_S.
            retry_backoff_ms=20,
            max_batch_size=1024 * 1024,
            request_timeout_ms=s.request_timeout_ms,
            transaction_timeout_ms=s.transaction_timeout_ms,
            client_id=f"kshare-state-writer-{partition}",
            **s.client_options,
        ))

    def unusable(self, producer: Any) -> bool:
        return is_fatal(producer)

    async def write(self, producer: AIOKafkaProducer, partition: int, records: list[Record]) -> None:
        futures: list[asyncio.Future] = []
        try:
            await producer.begin_transaction()
            for key, value in records:
                futures.append(await producer.send(self.settings.topic, value=value, key=key, partition=partition))
            await self.before_commit(producer)
            await producer.commit_transaction()
            for f in futures:
                f.result()  # surface a failed batch even if the commit call returned
        finally:
            for f in futures:  # the commit error is what we report; consume the batch errors
                if f.done():
                    if not f.cancelled():
                        f.exception()
                else:
                    f.add_done_callback(lambda fut: fut.cancelled() or fut.exception())

    async def before_commit(self, producer: AIOKafkaProducer) -> None:
        """Between a transaction's records and its commit (a seam: the fencing tests hold a
        transaction open here, so a SIGSTOP lands inside one)."""

    async def settle(self, partition: int) -> bool:
        """Let the producer finish the transaction whose commit was not confirmed: wait for its
        EndTxn to be answered, or abort a transaction that never reached commit. The producer is
        kept (re-initialising it would fence whoever owns the partition now). False when it is
        unusable (fenced or fatal): then ownership must be re-read."""
        producer = self.producers.get(partition)
        if producer is None:
            return False
        s = self.settings
        tm = transaction_manager(producer)
        if tm is None:  # not a transactional producer: nothing to settle
            return False
        deadline = time.monotonic() + max(s.transaction_timeout_ms / 1000 * 2, s.commit_timeout_s)
        while time.monotonic() < deadline:
            state = tm.state
            if state == TransactionState.READY:
                return True
            if state in (TransactionState.FATAL_ERROR, TransactionState.UNINITIALIZED):
                return False
            try:
                if state in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR):
                    await asyncio.wait_for(producer.abort_transaction(), s.commit_timeout_s)
                else:  # committing or aborting: the sender is still working on EndTxn
                    waiter = tm.wait_for_transaction_end()
                    await asyncio.wait({waiter}, timeout=s.commit_timeout_s)
                    if waiter.done() and not waiter.cancelled():
                        waiter.exception()  # consumed; the state tells the outcome
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - the transaction state decides
                if is_fenced(exc):
                    return False
                log.debug("state partition %d: settling: %r", partition, exc)
                await asyncio.sleep(0.1)
        raise CommitOutcomeUnknownError(f"state partition {partition}: transaction did not end")
