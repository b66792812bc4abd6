"""Java's KafkaShareConsumer (kafka-clients 4.x from Maven Central, compiled here) consumes
through kshare on Kafka 3.9, and the same program against native Kafka 4.x."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kshare_sidecar.testing.kafka import KAFKA_VERSIONS
from kshare_sidecar.testing.maven import resolve_artifacts
from tests.support import create_topic, produce, unique

pytestmark = pytest.mark.kafka
SOURCE = Path(__file__).with_name("java") / "ShareConsume.java"


def compile_java(tmp_path_factory, source: Path) -> list[str]:
    """One of tests/e2e/java/*.java compiled against kafka-clients 4.x: the command that runs it."""
    version = KAFKA_VERSIONS["4"]
    libs = resolve_artifacts(f"kafka-clients-{version}", [("org.apache.kafka", "kafka-clients", version),
                                                           ("org.slf4j", "slf4j-nop", "1.7.36")])
    javac = shutil.which("javac")
    assert javac, "javac (JDK 17+) is required for the Java client test"
    out = tmp_path_factory.mktemp("java")
    subprocess.run([javac, "-d", str(out), "-cp", f"{libs}/*", str(source)], check=True, capture_output=True)
    return ["java", "-cp", f"{out}:{libs}/*", source.stem]


@pytest.fixture(scope="session")
def java_consumer(tmp_path_factory) -> list[str]:
    return compile_java(tmp_path_factory, SOURCE)


def test_java_share_consumer(target, java_consumer):
    topic, group = unique("java"), unique("g")
    create_topic(target.backend, topic, 2)
    target.prepare_group(group)
    produce(target.backend, topic, 60, partitions=2)
    result = subprocess.run(java_consumer + [target.bootstrap, group, topic, "60", "60000"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == "DONE 60", result.stdout[-2000:] + result.stderr[-2000:]
    records = {tuple(map(int, line.split())) for line in lines[:-1]}
    assert {(p, o) for p, o, _ in records} == {(p, o) for p in (0, 1) for o in range(30)}
    assert {dc for _, _, dc in records} == {1}
