"""``KShareContainer``: a kshare sidecar in Docker, in front of a Kafka or Redpanda testcontainer.

For users' own pytest suites that already use ``testcontainers`` (the embedded harness fixtures —
``kafka_39``, ``kafka_4`` — need Java and Maven instead). The sidecar runs from the image built
by the repo's Dockerfile (``docker build -t kshare-sidecar:dev .``; override with ``image=`` or
``KSHARE_IMAGE``). Two ways to network them:

- **host networking** (docs/testing.md's example; what runs on this project's machines)::

      with ApacheKafkaContainer("apache/kafka:3.9.2") as kafka, KShareContainer(kafka) as kshare:
          bootstrap = kshare.get_bootstrap_server()   # share groups here, everything else passed through

  :class:`ApacheKafkaContainer` runs an ``apache/kafka`` image (or one configured the same way) on
  the host's network with its listeners on 127.0.0.1 and free ports; the sidecar in front of it
  does the same, with the image's own entrypoint and its settings in the environment.

- **a Docker network** (each container its own address, ports mapped to the host)::

      with Network() as net, \\
           KafkaContainer("confluentinc/cp-kafka:7.9.0").with_kraft().with_network(net) \\
               .with_network_aliases("kafka") as kafka, \\
           KShareContainer(kafka) as kshare:
          bootstrap = kshare.get_bootstrap_server()

Why the start script (Docker networks only): clients must be told the *host's* address of the sidecar
(``KSHARE_ADVERTISED_LISTENER``), and Docker picks the mapped port only when the container starts
— the same reason testcontainers' own KafkaContainer and RedpandaContainer write theirs after
start. The container waits for the script, which exports the settings and execs
``kshare sidecar run``. Ready means: the sidecar answers a Kafka Metadata request from the host.

How the sidecar reaches the backend (inside Docker, never through the host's mapped port):

- ``KafkaContainer``: its BROKER listener, port 9092, advertised as the container's own IP —
  ``alias:9092`` on a user-defined network, else the container IP on the default bridge.
- ``RedpandaContainer`` advertises its internal listener as 127.0.0.1, which no other container can
  use: use :class:`NetworkedRedpandaContainer` (same image and API) on a network with an alias.
- a string: a ``host:port`` list the sidecar container can reach as it is.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import tarfile
import time
from collections.abc import Callable, Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

from testcontainers.community.kafka import KafkaContainer, RedpandaContainer
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from .kafka import _cluster_id, free_port
from .probe import broker_ready

DEFAULT_IMAGE = "kshare-sidecar:dev"
#: Confluent Platform 7.9 = Apache Kafka 3.9, the backend line kshare is tested on
DEFAULT_KAFKA_IMAGE = "confluentinc/cp-kafka:7.9.0"
#: Apache Kafka's own image (configured from KAFKA_* variables), for ApacheKafkaContainer
APACHE_KAFKA_IMAGE = "apache/kafka:3.9.2"
START_SCRIPT = "/tmp/kshare-start.sh"


def setting_env(key: str) -> str:
    """``share.auto.offset.reset`` -> ``KSHARE_SHARE_AUTO_OFFSET_RESET`` (env names pass through)."""
    if key.startswith("KSHARE_"):
        return key
    return "KSHARE_" + key.upper().replace(".", "_").replace("-", "_")


class NetworkedRedpandaContainer(RedpandaContainer):
    """Redpanda whose internal listener (29092) is advertised under its network alias, so that
    other containers on the network — the sidecar — can use it."""

    def tc_start(self) -> None:
        alias = _alias(self)
        if alias is None:
            raise ValueError("NetworkedRedpandaContainer needs with_network(...) and with_network_aliases(...)")
        host, port = self.get_container_host_ip(), self.get_exposed_port(self.redpanda_port)
        script = (
            "/usr/bin/rpk redpanda start --mode dev-container --smp 1 --memory 1G "
            "--kafka-addr PLAINTEXT://0.0.0.0:29092,OUTSIDE://0.0.0.0:9092 "
            f"--advertise-kafka-addr PLAINTEXT://{alias}:29092,OUTSIDE://{host}:{port}")
        self.create_file(script.encode(), RedpandaContainer.TC_START_SCRIPT)


def _alias(container: DockerContainer) -> str | None:
    if getattr(container, "_network", None) is None:
        return None
    aliases = getattr(container, "_network_aliases", None) or []
    return aliases[0] if aliases else None


class _Lifecycle(DockerContainer):
    """Readiness from the host, kill and restart in place, logs: shared by the containers here."""

    what = "container"
    startup_timeout: float = 120  # a shared CI runner under load: the sidecar's start-up took 60+ s there

    def wait_ready(self, host: str, port: int, *, probe: Callable[..., bool] = broker_ready,
                   clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        """Until the container answers Metadata from the host; fail early when the container exited."""
        deadline = clock() + self.startup_timeout
        while True:
            if probe(host, port, timeout=1):
                return
            if self._exited():
                raise RuntimeError(f"{self.what} container exited before it was ready:\n{self._logs_tail()}")
            if clock() >= deadline:
                raise TimeoutError(f"{self.what} container at {host}:{port} not ready in {self.startup_timeout} s:\n"
                                   f"{self._logs_tail()}")
            sleep(0.5)

    def kill(self, signal: str = "SIGKILL") -> None:
        """``docker kill``: the process dies at once; the container (and its files) stay for :meth:`restart`."""
        self.get_wrapped_container().kill(signal=signal)
        self.get_wrapped_container().wait(timeout=30)

    def restart(self) -> None:
        """``docker start`` of the same container (same settings, same ports on the host's network,
        same files), then wait until it answers again."""
        self.get_wrapped_container().start()
        self._after_start()

    def _after_start(self) -> None:
        raise NotImplementedError

    def logs(self) -> str:
        """Everything the container wrote (stdout then stderr), across restarts."""
        stdout, stderr = self.get_logs()
        return (stdout or b"").decode(errors="replace") + (stderr or b"").decode(errors="replace")

    def _exited(self) -> bool:
        container = self.get_wrapped_container()
        if container is None:
            return False
        container.reload()
        return container.status in ("exited", "dead")

    def _logs_tail(self, lines: int = 30) -> str:
        try:
            text = self.logs()
        except Exception as exc:  # the logs are a diagnostic only
            return f"(no logs: {exc})"
        return "\n".join(text.splitlines()[-lines:])


def _host_network(container: object) -> bool:
    return getattr(container, "_kwargs", {}).get("network_mode") == "host"


class ApacheKafkaContainer(_Lifecycle):
    """Apache Kafka (KRaft, one combined broker and controller) on the host's network: listeners on
    127.0.0.1 at free ports, configured from ``KAFKA_*`` variables as the ``apache/kafka`` image is
    (``env=`` adds or overrides: ``{"KAFKA_NUM_PARTITIONS": "3"}``). Any image configured that way
    works: ``apache/kafka:<version>`` from Docker Hub, or this project's ``kshare-local/kafka:<version>``
    built from Debian's Java and Maven Central's jars where no registry is reachable."""

    what = "Kafka"

    def __init__(self, image: str = APACHE_KAFKA_IMAGE, *, port: int | None = None,
                 controller_port: int | None = None, env: dict[str, str] | None = None,
                 startup_timeout: float = 120, **kwargs: Any) -> None:
        kwargs.setdefault("network_mode", "host")
        super().__init__(image, **kwargs)
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.startup_timeout = startup_timeout
        self.env.update(self.environment())
        self.env.update(env or {})

    def environment(self) -> dict[str, str]:
        listeners = f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
        return {
            "CLUSTER_ID": _cluster_id(),
            "KAFKA_NODE_ID": "1",
            "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_LISTENERS": listeners,
            "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{self.port}",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@127.0.0.1:{self.controller_port}",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
            "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
            "KAFKA_HEAP_OPTS": "-Xmx512m -Xms256m",
        }

    def start(self) -> ApacheKafkaContainer:
        super().start()
        self._after_start()
        return self

    def _after_start(self) -> None:
        self.wait_ready("127.0.0.1", self.port)

    def get_bootstrap_server(self) -> str:
        return f"127.0.0.1:{self.port}"


class KShareContainer(_Lifecycle):
    """A kshare sidecar container serving share groups for ``backend``; see the module doc.

    On the host's network (``network_mode="host"``, the default when the backend is on it) the
    image's own entrypoint runs with the settings in its environment, listening on 127.0.0.1 at
    ``port`` (a free one unless given). On a Docker network it waits for the start script."""

    what = "kshare"

    def __init__(self, backend: KafkaContainer | RedpandaContainer | ApacheKafkaContainer | str,
                 image: str | None = None, port: int | None = None, settings: dict[str, Any] | None = None,
                 startup_timeout: float = 120, **kwargs: Any) -> None:
        if _host_network(backend):
            kwargs.setdefault("network_mode", "host")
        self.host_network = kwargs.get("network_mode") == "host"
        if not self.host_network:
            kwargs.setdefault("entrypoint", "sh")
        super().__init__(image or os.environ.get("KSHARE_IMAGE", DEFAULT_IMAGE), **kwargs)
        if isinstance(backend, RedpandaContainer) and not isinstance(backend, NetworkedRedpandaContainer):
            raise TypeError("RedpandaContainer advertises 127.0.0.1 to other containers; "
                            "use kshare_sidecar.testing.containers.NetworkedRedpandaContainer")
        self.backend = backend
        self.port = port or (free_port() if self.host_network else 9192)
        self.startup_timeout = startup_timeout
        self.settings: dict[str, str] = {}
        for key, value in (settings or {}).items():
            self.with_setting(key, value)
        if not self.host_network:
            self.with_exposed_ports(self.port)
            network = getattr(backend, "_network", None)
            if network is not None:
                self.with_network(network)
            self.with_command(self.command())

    def with_setting(self, key: str, value: Any) -> KShareContainer:
        """Any sidecar setting, as ``share.record.lock.duration.ms`` or its ``KSHARE_*`` name."""
        self.settings[setting_env(key)] = str(value)
        return self

    # -- what it starts with (pure: unit-tested without Docker) -------------------------------------
    def command(self) -> str:
        """Wait for the start script (written once the mapped port is known), then run it."""
        return f'-c "while [ ! -f {START_SCRIPT} ]; do sleep 0.1; done; . {START_SCRIPT}"'

    def backend_bootstrap(self) -> str:
        """The backend's address as the sidecar container sees it."""
        backend = self.backend
        if isinstance(backend, str):
            return backend
        if isinstance(backend, ApacheKafkaContainer):
            if not self.host_network:
                raise ValueError("ApacheKafkaContainer is on the host's network: so must the sidecar be")
            return backend.get_bootstrap_server()
        alias = _alias(backend)
        if isinstance(backend, NetworkedRedpandaContainer):
            if alias is None:
                raise ValueError("the Redpanda backend needs a network and an alias")
            return f"{alias}:29092"
        if isinstance(backend, KafkaContainer):
            if alias is not None:
                return f"{alias}:9092"
            attrs = backend.get_wrapped_container().attrs  # started, default bridge: its own IP
            return f"{attrs['NetworkSettings']['IPAddress']}:9092"
        raise TypeError(f"unsupported backend {type(backend).__name__}: an ApacheKafkaContainer, KafkaContainer, "
                        "NetworkedRedpandaContainer or 'host:port' string")

    def environment(self, advertised: str) -> dict[str, str]:
        """The sidecar's settings: backend, listener (all interfaces in a container of its own,
        loopback on the host's network), the address clients are told."""
        listen = f"127.0.0.1:{self.port}" if self.host_network else f"0.0.0.0:{self.port}"
        return {"KSHARE_BOOTSTRAP_SERVERS": self.backend_bootstrap(), "KSHARE_LISTEN": listen,
                "KSHARE_ADVERTISED_LISTENER": advertised, **self.settings}

    def start_script(self, advertised: str) -> bytes:
        lines = [f"export {k}={shlex.quote(v)}" for k, v in self.environment(advertised).items()]
        return ("\n".join([*lines, "exec kshare sidecar run"]) + "\n").encode()

    # -- Docker ----------------------------------------------------------------------------------
    def start(self) -> KShareContainer:
        if self.host_network:
            self.env.update(self.environment(f"127.0.0.1:{self.port}"))
            super().start()
            self._after_start()
            return self
        super().start()
        host, port = self.get_container_host_ip(), int(self.get_exposed_port(self.port))
        self._put_file(self.start_script(f"{host}:{port}"), START_SCRIPT)
        self.wait_ready(host, port)
        return self

    def _after_start(self) -> None:
        if not self.host_network:
            raise NotImplementedError("restart() needs the host's network: a restarted container may be "
                                      "given another host port than the one its clients were told")
        self.wait_ready("127.0.0.1", self.port)

    def get_bootstrap_server(self) -> str:
        """``host:port`` for clients on the host: share groups and every other API."""
        if self.host_network:
            return f"127.0.0.1:{self.port}"
        return f"{self.get_container_host_ip()}:{self.get_exposed_port(self.port)}"

    def _put_file(self, content: bytes, path: str) -> None:
        directory, name = os.path.split(path)
        with BytesIO() as archive:
            with tarfile.TarFile(fileobj=archive, mode="w") as tar:
                info = tarfile.TarInfo(name=name)
                info.size, info.mtime, info.mode = len(content), int(time.time()), 0o644
                tar.addfile(info, BytesIO(content))
            archive.seek(0)
            self.get_wrapped_container().put_archive(directory, archive)


