"""Resolve Apache Kafka server jars from Maven Central into a per-version cache.

The broker runs from the released artifacts (`org.apache.kafka:kafka_2.13`) plus a logging
backend, copied once into ``<cache>/kafka-<version>/libs`` by Maven's dependency plugin. A
marker file records a complete resolution, and a file lock keeps concurrent test processes
from resolving the same version twice.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

from .errors import HarnessError

#: Logging backends per major line: 2.x and 3.x log through slf4j 1.7 + reload4j, 4.x through log4j2.
_LOGGING = {
    "2": [("org.slf4j", "slf4j-reload4j", "1.7.36")],
    "3": [("org.slf4j", "slf4j-reload4j", "1.7.36")],
    "4": [
        ("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3"),
        ("org.apache.logging.log4j", "log4j-core", "2.24.3"),
    ],
}

_DEP = """    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"""

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.kshare.harness</groupId>
  <artifactId>{artifact}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def cache_root() -> Path:
    """``$KSHARE_CACHE_DIR`` or ``$XDG_CACHE_HOME/kshare`` or ``~/.cache/kshare``."""
    if env := os.environ.get("KSHARE_CACHE_DIR"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kshare"


def require_tool(name: str, fix: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise HarnessError(f"{name} was not found on PATH: {fix}")
    return path


def resolve_artifacts(
    name: str, artifacts: list[tuple[str, str, str]], *, timeout_s: float = 900
) -> Path:
    """Copy ``artifacts`` and their runtime dependencies into ``<cache>/<name>/libs``; return it."""
    home = cache_root() / name
    libs = home / "libs"
    marker = home / ".complete"
    if marker.exists():
        return libs
    mvn = require_tool("mvn", "install Apache Maven (for example `apt-get install maven`)")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():  # another process finished while we waited
            return libs
        deps = "\n".join(_DEP.format(g=g, a=a, v=v) for g, a, v in artifacts)
        (home / "pom.xml").write_text(_POM.format(artifact=name, deps=deps))
        shutil.rmtree(libs, ignore_errors=True)
        cmd = [
            mvn, "-B", "-q", "-f", str(home / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}", "-DincludeScope=runtime",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise HarnessError(
                f"Maven did not resolve {name} within {timeout_s:.0f} s: check network access to "
                "Maven Central, then retry"
            ) from exc
        if proc.returncode != 0:
            raise HarnessError(
                f"Maven could not resolve {name} (exit {proc.returncode}): {_first_error(proc.stdout + proc.stderr)}"
                " -- check network access to Maven Central and ~/.m2/settings.xml"
            )
        marker.write_text("ok\n")
    return libs


def kafka_libs(version: str) -> Path:
    """The classpath directory for Apache Kafka ``version`` (resolved on first use)."""
    artifacts = [("org.apache.kafka", "kafka_2.13", version)] + _LOGGING[version.split(".")[0]]
    if version >= "4.4":  # 4.4 moved the admin commands (ConfigCommand and the rest) to kafka-tools
        artifacts.append(("org.apache.kafka", "kafka-tools", version))
    return resolve_artifacts(f"kafka-{version}", artifacts)


def _first_error(output: str) -> str:
    """Maven's first ``[ERROR]`` line carries the cause; the rest is boilerplate."""
    for line in output.splitlines():
        if "[ERROR]" in line and line.split("[ERROR]", 1)[1].strip():
            return line.split("[ERROR]", 1)[1].strip()
    return output.strip().splitlines()[-1] if output.strip() else "no output"
