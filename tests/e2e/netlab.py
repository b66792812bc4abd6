"""A lab of Linux network namespaces: deployment topologies run for real without Docker or Kubernetes.

Each "host" is a network namespace with one veth on a private LAN (a bridge in a namespace of its
own: nothing is added to the machine's own namespace) and its own ``/etc/hosts`` — ``ip netns exec``
bind-mounts ``/etc/netns/<ns>/hosts`` over it — so a process there resolves the other hosts by the
names a compose file or a Kubernetes StatefulSet gives them. Processes started in a host are its
only processes; killing one is a crashed container.

Used by tests/e2e/test_topology.py (``make test-topology``) and the nemesis
(tests/e2e/nemesis_lab.py, ``make test-nemesis``): needs root (CAP_NET_ADMIN and ``/etc/netns``)
and iproute2 (iptables for faults). Every namespace, veth and ``/etc/netns`` entry carries the
lab's unique tag (its ``name`` first, so labs of different suites never collide) and is removed
by :meth:`Lab.close`, also after a failure (and at interpreter exit). Faults are iptables rules
in a host's own namespace, in one chain of its own (:meth:`Lab.block`), gone with the namespace.

Also here: reading a compose file's services and a Kubernetes manifest's container the way Docker
Compose and the kubelet do (merge keys, ``${VAR:-default}``, ``$(VAR)``), and an Apache Kafka from
the harness's jars configured from a compose service's ``KAFKA_*`` environment.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kshare_sidecar.testing.kafka import KafkaBroker
from kshare_sidecar.testing.process import die_with_parent

NETNS_ETC = Path("/etc/netns")
SUBNET = "10.77.0"  # inside the lab's own LAN namespace: it clashes with nothing outside it


def available() -> str | None:
    """Why the lab cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, /etc/netns)"
    if shutil.which("ip") is None:
        return "needs iproute2's ip"
    return None


@dataclass
class Host:
    name: str
    ns: str
    ip: str
    aliases: list[str] = field(default_factory=list)
    hostname: str = ""  # the UTS hostname its processes see (default: name)


