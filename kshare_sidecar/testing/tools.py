"""Test helpers for administration: Kafka's own Java admin tools, and an in-thread sidecar.

``kafka_tools_libs()`` resolves ``org.apache.kafka:kafka-tools`` (ShareGroupCommand and, since 4.4,
ConfigCommand, which 4.3 kept in ``kafka_2.13``) from Maven Central into the harness cache once;
``run_share_groups(...)`` / ``run_configs(...)`` run them like ``kafka-share-groups.sh`` and
``kafka-configs.sh``. ``SidecarThread`` runs a sidecar on its own event loop in a thread, so
synchronous tests (subprocesses, confluent-kafka) can talk to it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .maven import require_tool, resolve_artifacts

if TYPE_CHECKING:
    from ..app import Sidecar

T = TypeVar("T")

#: The tools of the native reference (testing/kafka.py, alias "4").
KAFKA_TOOLS_VERSION = "4.4.0"
SHARE_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
#: kafka-configs.sh's main class: 4.4 moved it from kafka_2.13 (Scala) to kafka-tools.
CONFIG_COMMANDS = {"4.3.1": "kafka.admin.ConfigCommand", "4.4.0": "org.apache.kafka.tools.ConfigCommand"}
CONFIG_COMMAND = CONFIG_COMMANDS[KAFKA_TOOLS_VERSION]


def kafka_tools_libs(version: str = KAFKA_TOOLS_VERSION) -> Path:
    return resolve_artifacts(f"kafka-tools-{version}", [
        ("org.apache.kafka", "kafka-tools", version),
        ("org.apache.kafka", "kafka_2.13", version),
        ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3"),
        ("org.apache.logging.log4j", "log4j-core", "2.24.3"),
    ])


@dataclass(frozen=True)
class ToolResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_java_tool(main_class: str, args: list[str], *, timeout: float = 120,
                  version: str = KAFKA_TOOLS_VERSION) -> ToolResult:
    java = require_tool("java", "install a JDK 17+ (for example `apt-get install openjdk-17-jre-headless`)")
    libs = kafka_tools_libs(version)
    env = {**os.environ, "KAFKA_HEAP_OPTS": "-Xmx256m"}
    cmd = [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Dlog4j2.level=WARN", "-cp", f"{libs}/*", main_class, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return ToolResult(proc.returncode, proc.stdout, proc.stderr)


def run_share_groups(bootstrap: str, *args: str, timeout: float = 120,
                     version: str = KAFKA_TOOLS_VERSION) -> ToolResult:
    """``kafka-share-groups.sh --bootstrap-server <bootstrap> <args>`` of Kafka ``version``."""
    return run_java_tool(SHARE_GROUP_COMMAND, ["--bootstrap-server", bootstrap, *args], timeout=timeout,
                         version=version)


def run_configs(bootstrap: str, *args: str, timeout: float = 120, version: str = KAFKA_TOOLS_VERSION) -> ToolResult:
    """``kafka-configs.sh --bootstrap-server <bootstrap> <args>`` of Kafka ``version``."""
    return run_java_tool(CONFIG_COMMANDS[version], ["--bootstrap-server", bootstrap, *args], timeout=timeout,
                         version=version)


class SidecarThread:
    """A :class:`~kshare_sidecar.app.Sidecar` on a private event loop in a daemon thread."""

    def __init__(self, overrides: dict[str, Any]) -> None:
        self.overrides = overrides if overrides.get("listeners") else {"listen": "127.0.0.1:0", **overrides}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kshare-sidecar", daemon=True)
        self.sidecar: Sidecar | None = None

    @property
    def bootstrap(self) -> str:
        if self.sidecar is None:
            raise RuntimeError("SidecarThread.start() first")
        return f"127.0.0.1:{self.sidecar.port}"

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> SidecarThread:
        from ..config import load_config
        from ..app import Sidecar

        self.thread.start()
        self.sidecar = Sidecar(load_config(env={}, overrides=self.overrides))
        self.run(self.sidecar.start())
        return self

    def stop(self) -> None:
        try:
            if self.sidecar is not None:
                self.run(self.sidecar.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
