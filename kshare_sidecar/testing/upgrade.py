"""An embedded Kafka upgraded in place: the same node, ports, config and data, the newer jars.

What a team does to a KRaft cluster when it upgrades Kafka (Kafka's upgrade notes, "Upgrading
Servers to 4.x from any version 3.3.x through 3.9.x"): stop each broker cleanly, start the new
release on the same ``server.properties`` and log directories, and once the cluster runs the new
code, finalize the new feature levels (``kafka-features.sh upgrade``; :func:`upgrade_features`).
Kept apart from :mod:`.kafka` so that module's broker stays one version for its whole life; this
only swaps the version of a stopped broker and starts it again.

A 3.9 metadata log needs nothing else: 4.x starts on metadata.version 3.3-IV3 or later (3.9 formats
at 3.9-IV0) and lists its newer features unfinalized, so share groups stay off until
``share.version`` is finalized. ``kraft.version`` is left alone: ``upgrade --release-version``
would also move a static quorum (``controller.quorum.voters``, as here) to a dynamic one
(KAFKA-21426), so the features are named one by one.
"""

from __future__ import annotations

import signal
import subprocess

from .errors import HarnessError
from .kafka import _LOG4J2, KafkaBroker, resolve_version
from .maven import kafka_libs, require_tool

#: What :func:`upgrade_features` finalizes on 4.4: the release's metadata version (level 33,
#: 4.4-IV2) and share groups with their dead-letter queues, as ``kafka-features.sh version-mapping
#: --release-version 4.4`` lists them (kraft.version is left out on purpose, see above; the
#: deprecated ``--metadata 4.4`` flag does the first alone).
FEATURES_44 = {"metadata.version": "33", "share.version": "2"}


def restart_on_version(broker: KafkaBroker, version: str, *, sig: signal.Signals = signal.SIGTERM) -> None:
    """Stop ``broker`` (a clean SIGTERM shutdown by default, as a rolling upgrade does) and start
    ``version``'s jars on its work directory: the same node id, ports and log directories. The
    properties file is written again for the new version (for 4.x the share-coordinator settings a
    one-broker cluster needs); nothing is formatted."""
    target = resolve_version(version)
    major = int(target.split(".")[0])
    if (major, target) < (broker.major, broker.version):
        raise HarnessError(f"restart_on_version upgrades only: {broker.version} -> {target}")
    broker.kill(sig)
    assert broker.workdir is not None
    broker.version, broker.major = target, major
    (broker.workdir / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in broker._properties().items()))
    if major >= 4:
        (broker.workdir / "log4j2.properties").write_text(_LOG4J2)
    broker._spawn(require_tool("java", "install a Java 17+ runtime"), kafka_libs(target))
    broker._wait_ready()


def kafka_features(broker: KafkaBroker, *args: str, release: str = "4.4",
                   timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``kafka-features.sh --bootstrap-server <broker> <args>`` of ``release`` (the tool of the
    release being installed, as an upgrade uses it; 4.x ships it in its jars as
    ``org.apache.kafka.tools.FeatureCommand``)."""
    java = require_tool("java", "install a Java 17+ runtime")
    libs = kafka_libs(resolve_version(release))
    return subprocess.run([java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{libs}/*",
                           "org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", broker.bootstrap, *args],
                          capture_output=True, text=True, timeout=timeout, check=False)


def upgrade_features(broker: KafkaBroker, features: dict[str, str] | None = None) -> str:
    """Finalize ``features`` (default :data:`FEATURES_44`) with ``kafka-features.sh upgrade``;
    returns the tool's output, raises :class:`HarnessError` naming it when the upgrade fails."""
    args = ["upgrade"]
    for name, level in (features or FEATURES_44).items():
        args += ["--feature", f"{name}={level}"]
    done = kafka_features(broker, *args)
    if done.returncode != 0:
        raise HarnessError(f"kafka-features.sh {' '.join(args)} failed: {(done.stdout + done.stderr).strip()}")
    return done.stdout


__all__ = ["FEATURES_44", "kafka_features", "restart_on_version", "upgrade_features"]
