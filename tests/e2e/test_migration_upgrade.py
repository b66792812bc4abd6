"""docs/migration.md's upgrade procedure, run as written: Kafka 3.9 upgraded in place to 4.4 while
kshare serves a share group with consumers running, then the group moved to native share groups,
then moved back (opt-in: ``make test-migration``).

The commands are read from the document — every ``sh`` block of its "Upgrading the backend" steps and
of "Rolling back / A group" — and run in order with ``$BACKEND``, ``$SIDECAR`` and ``$GROUP``
filled in; the steps without a command (stop the consumers, start them again) are done here where
the document says. ``kafka-features.sh`` is Kafka 4.4's FeatureCommand, ``bin/kafka-server-stop.sh``
+ ``kafka-server-start.sh`` the harness's in-place restart on 4.4 (testing/upgrade.py), ``kshare
sidecar run`` a restart of the sidecar process on the same config file.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kshare_sidecar.testing.kafka import KafkaBroker, free_port
from kshare_sidecar.testing.maven import kafka_libs, require_tool
from kshare_sidecar.testing.probe import broker_ready
from kshare_sidecar.testing.upgrade import restart_on_version
from tests.e2e.migration_support import (
    Phase,
    Worker,
    delivered_again,
    drain_phase,
    kshare_state,
    produce_small_batches,
    refusal_lines,
    window_phase,
)
from tests.support import create_topic

pytestmark = [pytest.mark.optin("migration"), pytest.mark.kafka]

DOC = Path(__file__).parents[2] / "docs" / "migration.md"
N = 3000


def doc_steps(section: str) -> list[tuple[str, list[str]]]:
    """(step title, its commands) for every ``###`` step of the ``##`` section named ``section``."""
    text = DOC.read_text()
    start = text.index(f"\n## {section}")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end > 0 else len(text)]
    steps = []
    for chunk in re.split(r"\n### ", body)[1:]:
        title = chunk.splitlines()[0].strip()
        commands = [line.strip() for block in re.findall(r"```sh\n(.*?)```", chunk, re.DOTALL)
                    for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]
        steps.append((title, commands))
    return steps


class Sidecar:
    """``kshare sidecar run --config kshare.toml`` in ``cwd``, as the document starts it."""

    def __init__(self, cwd: Path, port: int) -> None:
        self.cwd, self.port, self.proc = cwd, port, None
        self.log = open(cwd / "sidecar.log", "ab")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "kshare_sidecar.cli", "sidecar", "run", "--config",
                                      "kshare.toml"], cwd=self.cwd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while not broker_ready("127.0.0.1", self.port, timeout=1):
            assert self.proc.poll() is None, (self.cwd / "sidecar.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the sidecar did not start"
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)


class Procedure:
    """Runs the document's commands against the harness's broker and sidecar."""

    def __init__(self, broker: KafkaBroker, sidecar: Sidecar, group: str, cwd: Path) -> None:
        self.broker, self.sidecar, self.group, self.cwd = broker, sidecar, group, cwd
        self.outputs: list[tuple[str, subprocess.CompletedProcess[str]]] = []

    def run(self, line: str) -> subprocess.CompletedProcess[str]:
        filled = line.replace("$BACKEND", self.broker.bootstrap).replace("$SIDECAR", self.sidecar.bootstrap) \
            .replace("$GROUP", self.group)
        argv = shlex.split(filled)
        done = subprocess.CompletedProcess(argv, 0, "", "")
        if argv[0] == "kafka-features.sh":
            java = require_tool("java", "install a Java 17+ runtime")
            done = subprocess.run([java, "-Xmx256m", "-cp", f"{kafka_libs('4.4.0')}/*",
                                   "org.apache.kafka.tools.FeatureCommand", *argv[1:]],
                                  capture_output=True, text=True, timeout=180, check=False)
        elif argv[0] == "bin/kafka-server-stop.sh":
            pass  # restart_on_version stops it cleanly first
        elif argv[0] == "bin/kafka-server-start.sh":
            restart_on_version(self.broker, "4.4")
        elif argv[:3] == ["kshare", "sidecar", "run"]:
            self.sidecar.stop()
            self.sidecar.start()
        elif argv[0] == "kshare":
            done = subprocess.run([sys.executable, "-m", "kshare_sidecar.cli", *argv[1:]], capture_output=True,
                                  text=True, timeout=900, cwd=self.cwd, check=False)
        else:
            raise AssertionError(f"docs/migration.md runs a command this test cannot: {line}")
        self.outputs.append((filled, done))
        print(f"\n$ {filled}\n{done.stdout}{done.stderr}", end="")
        return done


