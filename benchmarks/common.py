"""Helpers shared by the benchmark scenarios (benchmarks/<scenario>.py).

Kept free of scenario logic: argument defaults, the machine description, the kshare sidecar run
as a subprocess, topic set-up, Prometheus scraping, CPU/load sampling and plot boilerplate.
Importing this module puts the repository root on ``sys.path`` so ``kshare_sidecar`` and
``tests.support`` import from a checkout — after any ``PYTHONPATH`` entries, so that
``PYTHONPATH=<other checkout> python benchmarks/<scenario>.py`` measures that checkout's code —
and the sidecars a scenario starts run the same code as the scenario (``SidecarProcess``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the PYTHONPATH this process was started with
GIVEN_PYTHONPATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if str(ROOT) not in sys.path:
    # sys.path[0] is the script's folder, then PYTHONPATH's entries: they keep precedence (an
    # installed editable kshare_sidecar would otherwise be the one measured whatever was asked)
    sys.path.insert(min(len(sys.path), 1 + len(GIVEN_PYTHONPATH)), str(ROOT))

import kshare_sidecar  # noqa: E402
from kshare_sidecar.testing.process import free_port  # noqa: E402,F401 - the harness's: never one port twice

#: the checkout whose kshare_sidecar this process imported: the sidecars it starts run it too
CODE_ROOT = Path(kshare_sidecar.__file__).resolve().parents[1]

DEFAULT_OUT = Path(tempfile.gettempdir()) / "kshare-bench"


# -- command line / output -------------------------------------------------------------------
def base_parser(doc: str | None = None) -> argparse.ArgumentParser:
    """``--quick`` and ``--out`` (default ``$TMPDIR/kshare-bench``), as every scenario takes."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0] or None)
    ap.add_argument("--quick", action="store_true", help="short run (about 5 minutes)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for the JSON and PNG outputs")
    return ap


def machine() -> dict:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}


def loadavg() -> list[float]:
    """1/5/15-minute load averages (what ``uptime`` shows)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


class CpuSampler:
    """Machine-wide CPU busy fraction between ``start()`` and ``stop()`` (from /proc/stat)."""

    @staticmethod
    def _read() -> tuple[int, int] | None:
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        except (OSError, ValueError, IndexError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields), idle

    def __init__(self) -> None:
        self._start: tuple[int, int] | None = None

    def start(self) -> CpuSampler:
        self._start = self._read()
        return self

    def stop(self) -> float | None:
        end = self._read()
        if not self._start or not end or end[0] == self._start[0]:
            return None
        total, idle = end[0] - self._start[0], end[1] - self._start[1]
        return round(1.0 - idle / total, 3)


def finish(summary: dict, out: Path, name: str, plot_fn=None) -> dict:
    """Write ``<name>.json``, the plot ``<name>.png`` (if matplotlib imports) and print the JSON
    summary as the last line of stdout."""
    out.mkdir(parents=True, exist_ok=True)
    png = out / f"{name}.png"
    if plot_fn is not None:
        try:
            if plot_fn(png):
                summary["plot"] = str(png)
        except Exception as exc:  # a plotting problem must not lose the measurement
            summary["plot_error"] = repr(exc)
    (out / f"{name}.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary), flush=True)
    return summary


def pyplot():
    """matplotlib.pyplot with the Agg backend, or None when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


# -- backend set-up ---------------------------------------------------------------------------

