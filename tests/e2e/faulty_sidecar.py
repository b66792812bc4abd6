"""`kshare sidecar run` with a fault or an older build's behaviour put in from the outside (test only).

    python tests/e2e/faulty_sidecar.py [--hold-state-writes-ms N] [--state-placement key] -- sidecar run ...

* ``--hold-state-writes-ms N``: every state write is held N ms where a SIGSTOP must land inside it:
  a transaction open between its records and its commit (``transactional``), a batch about to be
  sent at its producer epoch (``fenced``) — tests/e2e/test_fencing_faults.py.
* ``--state-placement key``: the state topic's share-partition records placed by the whole key, as
  single sidecars of older builds did — tests/e2e/test_cluster_layout.py.

The sidecar itself is unchanged: the seams are the writers' ``before_commit`` / ``before_send`` and the
settings the sidecar builds its persister from.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import runpy
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hold-state-writes-ms", type=float, default=0.0)
    parser.add_argument("--state-placement", default=None)
    args, rest = parser.parse_known_args()
    if rest and rest[0] == "--":
        rest = rest[1:]
    if args.hold_state_writes_ms:
        hold_state_writes(args.hold_state_writes_ms / 1000)
    if args.state_placement:
        place_state(args.state_placement)
    sys.argv = ["kshare", *rest]
    runpy.run_module("kshare_sidecar.cli", run_name="__main__")


def hold_state_writes(seconds: float) -> None:
    from kshare_sidecar.persist.writers.fenced import FencedWriters
    from kshare_sidecar.persist.writers.transactional import TransactionalWriters

    async def before_commit(self, producer) -> None:
        await producer.flush()
        await asyncio.sleep(seconds)

    async def before_send(self, producer) -> None:
        await asyncio.sleep(seconds)

    TransactionalWriters.before_commit = before_commit  # type: ignore[method-assign]
    FencedWriters.before_send = before_send  # type: ignore[method-assign]


def place_state(placement: str) -> None:
    from kshare_sidecar.persist.settings import TopicSettings

    from_config = TopicSettings.from_config

    def placed(cfg, clients):
        return dataclasses.replace(from_config(cfg, clients), placement=placement)

    TopicSettings.from_config = staticmethod(placed)  # type: ignore[method-assign,assignment]


if __name__ == "__main__":
    main()
