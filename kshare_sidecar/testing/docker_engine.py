"""A Docker engine for the container suites: the one that answers, or one started here and stopped after.

``with docker_engine() as engine:`` yields an :class:`Engine` whose ``host`` is a ``DOCKER_HOST``
value. When an engine already answers (``DOCKER_HOST`` or Docker's default socket) it is used as it
is and left running. Otherwise Debian's ``docker.io`` is installed if ``dockerd`` is missing (under
the machine's apt lock), and a private ``dockerd`` is started:

- on its own socket (``/run/kshare-docker/docker.sock``), so nothing else on the machine — another
  test run pinging Docker's default socket — finds an engine it did not ask for;
- with its data under the harness cache (``~/.cache/kshare/docker``), so images built once stay
  built (cached by tag) from run to run;
- with no bridge, no iptables rules, no IP forwarding and no masquerading: containers use the
  host's network (every listener on loopback, ports from the harness's free-port logic), and the
  host's firewall and the other network namespaces on it are left exactly as they were;
- in its own process group, told by the kernel to stop if the process that started it dies; it is
  stopped with SIGTERM (which stops its containers) when the block ends.

Starting an engine needs root (``dockerd``); a user whose engine runs already needs nothing of this.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .errors import HarnessError
from .maven import cache_root
from .process import die_with_parent, terminate_group

RUN_DIR = Path("/run/kshare-docker")
APT_LOCK = "/tmp/apt.lock"
DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def engine_answers(host: str | None = None, timeout: float = 3) -> bool:
    """True when a Docker engine at ``host`` (None: ``DOCKER_HOST`` or the default socket) answers a ping."""
    try:
        import docker

        client = docker.DockerClient(base_url=host, timeout=int(max(1, timeout))) if host else \
            docker.from_env(timeout=int(max(1, timeout)))
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no SDK, no socket, refused, timeout: all mean "no engine"
        return False


def dockerd_args(run_dir: Path, data_root: Path) -> list[str]:
    """The private engine's command line (pure; see the module doc for why each option)."""
    return ["dockerd",
            "--host", f"unix://{run_dir / 'docker.sock'}",
            "--data-root", str(data_root),
            "--exec-root", str(run_dir / "exec"),
            "--pidfile", str(run_dir / "docker.pid"),
            "--bridge", "none", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
            "--storage-driver", "overlay2", "--log-level", "warn"]


def install_command() -> list[str]:
    """Debian's engine (20.10 in bookworm), installed under the apt lock other users of apt share."""
    return ["flock", APT_LOCK, "apt-get", "install", "-y", "-q", "docker.io"]


@dataclass
class Engine:
    """An engine in use: ``host`` for ``DOCKER_HOST``; ``started`` when this process started it."""

    host: str
    started: bool = False
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    started_in_s: float = 0.0
    installed: bool = False
    notes: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """``os.environ`` plus ``DOCKER_HOST`` for this engine (for the docker CLI and compose)."""
        return {**os.environ, "DOCKER_HOST": self.host}

    def client(self):  # -> docker.DockerClient (untyped)
        import docker

        return docker.DockerClient(base_url=self.host, timeout=300)

    def log_tail(self, lines: int = 20) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the engine if this process started it (SIGTERM stops its containers first)."""
        if self.started and self.process is not None:
            terminate_group(self.process, timeout_s=60)
            self.process = None


def ensure_dockerd(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> tuple[str, bool]:
    """The path of ``dockerd``, installing Debian's ``docker.io`` first when it is missing;
    returns (path, installed now)."""
    path = shutil.which("dockerd")
    if path:
        return path, False
    if shutil.which("apt-get") is None:
        raise HarnessError("dockerd is not installed and there is no apt-get to install it: install a Docker "
                           "engine, or point DOCKER_HOST at one that runs")
    proc = run(install_command(), capture_output=True, text=True, timeout=900,
               env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise HarnessError(f"installing docker.io failed (exit {proc.returncode}): {tail}")
    path = shutil.which("dockerd")
    if not path:
        raise HarnessError("docker.io was installed but dockerd is not on PATH")
    return path, True


def start_engine(run_dir: Path = RUN_DIR, data_root: Path | None = None, timeout_s: float = 90) -> Engine:
    """Start a private ``dockerd`` (installing it if needed) and wait until it answers a ping."""
    if os.geteuid() != 0:
        raise HarnessError("no Docker engine answers and starting one (dockerd) needs root: start Docker, "
                           "or point DOCKER_HOST at an engine that runs")
    dockerd, installed = ensure_dockerd()
    data_root = data_root or cache_root() / "docker"
    run_dir.mkdir(parents=True, exist_ok=True)
    data_root.mkdir(parents=True, exist_ok=True)
    socket = run_dir / "docker.sock"
    log_path = run_dir / "dockerd.log"
    engine = Engine(host=f"unix://{socket}", started=True, log=log_path, installed=installed)
    if engine_answers(engine.host):  # a private engine left by an earlier run (its parent was killed)
        engine.started = False
        engine.notes.append(f"reused the private engine already answering at {engine.host}")
        return engine
    socket.unlink(missing_ok=True)
    started = time.monotonic()
    argv = [dockerd, *dockerd_args(run_dir, data_root)[1:]]
    with open(log_path, "ab") as log:
        engine.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True, preexec_fn=die_with_parent)
    deadline = time.monotonic() + timeout_s
    while not engine_answers(engine.host, timeout=2):
        if engine.process.poll() is not None:
            raise HarnessError(f"dockerd exited with {engine.process.returncode} before answering:\n"
                               f"{engine.log_tail()}")
        if time.monotonic() > deadline:
            engine.stop()
            raise HarnessError(f"dockerd did not answer within {timeout_s:.0f} s:\n{engine.log_tail()}")
        time.sleep(0.3)
    engine.started_in_s = time.monotonic() - started
    return engine


def running_engine() -> str | None:
    """The ``DOCKER_HOST`` of an engine that already answers (the configured one, else the default)."""
    configured = os.environ.get("DOCKER_HOST")
    if configured:
        if not engine_answers(configured):
            raise HarnessError(f"DOCKER_HOST={configured} does not answer a ping: start that engine, or unset "
                               "DOCKER_HOST to have one started here")
        return configured
    return DEFAULT_SOCKET if engine_answers(DEFAULT_SOCKET) else None


@contextmanager
def docker_engine() -> Iterator[Engine]:
    """An engine for the block: the running one, or a private one started (and then stopped) here."""
    host = running_engine()
    if host is not None:
        yield Engine(host=host)
        return
    engine = start_engine()
    try:
        yield engine
    finally:
        engine.stop()
