"""What every broker the harness runs shares: one process group in a temporary directory.

:class:`~kshare_sidecar.testing.kafka.KafkaBroker` and :class:`~kshare_sidecar.testing.tansu.TansuBroker`
differ in how they are configured and launched; stopping (the whole process group, then the
directory), killing for fault tests, the readiness wait (a Kafka Metadata answer) and the log tail
in error messages are the same, and live here.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Self

from .errors import HarnessError
from .probe import broker_ready


#: Ports this process has handed out lately: the kernel may give a just-closed port to the next
#: bind, and a broker given one port for two listeners fails to format its storage ("If you have
#: two listeners on the same port then one needs to be IPv4 and the other IPv6").
_HANDED: deque[int] = deque(maxlen=1024)


def free_port() -> int:
    """A loopback port nothing listens on now (a broker or ZooKeeper binds it next), and not
    one this process handed out lately."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED:
            break
    _HANDED.append(port)
    return port


class BrokerProcess:
    """The lifecycle half of a harness broker; subclasses start it and set ``port``/``version``."""

    product = "broker"  # in messages: "Kafka", "tansu"
    log_name = "broker.log"  # in the work directory
    stop_timeout_s = 30.0  # SIGTERM, then SIGKILL
    ready_poll_s = 0.2

    def __init__(self, *, startup_timeout_s: float, keep_dir: bool | None) -> None:
        self.startup_timeout_s = startup_timeout_s
        self.keep_dir = bool(os.environ.get("KSHARE_KEEP_BROKER_DIR")) if keep_dir is None else keep_dir
        self.port = 0
        self.version = ""
        self.workdir: Path | None = None
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        if not self.port:
            raise HarnessError(f"{self.product} is not started: call start() first")
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path | None:
        return self.workdir / self.log_name if self.workdir else None

    def start(self) -> Self:
        raise NotImplementedError

    def _start_in(self, prefix: str, launch: Callable[[], None], started: float) -> Self:
        """A fresh work directory, ``launch()`` (the subclass's process), the readiness wait; on any
        failure everything is stopped and removed again. ``started``: when start() began."""
        self.workdir = Path(tempfile.mkdtemp(prefix=prefix))
        atexit.register(self.stop)
        try:
            launch()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the process tree and remove the work directory; safe to call twice."""
        proc, self._proc = self._proc, None
        terminate_group(proc, timeout_s=self.stop_timeout_s)
        if self.workdir is not None and not self.keep_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
        atexit.unregister(self.stop)

    def kill(self, sig: signal.Signals = signal.SIGKILL, *, wait: bool = True) -> None:
        """Signal the broker (keeping its directory and ports) — half of a restart; ``wait``: until
        it has exited."""
        proc = self._proc
        if proc is None or self.workdir is None:
            raise HarnessError(f"{self.product} is not started: call start() first")
        if proc.poll() is None:
            _signal_group(proc, sig)
            if wait:
                proc.wait(timeout=30)

    def log_tail(self, lines: int = 25) -> str:
        path = self.log_path
        if path is None or not path.exists():
            return f"(no {self.product} log)"
        with open(path, errors="replace") as fh:
            return "".join(deque(fh, maxlen=lines))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise HarnessError(f"{self.product} {self.version} exited during start-up (code "
                                   f"{self._proc.returncode}); log tail:\n{self.log_tail()}")
            if broker_ready("127.0.0.1", self.port):
                return
            time.sleep(self.ready_poll_s)
        raise HarnessError(f"{self.product} {self.version} did not answer Metadata within "
                           f"{self.startup_timeout_s:.0f} s; log tail:\n{self.log_tail()}")


def die_with_parent() -> None:
    """Ask Linux to SIGTERM the broker if the process that started it dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def terminate_group(proc: subprocess.Popen[bytes] | None, timeout_s: float = 30) -> None:
    """SIGTERM a process started with ``start_new_session`` and wait; SIGKILL it if it lingers, and
    always SIGKILL its group afterwards (stragglers). Safe on None and on an exited process."""
    if proc is None:
        return
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait(timeout=10)
    _signal_group(proc, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