@contextlib.contextmanager
def logs_on_failure(request: Any, *containers: _Lifecycle, directory: Path | str | None = None) -> Iterator[None]:
    """Around a pytest fixture's ``yield``: when a test failed meanwhile, write each container's
    logs to ``directory`` (default: pytest's temporary directory for the test) as
    ``<n>-<image name>.log`` and name the files in the terminal and in the test's ``user_properties``."""
    failed_before = request.session.testsfailed
    try:
        yield
    finally:
        if request.session.testsfailed > failed_before:
            where = Path(directory) if directory is not None else request.getfixturevalue("tmp_path")
            where.mkdir(parents=True, exist_ok=True)
            written = []
            for n, container in enumerate(containers):
                name = container.image.rsplit("/", 1)[-1].replace(":", "-")
                path = where / f"{n}-{name}.log"
                try:
                    path.write_text(container.logs())
                except Exception as exc:  # a container that never started has no logs
                    path.write_text(f"(no logs: {exc})\n")
                written.append(str(path))
            request.node.user_properties.append(("container_logs", written))
            reporter = request.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"\n{request.node.nodeid}: container logs in {', '.join(written)}")


@contextlib.contextmanager
def kafka_with_kshare(kafka_image: str = DEFAULT_KAFKA_IMAGE, image: str | None = None,
                      settings: dict[str, Any] | None = None) -> Iterator[KShareContainer]:
    """A network, a KRaft Kafka container (alias ``kafka``) and a sidecar in front of it; yields
    the started :class:`KShareContainer`. What the ``kshare_container`` pytest fixture uses."""
    with Network() as network:
        kafka = KafkaContainer(kafka_image).with_kraft().with_network(network).with_network_aliases("kafka")
        with kafka, KShareContainer(kafka, image=image, settings=settings) as kshare:
            yield kshare
