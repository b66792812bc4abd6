"""Fast fuzzing without sockets or brokers: frames straight into decode + dispatch over the real
services, the memory persister and an in-memory log (tests/unit/wire/stack.py).

Counts outcomes per mode; any exception other than CloseConnection, and any ERROR log line, is a
finding (printed with the frame's hex). Exit code 1 if there was one.

    python tests/fuzz/inprocess.py --frames 100000 [--seed 7] [--modes mutated,random,structured]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kshare_sidecar.testing.wirefuzz import FrameFactory  # noqa: E402
from kshare_sidecar.wire import CloseConnection, codec  # noqa: E402
from tests.unit.wire.stack import TOPICS, FakeConn as Conn, Stack  # noqa: E402




class Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def main(args) -> int:
    errors = Errors()
    logging.getLogger().addHandler(errors)
    logging.getLogger().setLevel(logging.WARNING)
    stack = Stack()
    dispatcher = await stack.start()
    factory = FrameFactory(random.Random(args.seed), topic_ids=[t.topic_id for t in TOPICS],
                           served=dispatcher.registry.ranges())
    make = {"structured": factory.structured, "mutated": factory.mutated, "random": factory.random_frame}
    modes = args.modes.split(",")
    outcomes: collections.Counter = collections.Counter()
    findings = []
    started = time.monotonic()
    for _ in range(args.frames):
        mode = factory.rng.choice(modes)
        frame = make[mode]()
        before = len(errors.records)
        try:
            await asyncio.wait_for(dispatcher.handle(frame, Conn(), lambda: None), 0.2)
            outcomes[mode, "answered"] += 1
        except CloseConnection:
            outcomes[mode, "closed"] += 1
        except TimeoutError:
            outcomes[mode, "parked" if codec.peek(frame).api_key == 78 else "HUNG"] += 1
        except Exception as exc:  # a finding
            outcomes[mode, "EXCEPTION"] += 1
            findings.append({"frame": frame.hex(), "error": repr(exc)})
        if len(errors.records) > before:
            outcomes[mode, "ERROR-logged"] += 1
            findings.append({"frame": frame.hex(), "error": errors.records[-1].getMessage()})
    await stack.stop()
    hung = sum(v for (m, k), v in outcomes.items() if k == "HUNG")
    print(json.dumps({"frames": args.frames, "seconds": round(time.monotonic() - started, 1), "seed": args.seed,
                      "outcomes": {f"{m}/{k}": v for (m, k), v in sorted(outcomes.items())},
                      "findings": findings[:10], "hung": hung}, indent=2))
    return 1 if findings or hung else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--modes", default="structured,mutated,random")
    raise SystemExit(asyncio.run(main(ap.parse_args())))
