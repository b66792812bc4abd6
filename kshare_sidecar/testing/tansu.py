"""Tansu, a Kafka-compatible broker that is not Apache Kafka, as a second backend.

Why: every other backend the suites use is Apache Kafka's own code. Tansu (tansu-io/tansu, Rust)
speaks the Kafka protocol over its own storage engines, so kshare running on it shows which of
kshare's assumptions are Kafka's protocol and which are Kafka's implementation. It is opt-in
(``make test-tansu``): the binary is built from crates.io, ~40 minutes on 2 cores, and cached in
``<cache>/tansu-<version>`` (``KSHARE_CACHE_DIR`` as for the Kafka jars); ``KSHARE_TANSU_BIN``
names another binary.

``with TansuBroker() as broker: broker.bootstrap`` starts ``tansu broker`` on a free loopback
port with the libSQL (SQLite) storage engine, a file in a temporary directory: no external
service, and the data outlives a sidecar restart and a restart of the broker itself
(:meth:`TansuBroker.restart`). ``storage="memory"`` runs tansu's dynostore engine (the code of
its ``s3://`` engine) in memory instead. Neither is clean in 0.6.0 — on libSQL, deleting one topic
deletes every topic, and two InitProducerId forms stop the storage for good; on dynostore,
ListOffsets "latest" answers the last batch's *first* offset + 1 — and kshare's share scenarios pass
on libSQL only, so that is the default (``KSHARE_TANSU_STORAGE`` picks the ``tansu`` fixture's).
What works and what does not: docs/compatibility.md, "Tansu".
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .cluster import Cluster
from .errors import HarnessError
from .kafka import free_port
from .maven import cache_root
from .process import BrokerProcess, die_with_parent

#: The pinned release and the cargo features it is built with (libsql: ``sqlite://``;
#: dynostore: ``memory://`` and ``s3://``).
TANSU_VERSION = "0.6.0"
TANSU_FEATURES = "dynostore,libsql"
STORAGE_ENGINES = ("sqlite", "memory")


def tansu_root(version: str = TANSU_VERSION) -> Path:
    """Where ``cargo install --root`` puts the pinned build: ``<cache>/tansu-<version>``."""
    return cache_root() / f"tansu-{version}"


def install_command(version: str = TANSU_VERSION) -> list[str]:
    """The cargo command that builds the pinned tansu into :func:`tansu_root` (what ``make
    test-tansu`` runs when the binary is missing)."""
    return ["cargo", "install", "tansu", "--version", version, "--locked", "--features", TANSU_FEATURES,
            "--root", str(tansu_root(version))]


def tansu_binary() -> Path | None:
    """``KSHARE_TANSU_BIN`` if set (it must exist), else the cached pinned build; None if absent."""
    if env := os.environ.get("KSHARE_TANSU_BIN"):
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise HarnessError(f"KSHARE_TANSU_BIN={env} is not an executable file: fix the path or unset it")
        return path
    path = tansu_root() / "bin" / "tansu"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def missing_reason() -> str:
    """One line for a skip: where the binary was looked for and how to get it."""
    return (f"tansu {TANSU_VERSION} not found at {tansu_root() / 'bin' / 'tansu'} (or KSHARE_TANSU_BIN): "
            f"`make test-tansu` (or `kshare dev install-tansu`) builds it ({' '.join(install_command())}; ~40 min on 2 cores)")


class TansuBroker(BrokerProcess):
    """One ``tansu broker`` process on loopback (Tansu is a single node: node id 111).

    ``storage``: ``"sqlite"`` (default; ``sqlite://tansu.db`` in the work directory, kept across
    :meth:`restart`) or ``"memory"`` (``memory://tansu/``, lost when the process stops).
    """

    product = "tansu"
    log_name = "tansu.log"
    stop_timeout_s = 10.0
    ready_poll_s = 0.1

    def __init__(self, *, storage: str = "sqlite", binary: Path | None = None, startup_timeout_s: float = 30.0,
                 keep_dir: bool | None = None, env: dict[str, str] | None = None) -> None:
        if storage not in STORAGE_ENGINES:
            raise HarnessError(f"unknown tansu storage engine {storage!r}: use one of {', '.join(STORAGE_ENGINES)}")
        super().__init__(startup_timeout_s=startup_timeout_s, keep_dir=keep_dir)
        self.storage = storage
        self.binary = binary
        self.env = dict(env or {})  # e.g. RUST_LOG

    @property
    def storage_url(self) -> str:
        return "memory://tansu/" if self.storage == "memory" else "sqlite://tansu.db"

    def start(self) -> TansuBroker:
        binary = self.binary or tansu_binary()
        if binary is None:
            raise HarnessError(missing_reason())
        self.binary = binary
        self.version = _version(binary)
        started = time.monotonic()
        self.port = free_port()
        return self._start_in("kshare-tansu-", self._spawn, started)

    def restart(self, *, down_s: float = 0.0, sig: signal.Signals = signal.SIGKILL) -> None:
        """Kill the broker, wait ``down_s``, start it again on the same port and storage (with
        ``memory`` storage that is an empty broker)."""
        self.kill(sig)
        time.sleep(down_s)
        self._spawn()
        self._wait_ready()

    def _command(self) -> list[str]:
        listener = f"tcp://127.0.0.1:{self.port}"
        return [str(self.binary), "broker", "--listener-url", listener, "--advertised-listener-url", listener,
                "--storage-engine", self.storage_url, "--cluster-id", "kshare-tansu",
                "--silent"]  # no banner and no per-connection progress spinners; its log lines stay

    def _spawn(self) -> None:
        assert self.workdir is not None
        # tansu reads a `.env` in its working directory and these variables; the work directory has
        # none, and the command line names every setting, so the caller's environment cannot leak in.
        env = {k: v for k, v in os.environ.items()
               if k not in {"CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
                            "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT"}}
        with open(self.workdir / "tansu.log", "ab") as log:
            self._proc = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.workdir,
                                          env=env | self.env, preexec_fn=die_with_parent)


def _version(binary: Path) -> str:
    """``tansu --version`` prints ``tansu 0.6.0``; the version part."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    except OSError as exc:
        raise HarnessError(f"cannot run {binary}: {exc}") from None
    words = out.stdout.split()
    if out.returncode != 0 or len(words) < 2:
        raise HarnessError(f"{binary} --version failed (code {out.returncode}): {(out.stdout + out.stderr)[-200:]}")
    return words[-1]


@contextmanager
def tansu_cluster(storage: str | None = None) -> Iterator[Cluster]:
    """A started :class:`TansuBroker` for the duration of the block, as the harness's ``Cluster``;
    ``storage`` defaults to ``KSHARE_TANSU_STORAGE`` or ``sqlite``."""
    storage = storage or os.environ.get("KSHARE_TANSU_STORAGE") or "sqlite"
    with TansuBroker(storage=storage) as broker:
        yield Cluster(broker.bootstrap, broker.version, "embedded", False, broker.startup_seconds or 0.0,
                      product="tansu")


def install() -> Path:
    """Build the pinned tansu with cargo unless it is already there (``make test-tansu``); the
    binary's path. The build runs at the lowest CPU priority: it takes ~40 minutes on 2 cores."""
    if (binary := tansu_binary()) is not None:
        return binary
    if shutil.which("cargo") is None:
        raise HarnessError("cargo was not found on PATH: install Rust (https://rustup.rs) to build tansu")
    command = install_command()
    print(f"building tansu {TANSU_VERSION} (once, ~40 min on 2 cores): {' '.join(command)}", flush=True)
    started = time.monotonic()
    done = subprocess.run(command, preexec_fn=lambda: os.nice(19))
    if done.returncode != 0 or (binary := tansu_binary()) is None:
        raise HarnessError(f"`{' '.join(command)}` failed (exit code {done.returncode}); cargo's output is above")
    print(f"tansu {TANSU_VERSION} built in {(time.monotonic() - started) / 60:.1f} min: {binary}", flush=True)
    return binary

