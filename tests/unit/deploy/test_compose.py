"""compose/*.yml: parse, run real kshare commands, set real settings, and hang together."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kshare_sidecar.config import BY_KEY, CLEARED_BY_EMPTY_ENV, ConfigError, env_name, load_config

from .cli_model import check_argv
from .conftest import COMPOSE_DIR, DOCKERFILE, REPO, env_pairs, final_stage, interpolate, load_yaml

SETTING_BY_ENV = {env_name(k): s for k, s in BY_KEY.items()}
BASE_FILES = ("kafka39.yml", "redpanda.yml")  # complete projects: backend + sidecar
OVERLAYS = ("metrics.yml",)  # used with -f BASE -f OVERLAY


def compose_files() -> list[Path]:
    return sorted(p for p in COMPOSE_DIR.glob("*.yml") if p.name != "prometheus.yml")


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: interpolate("" if v is None else v) for k, v in env.items()}


def _argv(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        import shlex

        return shlex.split(value)
    return [str(v) for v in value]


def _image_defaults(dockerfile) -> tuple[list[str], list[str], dict[str, str]]:
    stage = final_stage(dockerfile)
    entry = [i for i in stage if i.keyword == "ENTRYPOINT"][-1].exec_form()
    cmd = [i for i in stage if i.keyword == "CMD"][-1].exec_form()
    env: dict[str, str] = {}
    for inst in stage:
        if inst.keyword == "ENV":
            env |= env_pairs(inst)
    return entry, cmd, env


def _builds_kshare(path: Path, service: dict) -> bool:
    build = service.get("build")
    if build is None:
        return interpolate(str(service.get("image", ""))).startswith("kshare")
    context = build if isinstance(build, str) else build.get("context", ".")
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    return (path.parent / context / dockerfile).resolve() == DOCKERFILE.resolve()


def kshare_services(path: Path, doc: dict) -> dict[str, dict]:
    return {name: svc for name, svc in (doc.get("services") or {}).items()
            if _builds_kshare(path, svc or {}) or "KSHARE_METRICS_PORT" in _env(svc or {})}


@pytest.fixture(scope="module", params=[p.name for p in compose_files()])
def compose(request) -> tuple[Path, dict]:
    path = COMPOSE_DIR / request.param
    doc = load_yaml(path)
    assert isinstance(doc, dict) and isinstance(doc.get("services"), dict), f"{path.name}: no services"
    return path, doc


def test_the_expected_files_exist():
    names = {p.name for p in compose_files()}
    assert set(BASE_FILES) <= names
    assert (COMPOSE_DIR / "README.md").exists()


def test_every_kshare_invocation_names_real_commands_and_options(compose, dockerfile):
    path, doc = compose
    entry, cmd, _ = _image_defaults(dockerfile)
    checked = 0
    for name, svc in doc["services"].items():
        svc = svc or {}
        entrypoint = _argv(svc.get("entrypoint"))
        command = _argv(svc.get("command"))
        if _builds_kshare(path, svc):
            argv = (entrypoint or entry) + (command or ([] if entrypoint else cmd))
        elif any(Path(a).name == "kshare" for a in entrypoint + command):
            argv = entrypoint + command
        else:
            continue
        start = next(i for i, a in enumerate(argv) if Path(a).name == "kshare")
        assert check_argv(argv[start + 1:]) == [], f"{path.name} service {name}: {argv}"
        checked += 1
    if path.name in BASE_FILES:
        assert checked >= 1, f"{path.name} runs no kshare service"


def test_every_kshare_env_var_is_a_real_setting_with_a_valid_value(compose):
    path, doc = compose
    for name, svc in doc["services"].items():
        for var, value in _env(svc or {}).items():
            if not var.startswith("KSHARE_"):
                continue
            assert var in SETTING_BY_ENV, (f"{path.name} service {name}: {var} is not a kshare setting "
                                           f"(settings: docs/configuration.md)")
            if value == "" and SETTING_BY_ENV[var].key in CLEARED_BY_EMPTY_ENV:
                continue  # clears the image's value (config.CLEARED_BY_EMPTY_ENV)
            try:
                SETTING_BY_ENV[var].coerce(value, f"{path.name} {name} {var}")
            except ConfigError as exc:
                pytest.fail(str(exc))


@pytest.mark.parametrize("filename", BASE_FILES)
def test_sidecar_configuration_is_complete_and_fits_the_backend(filename, dockerfile):
    path = COMPOSE_DIR / filename
    doc = load_yaml(path)
    _, _, image_env = _image_defaults(dockerfile)
    sidecars = kshare_services(path, doc)
    assert len(sidecars) == 1, f"{filename}: expected one kshare service, found {sorted(sidecars)}"
    (name, svc), = sidecars.items()
    env = {**{k: v for k, v in image_env.items() if k.startswith("KSHARE_")}, **_env(svc)}
    cfg = load_config(env=env)  # the whole configuration resolves (cross-setting checks included)

    assert cfg["listen"].startswith("0.0.0.0:")
    assert cfg["state.topic.replication.factor"] == 1, "single-node backend: replication factor 1"
    # the advertised port is the host port published for the listener port
    listen_port = cfg["listen"].rpartition(":")[2]
    adv_host, adv_port = cfg.advertised
    published = {str(p).rsplit(":", 1)[-1]: str(p).rsplit(":", 1)[0].rsplit(":", 1)[-1]
                 for p in svc.get("ports", [])}
    assert published.get(listen_port) == str(adv_port), f"{filename}: {listen_port} published as {published}"
    assert adv_host == "localhost"

    # the backend named in bootstrap.servers is a service of this file, on a listener it declares
    backends = doc["services"]
    for server in cfg["bootstrap.servers"].split(","):
        host, _, port = server.rpartition(":")
        assert host in backends, f"{filename}: bootstrap server {host} is not a service here"
        assert f"{host}:{port}" in str(backends[host]), f"{filename}: {host} does not listen on {server}"
        condition = (svc.get("depends_on") or {}).get(host, {})
        assert condition.get("condition") == "service_healthy", f"{filename}: kshare must wait for {host}"


def test_cluster_file_sidecars_resolve_with_the_image_and_reach_each_other_by_service_name(dockerfile):
    """Each sidecar of the cluster file loads (the image's ENV under the service's), has its own node
    id, advertises its service name to the compose network and a published localhost port to the
    Docker host, and its healthcheck probes a listener it opens. (tests/e2e/test_topology.py runs it.)"""
    path = COMPOSE_DIR / "kafka39-cluster.yml"
    doc = load_yaml(path)
    _, _, image_env = _image_defaults(dockerfile)
    sidecars = kshare_services(path, doc)
    assert len(sidecars) == 3
    node_ids = set()
    for name, svc in sidecars.items():
        env = {**{k: v for k, v in image_env.items() if k.startswith("KSHARE_")}, **_env(svc)}
        cfg = load_config(env=env)
        node_ids.add(cfg["node.id"])
        specs = {spec.name: spec for spec in cfg.listener_specs()}
        assert (specs["INTERNAL"].advertised_host, specs["INTERNAL"].host) == (name, "0.0.0.0")
        published = {str(p).rsplit(":", 1)[1]: str(p).rsplit(":", 1)[0] for p in svc.get("ports", [])}
        external = specs["EXTERNAL"]
        assert external.advertised_host == "localhost"
        assert published.get(str(external.port)) == str(external.advertised_port)
        check = svc["healthcheck"]["test"]
        assert check[:2] == ["CMD", "kshare-healthcheck"] and check[2].endswith(f":{specs['INTERNAL'].port}")
    assert node_ids == {1, 2, 3}


@pytest.mark.parametrize("filename", BASE_FILES)
def test_every_service_has_a_healthcheck(filename):
    doc = load_yaml(COMPOSE_DIR / filename)
    for name, svc in doc["services"].items():
        check = svc.get("healthcheck") or {}
        assert check.get("test"), f"{filename} service {name} has no healthcheck"
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in doc["services"], f"{filename}: {name} depends on unknown {dep}"


def test_kafka39_runs_apache_kafka_39_in_kraft_mode():
    doc = load_yaml(COMPOSE_DIR / "kafka39.yml")
    kafka = doc["services"]["kafka"]
    assert interpolate(kafka["image"]) == "apache/kafka:3.9.2"
    env = _env(kafka)
    assert "controller" in env["KAFKA_PROCESS_ROLES"] and "broker" in env["KAFKA_PROCESS_ROLES"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@kafka:")
    assert len(env["CLUSTER_ID"]) == 22, "KRaft cluster ids are URL-safe base64 UUIDs"
    # every advertised listener is declared, and has a security protocol
    names = {item.split("://")[0] for item in env["KAFKA_LISTENERS"].split(",")}
    protocols = {item.split(":")[0] for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")}
    advertised = {item.split("://")[0] for item in env["KAFKA_ADVERTISED_LISTENERS"].split(",")}
    assert advertised <= names and names <= protocols
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in names
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised


def test_redpanda_file_runs_redpanda():
    doc = load_yaml(COMPOSE_DIR / "redpanda.yml")
    assert "redpanda" in doc["services"]["redpanda"]["image"]


def test_metrics_overlay_matches_prometheus_config():
    overlay = load_yaml(COMPOSE_DIR / "metrics.yml")
    prometheus = load_yaml(COMPOSE_DIR / "prometheus.yml")
    (name, svc), = kshare_services(COMPOSE_DIR / "metrics.yml", overlay).items()
    port = _env(svc)["KSHARE_METRICS_PORT"]
    targets = [t for job in prometheus["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert f"{name}:{port}" in targets
    for base in BASE_FILES:  # the overlay extends a service every base file has
        assert name in load_yaml(COMPOSE_DIR / base)["services"]
    volumes = overlay["services"]["prometheus"]["volumes"]
    for volume in volumes:
        source = volume.split(":")[0]
        if source.startswith("."):
            assert (COMPOSE_DIR / source).exists(), f"metrics.yml mounts missing {source}"


def test_readme_covers_every_file():
    readme = (COMPOSE_DIR / "README.md").read_text()
    for path in compose_files():
        assert f"compose/{path.name}" in readme, f"compose/README.md does not mention {path.name}"
    assert (REPO / "docs" / "deployment.md").exists()


# -- image names through variables; the host-network overlays ---------------------------------------

HOST_NETWORK = COMPOSE_DIR / "host-network"
#: variable -> the image users pull (or build, for the sidecar) when it is not set
IMAGE_VARIABLES = {"KAFKA_IMAGE": "apache/kafka:3.9.2", "KSHARE_IMAGE": "kshare-sidecar:dev",
                   "PROMETHEUS_IMAGE": "prom/prometheus:v3.5.0",
                   "REDPANDA_IMAGE": "docker.redpanda.com/redpandadata/redpanda:v25.2.1"}


def test_images_come_from_variables_whose_defaults_are_what_users_pull(compose):
    path, doc = compose
    for name, svc in doc["services"].items():
        image = (svc or {}).get("image")
        if image is None:
            continue  # an overlay's service: the base file names the image
        var = image.split(":-", 1)[0].removeprefix("${")
        assert image == f"${{{var}:-{IMAGE_VARIABLES[var]}}}", f"{path.name} service {name}: {image}"


@pytest.mark.parametrize("overlay", sorted(p.name for p in HOST_NETWORK.glob("*.yml") if p.name != "prometheus.yml"))
def test_host_network_overlays_put_every_service_on_loopback(overlay):
    base = load_yaml(COMPOSE_DIR / overlay)
    doc = load_yaml(HOST_NETWORK / overlay)
    assert set(doc["services"]) <= set(base["services"]), f"{overlay} names services its base does not have"
    for name, svc in doc["services"].items():
        if name == "kshare" and overlay == "metrics.yml":
            continue  # the kshare service's network comes from the base file's overlay
        assert svc.get("network_mode") == "host", f"{overlay} {name}"
        env = _env(svc)
        merged = {**_env(base["services"][name]), **env}
        for var in ("KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS", "KSHARE_LISTENERS", "KSHARE_ADVERTISED_LISTENERS",
                    "KSHARE_LISTEN", "KSHARE_ADVERTISED_LISTENER", "KSHARE_BOOTSTRAP_SERVERS",
                    "KAFKA_CONTROLLER_QUORUM_VOTERS"):
            if merged.get(var):
                assert var in env, f"{overlay} {name}: {var} is left as the base file's {merged[var]}"
                hosts = {item.rsplit("://", 1)[-1].split("@")[-1].rsplit(":", 1)[0] for item in env[var].split(",")}
                assert hosts == {"127.0.0.1"}, f"{overlay} {name} {var}={env[var]}"
        for var, value in env.items():
            if var.startswith("KSHARE_"):
                SETTING_BY_ENV[var].coerce(value, f"{overlay} {name} {var}")
        # a healthcheck that names an address must name loopback (kshare-healthcheck alone reads KSHARE_LISTEN)
        base_test = " ".join(map(str, ((base["services"][name] or {}).get("healthcheck") or {}).get("test", [])))
        if re.search(r"[a-z0-9-]+:\d+", base_test):
            test = " ".join(map(str, (svc.get("healthcheck") or {}).get("test", [])))
            assert re.search(r"127\.0\.0\.1:\d+", interpolate(test)), f"{overlay} {name}: healthcheck {base_test}"
    # every listener port of the merged file is distinct (one host network)
    ports: list[str] = []
    for name, svc in doc["services"].items():
        for var, value in _env(svc).items():
            if var in ("KAFKA_LISTENERS", "KSHARE_LISTENERS", "KSHARE_LISTEN", "KSHARE_METRICS_PORT"):
                ports += [item.rsplit(":", 1)[-1] for item in value.split(",")]
    assert len(ports) == len(set(ports)), f"{overlay}: a port is used twice: {sorted(ports)}"
