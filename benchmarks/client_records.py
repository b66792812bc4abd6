"""The asyncio client's CPU per record, without sockets: one ShareFetch answer's records taken
into the books, handed out, accepted (implicit mode) and packed into acknowledgements.

What ``kshare_sidecar.client`` does per poll besides the round trip: read the record batches
(aiokafka's C reader), build a ``ShareRecord`` each, keep the ack books, pack the ACCEPTs. CPU
time of this process (``time.process_time``), so a loaded machine inflates it less than a rate.
Compare two checkouts with ``PYTHONPATH=<other checkout> python benchmarks/client_records.py``.

Prints one line, then the JSON summary as the LAST line.
Usage: python benchmarks/client_records.py [--records-per-poll 500] [--record-bytes 1024] [--polls 200]
       [--records-per-ms 1]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import types
import uuid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records-per-poll", type=int, default=500)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--polls", type=int, default=200)
    ap.add_argument("--records-per-ms", type=int, default=1,
                    help="records sharing a timestamp (a producer stamps in milliseconds)")
    args = ap.parse_args()
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from kshare_sidecar.client.fetcher import FetchConfig, ShareConsumeRequestManager
    from kshare_sidecar.client.membership import Membership

    n, value = args.records_per_poll, os.urandom(args.record_bytes)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i in range(n):
        builder.append(i, timestamp=1_700_000_000_000 + i // args.records_per_ms, key=None, value=value, headers=[])
    records = bytes(builder.build())
    topic_id = uuid.uuid4()
    cluster = types.SimpleNamespace(names={topic_id: "t"}, ids={})
    config = FetchConfig(max_poll_records=n, min_bytes=1, max_bytes=1 << 26, acquire_mode=0, timeout_s=30,
                         backoff_s=0.1, check_crcs=True, key_deserializer=None, value_deserializer=None)
    books = ShareConsumeRequestManager("g", Membership(), cluster, config)
    answer = types.SimpleNamespace(records=records, acquired_records=[
        types.SimpleNamespace(first_offset=0, last_offset=n - 1, delivery_count=1)])
    start = time.process_time()
    for _ in range(args.polls):
        books._take_records(1, (topic_id, 0), answer)  # a ShareFetch answer's partition
        got = books.drain(n)  # getmany
        books.accept_delivered({})  # the next getmany: implicit ACCEPT
        books.take_acks(1)  # packed for the next ShareFetch
    cpu = time.process_time() - start
    handed = sum(len(v) for v in got.values())
    us = cpu / args.polls / n * 1e6
    print(f"{us:.2f} µs CPU per record ({n} records of {args.record_bytes} B per poll, {handed} handed out)")
    print(json.dumps({"scenario": "client_records", "records_per_poll": n, "record_bytes": args.record_bytes,
                      "records_per_ms": args.records_per_ms, "polls": args.polls, "cpu_us_per_record": round(us, 3)}))


if __name__ == "__main__":
    main()