class Lab:
    """Network namespaces on one LAN; :meth:`close` removes everything it made."""

    def __init__(self, logs: Path, name: str = "ks") -> None:
        self.name = name
        self.tag = f"{name}{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.lan = f"{self.tag}-lan"
        self.logs = logs
        self.hosts: dict[str, Host] = {}
        #: the hosts' LAN interface; a lab named otherwise names its links after itself
        self.link = "eth0" if name == "ks" else f"{name}0"
        self.chain = f"{name}-f"  # each host's fault rules (block)
        self._namespaces: list[str] = []
        self._procs: list[subprocess.Popen] = []
        self._closed = False
        self._overrides: dict[str, dict[str, str]] = {}
        self._firewalled: set[str] = set()

    # -- set-up ------------------------------------------------------------------------------
    def __enter__(self) -> Lab:
        atexit.register(self.close)
        self._ns_add(self.lan)
        _ip("-n", self.lan, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.lan, "link", "set", "br0", "up")
        _ip("-n", self.lan, "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_host(self, name: str, *aliases: str, hostname: str | None = None) -> Host:
        """A host on the LAN, reachable by ``name`` and ``aliases`` from every host; its processes
        see ``hostname`` (default ``name``) as the machine's name."""
        index = len(self.hosts) + 2
        host = Host(name, f"{self.tag}-h{index}", f"{SUBNET}.{index}", list(aliases), hostname or name)
        self._ns_add(host.ns)
        port = f"p{index}" if self.name == "ks" else f"{self.name}p{index}"
        _ip("-n", self.lan, "link", "add", port, "type", "veth", "peer", "name", self.link, "netns", host.ns)
        _ip("-n", self.lan, "link", "set", port, "master", "br0", "up")
        _ip("-n", host.ns, "addr", "add", f"{host.ip}/24", "dev", self.link)
        _ip("-n", host.ns, "link", "set", self.link, "up")
        _ip("-n", host.ns, "link", "set", "lo", "up")
        self.hosts[name] = host
        self.write_hosts()
        return host

    def write_hosts(self, extra: dict[str, list[str]] | None = None) -> None:
        """Every host's /etc/hosts: localhost, every host by name and aliases, and ``extra``
        (a name -> the hosts it resolves to, e.g. a headless service); a host with
        :meth:`resolve_as` overrides sees those names at the addresses it was given."""
        lines = ["127.0.0.1\tlocalhost"]
        for h in self.hosts.values():
            lines.append("\t".join([h.ip, h.name, *h.aliases]))
        for name, targets in (extra or self._extra).items():
            lines += [f"{self.hosts[t].ip}\t{name}" for t in targets]
        self._extra = dict(extra or self._extra)
        for h in self.hosts.values():
            d = NETNS_ETC / h.ns
            d.mkdir(parents=True, exist_ok=True)
            own = self._overrides.get(h.name, {})
            mine = [line for line in lines if not own or not set(line.split("\t")[1:]) & set(own)]
            mine += [f"{ip}\t{name}" for name, ip in own.items()]
            (d / "hosts").write_text("\n".join(mine) + "\n")

    def resolve_as(self, host: str, names: dict[str, str]) -> None:
        """On ``host`` only, ``names`` resolve to the given addresses (e.g. the brokers to a
        delaying proxy's addresses: its connections to them then go through the proxy)."""
        self._overrides.setdefault(host, {}).update(names)
        self.write_hosts()

    def add_address(self, host: str, ip: str) -> None:
        """One more address on ``host``'s LAN link (a proxy standing in for several hosts)."""
        _ip("-n", self.hosts[host].ns, "addr", "add", f"{ip}/24", "dev", self.link)

    # -- faults -------------------------------------------------------------------------------
    def block(self, host: str, peers: list[str]) -> None:
        """Drop every packet between ``host`` and the addresses ``peers`` (both directions, in
        ``host``'s own namespace: a silent partition, as a cut cable or a firewall makes)."""
        ns = self.hosts[host].ns
        if host not in self._firewalled:
            _iptables(ns, "-N", self.chain)
            _iptables(ns, "-I", "INPUT", "-j", self.chain)
            _iptables(ns, "-I", "OUTPUT", "-j", self.chain)
            self._firewalled.add(host)
        for ip in peers:
            _iptables(ns, "-A", self.chain, "-s", ip, "-j", "DROP")
            _iptables(ns, "-A", self.chain, "-d", ip, "-j", "DROP")

    def unblock(self, host: str) -> None:
        """Remove every rule :meth:`block` put on ``host``."""
        if host in self._firewalled:
            _iptables(self.hosts[host].ns, "-F", self.chain)

    def rules(self, host: str) -> str:
        """``host``'s fault rules as iptables lists them (a check of :meth:`unblock`)."""
        if host not in self._firewalled:
            return ""
        listed = subprocess.run(["ip", "netns", "exec", self.hosts[host].ns, "iptables", "-S", self.chain],
                                capture_output=True, text=True).stdout
        return "\n".join(line for line in listed.splitlines() if not line.startswith("-N"))

    _extra: dict[str, list[str]] = {}

    # -- processes ----------------------------------------------------------------------------
    def enter(self, host: str) -> list[str]:
        """The prefix that runs a command on ``host``: its network namespace, and a UTS namespace
        whose hostname is the host's name (as a container's; Kafka resolves its own hostname when
        it listens on 0.0.0.0). The command keeps the process id (every step execs)."""
        return ["ip", "netns", "exec", self.hosts[host].ns, "unshare", "--uts", "--", sys.executable, "-c",
                "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execvp(sys.argv[2], sys.argv[2:])",
                self.hosts[host].hostname]

    def popen(self, host: str, argv: list[str], *, env: dict[str, str], log: str,
              cwd: str | Path | None = None) -> subprocess.Popen:
        """Start ``argv`` on ``host`` with exactly ``env`` (a container's environment), output to
        logs/<log>; its own process group, killed when this test process dies."""
        out = open(self.logs / log, "ab")
        with out:
            proc = subprocess.Popen([*self.enter(host), *argv], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
                                    start_new_session=True, preexec_fn=die_with_parent)
        self._procs.append(proc)
        return proc

    def run(self, host: str, argv: list[str], *, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` to completion (stdout and stderr captured)."""
        return subprocess.run([*self.enter(host), *argv], env=env or client_env(),
                              capture_output=True, text=True, timeout=timeout)

    def python(self, host: str, code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return self.run(host, [sys.executable, "-c", code, *args], timeout=timeout)

    def close(self) -> None:
        """Kill what the lab started (by process group), delete its namespaces and hosts files."""
        if self._closed:
            return
        self._closed = True
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                proc.wait(10)
        for ns in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        atexit.unregister(self.close)

    def leftovers(self) -> list[str]:
        """Namespaces or hosts files of this lab still present (a check of :meth:`close`)."""
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        found = [line.split()[0] for line in names.splitlines() if line.startswith(self.tag)]
        return found + [str(p) for p in NETNS_ETC.glob(f"{self.tag}*")] if NETNS_ETC.exists() else found

    def _ns_add(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._namespaces.append(ns)


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


def _iptables(ns: str, *args: str) -> None:
    proc = subprocess.run(["ip", "netns", "exec", ns, "iptables", "-w", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"iptables {' '.join(args)} in {ns}: {proc.stderr.strip()}")


def client_env(**extra: str) -> dict[str, str]:
    """A plain environment for the lab's client processes (this interpreter's packages)."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV")}
    repo = str(Path(__file__).resolve().parents[2])
    keep["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, keep.get("PYTHONPATH")]))
    return keep | extra


# -- compose and Kubernetes files, read as their tools do ----------------------------------------
_COMPOSE_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


def compose_interpolate(value: str, env: dict[str, str]) -> str:
    """``${VAR}``, ``${VAR:-default}``, ``${VAR-default}`` from ``env`` (Docker Compose's rules,
    without the error forms)."""
    return _COMPOSE_VAR.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)


def compose_env(service: dict, env: dict[str, str]) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    return {k: compose_interpolate("" if v is None else str(v), env) for k, v in raw.items()}


_K8S_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def k8s_container_env(container: dict, fields: dict[str, str], config_maps: dict[str, dict[str, str]]) -> dict[str, str]:
    """A container's environment as the kubelet builds it: ``envFrom`` config maps, then ``env``
    in order, ``valueFrom.fieldRef`` from ``fields`` (``metadata.name``: the pod's name...), ``$(VAR)``
    expanded from variables defined before it (``$$`` is a literal ``$``; an unknown ``$(VAR)``
    stays as it is)."""
    out: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        name = (source.get("configMapRef") or {}).get("name")
        out |= config_maps.get(name, {})
    for item in container.get("env") or []:
        if "value" in item:
            def expand(m: re.Match, known: dict = dict(out)) -> str:
                if m.group(0) == "$$":
                    return "$"
                return known.get(m.group(1), m.group(0))
            out[item["name"]] = _K8S_VAR.sub(expand, str(item["value"]))
        elif (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") in fields:
            out[item["name"]] = fields[item["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            raise ValueError(f"env {item['name']}: only value and fieldRef {sorted(fields)} are modelled")
    return out


def kafka_properties(env: dict[str, str]) -> dict[str, str]:
    """The apache/kafka image's mapping of ``KAFKA_*`` variables to server properties: prefix
    dropped, lower case, ``___`` -> ``-``, ``__`` -> ``_``, ``_`` -> ``.``."""
    props = {}
    for key, value in env.items():
        if key.startswith("KAFKA_"):
            name = key[len("KAFKA_"):].lower().replace("___", "-").replace("__", "\0").replace("_", ".")
            props[name.replace("\0", "_")] = value
    return props


class LabKafka(KafkaBroker):
    """Apache Kafka from the harness's jars on a lab host, configured by a compose service's environment."""

    def __init__(self, lab: Lab, host: str, env: dict[str, str], probe_from: str, bootstrap: str) -> None:
        super().__init__("3.9")
        self.lab, self.host, self.probe_from, self.lab_bootstrap = lab, host, probe_from, bootstrap
        self.props = kafka_properties(env)
        self.cluster_id = env["CLUSTER_ID"]
        # the ports are the compose file's (the harness would pick free loopback ports)
        self.port = int(bootstrap.rsplit(":", 1)[1])
        self.controller_port = 1

    def _properties(self) -> dict[str, str]:
        assert self.workdir is not None
        return {"log.dirs": str(self.workdir / "data"), **self.props}

    def _spawn(self, java: str, libs: Path) -> None:
        assert self.workdir is not None
        log = open(self.workdir / "broker.log", "ab")
        with log:
            self._proc = subprocess.Popen(
                [*self.lab.enter(self.host), *self._java(java, libs), "kafka.Kafka",
                 str(self.workdir / "server.properties")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                cwd=self.workdir, preexec_fn=die_with_parent)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        host, _, port = self.lab_bootstrap.rpartition(":")
        code = (f"import sys; from kshare_sidecar.testing.probe import broker_ready; "
                f"sys.exit(0 if broker_ready({host!r}, {int(port)}, timeout=2) else 1)")
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"Kafka exited during start-up: {self.log_tail()}")
            if self.lab.python(self.probe_from, code, timeout=30).returncode == 0:
                return
            time.sleep(1)
        raise RuntimeError(f"Kafka did not answer on {self.lab_bootstrap}: {self.log_tail()}")
