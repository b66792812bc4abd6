"""A Faust worker (``faust worker``) on a share group, for tests/e2e/test_faust_driver.py.

Environment: KS_BROKER (kshare://host:port), KS_TOPIC, KS_GROUP (the app id = share group),
KS_OUT (JSON lines: one per processed or failed event), KS_FAIL_EVERY (raise on the first
delivery of every record whose value is a multiple of it; 0 = never).
"""

import json
import time
import os
import sys

import faust

FAIL_EVERY = int(os.environ.get("KS_FAIL_EVERY", "0"))
app = faust.App(os.environ["KS_GROUP"], broker=os.environ["KS_BROKER"], web_enabled=False,
                topic_disable_leader=True, broker_commit_interval=0.5)
topic = app.topic(os.environ["KS_TOPIC"], key_type=bytes, value_type=bytes, value_serializer="raw",
                  key_serializer="raw")
out = open(os.environ["KS_OUT"], "a", buffering=1)


@app.agent(topic)
async def process(stream):
    async for value in stream:
        n = int(value)
        count = faust.current_event().message.delivery_count
        if FAIL_EVERY and n % FAIL_EVERY == 0 and count == 1:
            out.write(json.dumps({"ev": "fail", "n": n, "dc": count, "pid": os.getpid(), "t": round(time.time(), 3)}) + "\n")
            raise RuntimeError(f"agent fails on record {n} (first delivery)")
        out.write(json.dumps({"ev": "rec", "n": n, "dc": count, "pid": os.getpid(), "t": round(time.time(), 3)}) + "\n")


if __name__ == "__main__":
    sys.argv = [sys.argv[0], "worker", "--loglevel", os.environ.get("KS_LOGLEVEL", "warning")]
    app.main()
