"""A Faust worker (``faust worker``) on a share group, for tests/e2e/test_faust_driver.py.

Environment: KS_BROKER (kshare://host:port), KS_TOPIC, KS_GROUP (the app id = share group),
KS_OUT (JSON lines: one per processed or failed event), KS_FAIL_EVERY (raise on the first
delivery of every record whose number — the value's digits after its last "-" — is a multiple of
it; 0 = never; KS_ON_ERROR=context: inside ``release_on_error()`` instead of letting the
exception crash the agent), KS_PRODUCER (optional: ``broker_producer``, e.g. kafka://backend:9092).
"""

import asyncio
import json
import os
import sys
import time

import faust

from kshare_sidecar.faust import release_on_error

FAIL_EVERY = int(os.environ.get("KS_FAIL_EVERY", "0"))
CONTEXT = os.environ.get("KS_ON_ERROR") == "context"
SLOW_S = float(os.environ.get("KS_SLOW_MS", "0")) / 1000
brokers = {"broker": os.environ["KS_BROKER"]}
if os.environ.get("KS_PRODUCER"):
    brokers = {"broker_consumer": os.environ["KS_BROKER"], "broker_producer": os.environ["KS_PRODUCER"]}
app = faust.App(os.environ["KS_GROUP"], **brokers, web_enabled=False, topic_disable_leader=True,
                broker_commit_interval=0.5, datadir=os.environ.get("KS_DATADIR", "faust-data"))
topic = app.topic(os.environ["KS_TOPIC"], key_type=bytes, value_type=bytes, value_serializer="raw",
                  key_serializer="raw")
out = open(os.environ["KS_OUT"], "a", buffering=1)


@app.task
async def started():
    out.write(json.dumps({"ev": "start", "pid": os.getpid()}) + "\n")


@app.agent(topic)
async def process(stream):
    async for value in stream:
        n = int(value.rsplit(b"-", 1)[-1])
        count = faust.current_event().message.delivery_count
        if FAIL_EVERY and n % FAIL_EVERY == 0 and count == 1:
            out.write(json.dumps({"ev": "fail", "n": n, "dc": count, "pid": os.getpid(), "t": round(time.time(), 3)}) + "\n")
            if CONTEXT:
                with release_on_error():
                    raise RuntimeError(f"record {n} fails (first delivery), handled")
                continue
            raise RuntimeError(f"agent fails on record {n} (first delivery)")
        if SLOW_S:
            await asyncio.sleep(SLOW_S)
        out.write(json.dumps({"ev": "rec", "n": n, "dc": count, "pid": os.getpid(), "t": round(time.time(), 3)}) + "\n")


if __name__ == "__main__":
    sys.argv = [sys.argv[0], "worker", "--without-web", "--loglevel", os.environ.get("KS_LOGLEVEL", "warn")]
    app.main()