def produce_records(bootstrap: str, topic: str, n: int, *, partitions: int, value=None, record_bytes: int = 1024,
                    producer_config: dict | None = None, create: bool = True) -> None:
    """Create ``topic`` (unless ``create`` is false) and produce ``n`` records round-robin over
    ``partitions``. ``value`` is bytes or a callable ``i -> bytes``; default random
    ``record_bytes``. ``producer_config`` overrides the throughput-oriented producer defaults."""
    from confluent_kafka import Producer

    from tests.support import create_topic

    if create:
        create_topic(bootstrap, topic, partitions)
    config = {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
              "queue.buffering.max.kbytes": 1_048_576, "acks": 1}
    config.update(producer_config or {})
    producer = Producer(config)
    payload = os.urandom(record_bytes) if value is None else value
    for i in range(n):
        v = payload(i) if callable(payload) else payload
        while True:
            try:
                producer.produce(topic, value=v, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0, "records not delivered"


def native_share_group(bootstrap: str, group: str) -> str:
    """Configure a native (Kafka 4.x) share group to start at the earliest offset; return it."""
    from tests.support import set_group_config

    set_group_config(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    return group


class SidecarProcess:
    """``kshare sidecar run`` as a subprocess on a free port, backed by ``bootstrap``.

    ``env``: extra ``KSHARE_*`` settings. ``metrics_port``: serve /metrics there (0 = off).
    ``profile``: run under pyinstrument, text report to that file. ``port``: listen there (a
    restart on the same address); ``log``: the sidecar's output goes to that file (appended)."""

    def __init__(self, bootstrap: str, profile: str | None = None, metrics_port: int = 0,
                 env: dict[str, str] | None = None, *, port: int | None = None, log: Path | None = None,
                 log_level: str = "WARNING", start_timeout_s: float = 60) -> None:
        self.port = port or free_port()
        self.metrics_port = metrics_port
        full_env = dict(os.environ, KSHARE_SHARE_AUTO_OFFSET_RESET="earliest",
                        KSHARE_STATE_TOPIC_REPLICATION_FACTOR="1")
        full_env.update(env or {})
        full_env["PYTHONPATH"] = os.pathsep.join([str(CODE_ROOT), *GIVEN_PYTHONPATH])  # the code it imported
        if metrics_port:
            full_env["KSHARE_METRICS_PORT"] = str(metrics_port)
        # the kshare of the interpreter running the benchmark (its venv), else the one on PATH
        local = Path(sys.executable).parent / "kshare"
        kshare = str(local) if local.exists() else "kshare"
        cmd = [kshare, "sidecar", "run", "--bootstrap-server", bootstrap, "--listen", f"127.0.0.1:{self.port}",
               "--log-level", log_level]
        if profile:
            import shutil
            cmd = [sys.executable, "-m", "pyinstrument", "-r", "text", "-o", profile,
                   kshare if local.exists() else shutil.which("kshare") or "kshare"] + cmd[1:]
        self.started = time.monotonic()
        with open(log if log is not None else os.devnull, "ab") as out:
            self.proc = subprocess.Popen(cmd, env=full_env, stdout=out if log is not None else None,
                                         stderr=subprocess.STDOUT if log is not None else None)
        deadline = time.monotonic() + start_timeout_s
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                self.listening_s = time.monotonic() - self.started  # start-up: recovery included
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"kshare sidecar exited with {self.proc.returncode}")
                time.sleep(0.05)
        self.proc.kill()
        raise RuntimeError("kshare sidecar did not start listening")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def samples(self) -> dict[str, float]:
        """The sidecar's kshare_ samples (``{}`` when /metrics is off; its server may start a
        moment after the listener, so a refused connection is tried again for 10 s)."""
        if not self.metrics_port:
            return {}
        for attempt in range(50):
            try:
                return parse_prometheus(self.metrics_text())
            except OSError:
                if attempt == 49:
                    raise
                time.sleep(0.2)
        return {}

    def metrics_text(self) -> str:
        """The ``kshare_`` families of the sidecar's /metrics."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        return "\n".join(line for line in text.splitlines() if line.startswith("kshare_")) + "\n"

    def scrape(self, path: Path) -> None:
        """Save the sidecar's /metrics (kshare_ families only) to ``path``."""
        path.write_text(self.metrics_text())

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def __enter__(self) -> SidecarProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def parse_prometheus(text: str) -> dict[str, float]:
    """``{'name{labels}': value}`` from Prometheus text (samples only; comments skipped)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            samples[name] = float(value)
        except ValueError:
            continue
    return samples


def metric_sum(samples: dict[str, float], name: str) -> float:
    """Sum of every sample of ``name`` (over all label sets)."""
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


def read_path_figures(before: dict[str, float], after: dict[str, float]) -> dict:
    """Read-path figures of a sidecar between two /metrics scrapes.

    ``read_amplification`` = backend record bytes fetched ÷ record bytes delivered to clients
    (1.0 means every byte read from the backend was delivered once). CPU seconds are the
    sidecar process's user + system time in the window; RSS is the process's peak so far."""
    def d(name: str) -> float:
        return metric_sum(after, name) - metric_sum(before, name)

    backend, delivered, records = (d("kshare_backend_fetch_bytes_total"), d("kshare_share_fetch_delivered_bytes_total"),
                                   d("kshare_share_fetch_delivered_records_total"))
    cpu = d("kshare_process_cpu_seconds_total")
    copied = d("kshare_record_bytes_copied_total") if any(k.startswith("kshare_record_bytes_copied") for k in after) \
        else None
    return {
        "backend_fetch_requests": int(d("kshare_backend_fetch_requests_total")),
        "backend_fetch_bytes": int(backend), "delivered_bytes": int(delivered), "delivered_records": int(records),
        "read_amplification": round(backend / delivered, 3) if delivered else None,
        # of the backend bytes, trailing batches cut at a read's size limit (received again by the next read)
        "cut_bytes": int(d("kshare_backend_fetch_cut_bytes_total")),
        "cut_per_delivered_byte": round(d("kshare_backend_fetch_cut_bytes_total") / delivered, 3) if delivered else None,
        "record_bytes_copied": int(copied) if copied is not None else None,
        "copies_per_delivered_byte": round(copied / delivered, 2) if delivered and copied is not None else None,
        "cache_hits": int(d("kshare_read_cache_hits_total")), "cache_misses": int(d("kshare_read_cache_misses_total")),
        "share_fetch_requests": int(d("kshare_total_share_fetch_requests_total")),
        "sidecar_cpu_s": round(cpu, 2),
        "sidecar_cpu_s_per_1m_records": round(cpu / records * 1e6, 1) if records else None,
        "sidecar_max_rss_mb": round(metric_sum(after, "kshare_process_max_resident_memory_bytes") / 2**20, 1),
    }


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]) of an ascending list."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, int(round(q / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


# -- CPU of a process ---------------------------------------------------------------------------
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_user_system_s(pid: int | None) -> tuple[float, float] | None:
    """User and system CPU seconds a process (all its threads) has used so far, from /proc; None
    when it cannot be read (no such process, not Linux)."""
    if not pid:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "; utime, stime are fields 14, 15
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


def context_switches(pid: int, *, all_threads: bool = False) -> tuple[int, int]:
    """Voluntary and involuntary context switches of a process's main thread so far (from /proc).
    A sidecar's event loop runs there and gives up the CPU voluntarily once per wait in epoll, so
    the voluntary count is the loop's wake-ups; the involuntary, the times another process took
    the core from it. ``all_threads``: summed over every thread (a JVM hands a request between
    several)."""
    files = sorted(Path(f"/proc/{pid}/task").glob("*/status")) if all_threads else [Path(f"/proc/{pid}/status")]
    vol = invol = 0
    for status in files:
        try:
            lines = status.read_text().splitlines()
        except OSError:  # a thread ended between the listing and the read
            continue
        for line in lines:
            if line.startswith("voluntary_ctxt_switches"):
                vol += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                invol += int(line.split()[1])
    return vol, invol


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds a process has used so far; None when it cannot be read."""
    split = process_user_system_s(pid)
    return None if split is None else split[0] + split[1]


#: HotSpot's JIT compiler threads, as /proc names them (15 characters: "C2 CompilerThre")
_JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


def jit_cpu_s(pid: int | None) -> float | None:
    """CPU seconds a JVM's JIT compiler threads have used so far (0.0 for a process without
    them); None when the process cannot be read."""
    if not pid:
        return None
    total, seen = 0.0, False
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # a thread ended between the listing and the read
            continue
        seen = True
        if text[text.index("(") + 1:text.rindex(")")] in _JIT_THREADS:
            fields = text[text.rindex(")") + 2:].split()
            total += (int(fields[11]) + int(fields[12])) / _TICKS
    return total if seen else None


class CpuMeter:
    """CPU seconds of some processes between ``start()`` and ``stop()``: ``{name: seconds}``, and
    for a JVM also ``{name}_jit``: its JIT compiler threads' part of them."""

    def __init__(self, **pids: int | None) -> None:
        self._pids = pids
        self._jvms: set[str] = set()
        self._start: dict[str, float | None] = {}

    def _now(self) -> dict[str, float | None]:
        now: dict[str, float | None] = {}
        for name, pid in self._pids.items():
            now[name] = process_cpu_s(pid)
            if name in self._jvms:
                now[name + "_jit"] = jit_cpu_s(pid)
        return now

    def start(self) -> CpuMeter:
        self._jvms = {name for name, pid in self._pids.items() if jit_cpu_s(pid)}
        self._start = self._now()
        return self

    def stop(self) -> dict[str, float | None]:
        """CPU seconds since ``start()`` (also usable as a lap: the meter keeps running)."""
        now = self._now()
        return {name: round(now[name] - then, 2) if now.get(name) is not None and then is not None else None
                for name, then in self._start.items()}


class PySpy:
    """``py-spy record`` attached to a process until :meth:`stop` (the bench extra installs it).

    ``path`` ends in ``.svg`` (flame graph) or anything else (speedscope JSON; open it at
    https://www.speedscope.app or read it with ``benchmarks/pyspy_top.py``)."""

    def __init__(self, pid: int, path: Path, rate: int = 200, native: bool = True) -> None:
        """``native``: Python and C frames, the process stopped for each sample — a stop lands at
        the next return from the kernel, so system calls are over-sampled (a 0.1 µs ``getpid``
        took 13 % of a sidecar's samples). ``native=False``: Python frames only, read without
        stopping it (``--nonblocking``, 1000 Hz): the shares of Python code, unbiased."""
        import shutil

        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        fmt = "flamegraph" if str(path).endswith(".svg") else "speedscope"
        cmd = [exe, "record", "--pid", str(pid), "--rate", str(rate if native else 1000), "--format", fmt,
               "-o", str(path)]
        cmd.append("--native" if native else "--nonblocking")
        self.path = path
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.5)  # attached before the measured work starts

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return
        if self.proc.returncode not in (0, -signal.SIGINT) and not self.path.exists():
            print(f"py-spy failed: {err.decode(errors='replace')[-500:]}", file=sys.stderr)


class PerfRecord:
    """``perf record -g`` (CPU samples with native call stacks, kernel included) on a process until
    :meth:`stop`: where the CPU goes below Python (copies, page faults, syscalls). Read with
    ``perf report -i PATH --no-children --sort dso,sym``."""

    def __init__(self, pid: int, path: Path, freq: int = 499) -> None:
        self.path = path
        self.proc = subprocess.Popen(["perf", "record", "-F", str(freq), "-g", "-p", str(pid), "-o", str(path)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
