"""``make fuzz``: hostile frames against a live sidecar on Kafka 3.9, with liveness checks.

Starts an embedded Kafka 3.9 (the project's harness), two topics with a few records, and
``kshare sidecar run`` as a subprocess logging to a file. Client tasks then open connections and
write batches of frames — structure-aware (valid for the schema, values aimed at the handlers),
mutated (structure-aware frames with broken lengths, counts, varints and bytes) and random (a
served api key/version prefix, random body) — then half-close and read until the sidecar closes.
After every batch round a fresh connection must get an ApiVersions answer within 5 s.

Counted: frames written, responses read, connections, crashes (the sidecar process exits),
hangs (no ApiVersions answer on a fresh connection, or a connection not closed within 10 s of
our EOF), tracebacks and ERROR lines in the sidecar's log, and its RSS growth after warm-up.
The figures are printed as JSON (and written to ``--out``); the exit code is 1 if any of
crashes/hangs/tracebacks is non-zero or RSS grew by more than ``--max-rss-growth-mb``.

    python tests/fuzz/run.py --minutes 10 [--seed N] [--clients 6] [--out fuzz.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kio.schema.api_versions.v3.request import ApiVersionsRequest  # noqa: E402
from kio.schema.api_versions.v3.response import ApiVersionsResponse  # noqa: E402
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic  # noqa: E402
from kio.schema.metadata.v12.response import MetadataResponse  # noqa: E402

from kshare_sidecar.testing.cluster import kafka_cluster  # noqa: E402
from kshare_sidecar.testing.wirefuzz import FrameFactory  # noqa: E402
from kshare_sidecar.wire import codec  # noqa: E402

TOPICS = ("fuzz-a", "fuzz-b")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def request(port: int, req, resp_cls, timeout: float = 5.0):
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        writer.write(codec.encode_request(req, 1, "fuzz-probe"))
        size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), timeout), "big")
        payload = await asyncio.wait_for(reader.readexactly(size), timeout)
        return codec.decode_response(payload, resp_cls)[1]
    finally:
        writer.close()


async def alive(port: int) -> bool:
    try:
        resp = await request(port, ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"),
                             ApiVersionsResponse)
        return int(resp.error_code) == 0
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
        return False


class Stats:
    def __init__(self) -> None:
        self.frames = self.responses = self.connections = self.conn_hangs = self.liveness_failures = 0
        self.processed = self.server_closes = 0
        self.hung_batches: list[dict] = []  # for diagnosis: the frames of connections that did not close
        self.by_mode = {"structured": 0, "mutated": 0, "random": 0}


async def client(port: int, factory: FrameFactory, stats: Stats, batch: int, stop_at: float) -> None:
    rng = factory.rng
    while time.monotonic() < stop_at:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        stats.connections += 1
        frames = []
        # Most frames in a batch are structure-aware (so the connection lives and handlers run);
        # the hostile ones go last, since the sidecar closes on the first unparsable frame.
        for _ in range(batch - 1):
            frames.append(("structured", factory.structured()))
        mode = rng.choice(("structured", "mutated", "mutated", "random"))
        last = {"structured": factory.structured, "mutated": factory.mutated, "random": factory.random_frame}[mode]()
        frames.append((mode, last))
        data = b"".join(codec.frame(f) for _, f in frames)
        if rng.random() < 0.02:  # sometimes a lying size prefix or a partial frame
            data += struct.pack(">i", rng.choice((-1, 2**31 - 1, 200_000_000, 50))) + rng.randbytes(rng.randint(0, 20))
        try:
            writer.write(data)
            for mode, _ in frames:
                stats.by_mode[mode] += 1
            stats.frames += len(frames)
            answered, closed = await read_until_quiet(reader, len(frames))
            stats.responses += answered
            if closed:  # the sidecar closed on a frame: that frame was processed too
                stats.processed += answered + 1
                stats.server_closes += 1
            else:  # all answered, or a long poll parked: half-close, the sidecar must close
                stats.processed += answered + (answered < len(frames))
                writer.write_eof()
                try:
                    while await asyncio.wait_for(reader.read(65536), 10):
                        pass
                except asyncio.TimeoutError:
                    stats.conn_hangs += 1
                    stats.hung_batches.append({"answered": answered, "frames": [f.hex() for _, f in frames]})
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def read_until_quiet(reader: asyncio.StreamReader, expected: int) -> tuple[int, bool]:
    """Read responses until ``expected`` came, the sidecar closed, or 1 s passed without one
    (a parked long poll). Returns (responses, closed by the sidecar)."""
    answered = 0
    while answered < expected:
        try:
            head = await asyncio.wait_for(reader.readexactly(4), 1.0)
            await asyncio.wait_for(reader.readexactly(int.from_bytes(head, "big")), 5.0)
        except asyncio.IncompleteReadError:
            return answered, True
        except asyncio.TimeoutError:
            return answered, False
        answered += 1
    return answered, False


def log_counts(path: Path) -> dict:
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    return {
        "log_lines": len(lines),
        "tracebacks": text.count("Traceback (most recent call last)"),
        "error_lines": sum(" ERROR " in line for line in lines),
        "warning_lines": sum(" WARNING " in line for line in lines),
        "never_retrieved": text.count("never retrieved"),
    }


async def fuzz(args, port: int, pid_alive, pid: int, topic_ids: list[uuid.UUID], served) -> dict:
    stats = Stats()
    rng = random.Random(args.seed)
    started = time.monotonic()
    end = started + args.minutes * 60
    rss_start = None
    rounds = 0
    crashed = False
    while time.monotonic() < end:
        round_end = min(end, time.monotonic() + args.round_s)
        tasks = [asyncio.create_task(client(port, FrameFactory(random.Random(rng.getrandbits(64)),
                                                               topic_ids=topic_ids, served=served),
                                            stats, args.batch, round_end)) for _ in range(args.clients)]
        await asyncio.gather(*tasks)
        rounds += 1
        if not pid_alive():
            crashed = True
            break
        if not await alive(port):
            stats.liveness_failures += 1
        if rss_start is None and time.monotonic() - started > 30:
            rss_start = rss_mb(pid)  # after warm-up: imports, caches, group state
        if args.progress:
            print(f"[{time.monotonic() - started:6.0f}s] processed={stats.processed} responses={stats.responses} "
                  f"conns={stats.connections} rss={rss_mb(pid):.0f}MB", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    rss_end = rss_mb(pid) if not crashed else 0.0
    return {
        "minutes": round(elapsed / 60, 2), "seed": args.seed, "clients": args.clients, "batch": args.batch,
        "frames_sent": stats.frames, "frames_by_mode": stats.by_mode,
        "frames_processed": stats.processed, "frames_processed_per_s": round(stats.processed / elapsed),
        "responses": stats.responses, "closed_by_sidecar": stats.server_closes, "connections": stats.connections, "rounds": rounds,
        "crashes": int(crashed), "hangs": stats.liveness_failures + stats.conn_hangs,
        "liveness_failures": stats.liveness_failures, "connection_hangs": stats.conn_hangs,
        "rss_start_mb": round(rss_start or 0.0, 1), "rss_end_mb": round(rss_end, 1),
        "rss_growth_mb": round(rss_end - (rss_start or rss_end), 1),
        "hung_batches": stats.hung_batches[:5],
    }


def setup_topics(bootstrap: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, num_partitions=3, replication_factor=1) for t in TOPICS]).values():
        f.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(3000):
        producer.produce(TOPICS[i % 2], value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0


async def discover(port: int) -> tuple[list[uuid.UUID], list[tuple[int, int, int]]]:
    versions = await request(port, ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"),
                             ApiVersionsResponse)
    served = [(int(k.api_key), int(k.min_version), int(k.max_version)) for k in versions.api_keys]
    meta = await request(port, MetadataRequest(topics=tuple(MetadataRequestTopic(topic_id=None, name=t) for t in TOPICS),
                                               allow_auto_topic_creation=False,
                                               include_topic_authorized_operations=False), MetadataResponse)
    return [t.topic_id for t in meta.topics if t.topic_id], served


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--clients", type=int, default=6, help="concurrent fuzzing connections")
    ap.add_argument("--batch", type=int, default=20, help="frames written per connection")
    ap.add_argument("--round-s", type=float, default=5.0, help="liveness check interval")
    ap.add_argument("--max-rss-growth-mb", type=float, default=50.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--log", type=Path, default=None, help="keep the sidecar log here")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    logdir = Path(tempfile.mkdtemp(prefix="kshare-fuzz-"))
    log_path = args.log or logdir / "sidecar.log"
    with kafka_cluster("3.9") as cluster:
        setup_topics(cluster.bootstrap)
        port = free_port()
        env = dict(os.environ, KSHARE_SHARE_AUTO_OFFSET_RESET="earliest", KSHARE_STATE_TOPIC_REPLICATION_FACTOR="1",
                   KSHARE_STATE_TOPIC_PARTITIONS="1", PYTHONUNBUFFERED="1")
        with log_path.open("w") as logf:
            proc = subprocess.Popen([sys.executable, "-m", "kshare_sidecar.cli", "sidecar", "run",
                                     "--bootstrap-server", cluster.bootstrap, "--listen", f"127.0.0.1:{port}",
                                     "--log-level", "INFO"], stdout=logf, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 90
            while not asyncio.run(alive(port)):
                if proc.poll() is not None or time.monotonic() > deadline:
                    print(log_path.read_text()[-3000:], file=sys.stderr)
                    raise SystemExit("sidecar did not start")
                time.sleep(0.5)
            topic_ids, served = asyncio.run(discover(port))
            figures = asyncio.run(fuzz(args, port, lambda: proc.poll() is None, proc.pid, topic_ids, served))
            figures["exit_code"] = proc.poll()
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    figures.update(log_counts(log_path))
    figures["sidecar_log"] = str(log_path)
    figures["kafka"] = cluster.version
    out = json.dumps(figures, indent=2)
    print(out)
    if args.out:
        args.out.write_text(out + "\n")
    bad = figures["crashes"] or figures["hangs"] or figures["tracebacks"] or \
        figures["rss_growth_mb"] > args.max_rss_growth_mb
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