def _redelivered(done: subprocess.CompletedProcess[str]) -> int:
    found = re.search(r"records delivered again after the move: (\d+)", done.stdout)
    assert found, done.stdout + done.stderr
    return int(found.group(1))


def test_upgrade_procedure_of_docs_migration_md(tmp_path, record_property):
    steps = doc_steps("Upgrading the backend from 3.x to 4.4 while kshare serves it")
    rollback = dict(doc_steps("Rolling back"))["A group"]
    assert [title.split(".")[0] for title, _ in steps] == [str(i) for i in range(1, len(steps) + 1)]
    group, topic = "invoices", "invoices"
    with KafkaBroker("3.9", heap="768m") as broker:
        port = free_port()
        (tmp_path / "kshare.toml").write_text(
            f'"bootstrap.servers" = "{broker.bootstrap}"\nlisten = "127.0.0.1:{port}"\n'
            f'"state.topic.replication.factor" = 1\n"state.topic.partitions" = 4\n'
            f'"share.auto.offset.reset" = "earliest"\n')
        sidecar = Sidecar(tmp_path, port)
        sidecar.start()
        proc = Procedure(broker, sidecar, group, tmp_path)
        refused: dict[str, str] = {}
        workers: list[Worker] = []
        phases: list[Phase] = []
        moved_again = 0
        try:
            create_topic(broker.bootstrap, topic, 2)
            produce_small_batches(broker.bootstrap, topic, N, partitions=2)
            # two consumers, slow enough to be mid-way through the log for the whole upgrade
            workers = [Worker(sidecar.bootstrap, group, topic, tmp_path / f"before-{i}.jsonl", mode="work",
                              work_ms=ms, idle_s=180, reject_every=97) for i, ms in enumerate((25, 40))]
            for w in workers:
                w.wait_for("ack")
            no_share = kshare_state("migrate-to-native", group, "--config", str(tmp_path / "kshare.toml"),
                                    "--sidecar", sidecar.bootstrap)
            refused["backend without share groups (3.9)"] = refusal_lines(no_share)[0]
            for title, commands in steps:
                if title.startswith("6."):  # "Stop the group's consumers"
                    for w in workers:
                        w.stop()
                    phases.append(Phase("before"))
                    for w in workers:
                        phases[-1].add(w)
                    assert phases[-1].acked, "the consumers acknowledged nothing before the move"
                for line in commands:
                    done = proc.run(line)
                    if title.startswith("5."):  # planned while the consumers run: refused for them, for now
                        assert done.returncode == 1 and "consumer(s) connected" in done.stderr, done.stderr
                        refused["consumers connected"] = refusal_lines(done)[0]
                    else:
                        assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
                if title.startswith("2."):  # 4.4 runs, share groups not finalized yet
                    unfinalized = kshare_state("migrate-to-native", group, "--config", str(tmp_path / "kshare.toml"))
                    refused["share.version not finalized"] = refusal_lines(unfinalized)[0]
                    assert "share.version" in refused["share.version not finalized"]
                if title.startswith("7."):
                    predicted = _redelivered(done)
                if title.startswith("8."):  # "Start the consumers again": unchanged, through the sidecar
                    phases.append(window_phase("native", sidecar.bootstrap, group, topic, tmp_path, accept=400))
            # ... and back, as "Rolling back / A group" says, with records in flight on the native side
            dry = kshare_state("migrate-from-native", group, "--config", str(tmp_path / "kshare.toml"),
                               "--sidecar", sidecar.bootstrap, "--json")
            for line in rollback:
                done = proc.run(line)
                assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
                moved_again = _redelivered(done)
            assert moved_again == json.loads(dry.stdout)[0]["redelivered"]
            phases.append(drain_phase("kshare-again", sidecar.bootstrap, group, topic, tmp_path))
        finally:
            for w in workers:
                w.stop()
            sidecar.stop()
        acked = set().union(*(p.acked for p in phases))
        missing = {(p, o) for p in (0, 1) for o in range(N // 2)} - acked
        assert not missing, f"never acknowledged: {sorted(missing)[:20]}"
        counted = delivered_again(phases)
        record_property("migration_upgrade", {"predicted": [predicted, moved_again], "delivered_again": counted,
                                              "refusals": refused})
        print(f"\npredicted {predicted} + {moved_again}, delivered again {counted}")
        for why, line in refused.items():
            print(f"refusal ({why}): {line}")
        assert counted == predicted + moved_again
