"""The Dockerfile: base image, non-root user, entrypoint and command that the CLI accepts, env, healthcheck."""

from __future__ import annotations

import fnmatch
import re
import socket
import struct
import subprocess
import sys
import threading

import pytest

from kshare_sidecar.config import BY_KEY, env_name, load_config

from .cli_model import check_argv
from .conftest import DOCKERFILE, REPO, env_pairs, final_stage

SETTING_BY_ENV = {env_name(k): s for k, s in BY_KEY.items()}


def _one(stage, keyword):
    found = [i for i in stage if i.keyword == keyword]
    assert found, f"Dockerfile final stage has no {keyword}"
    return found[-1]


def test_final_stage_is_python_311_slim(dockerfile):
    args = {i.args.split("=", 1)[0]: i.args.split("=", 1)[1] for i in dockerfile if i.keyword == "ARG" and "=" in i.args}
    base = final_stage(dockerfile)[0].args.split()[0]
    base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
    assert base == "python:3.11-slim"


def test_runs_as_a_non_root_user(dockerfile):
    stage = final_stage(dockerfile)
    user = _one(stage, "USER").args.split(":")[0]
    assert user not in ("root", "0")
    # the user is created in the image, and nothing after USER switches back
    assert any(i.keyword == "RUN" and "useradd" in i.args and user in i.args for i in stage)
    after = stage[stage.index(_one(stage, "USER")):]
    assert [i.keyword for i in after].count("USER") == 1


def test_entrypoint_is_kshare_and_cmd_is_a_real_command(dockerfile):
    stage = final_stage(dockerfile)
    entrypoint, cmd = _one(stage, "ENTRYPOINT").exec_form(), _one(stage, "CMD").exec_form()
    assert entrypoint == ["kshare"], "ENTRYPOINT must be the exec form [\"kshare\"]"
    assert cmd == ["sidecar", "run"]
    assert check_argv(cmd) == []


def test_the_package_is_installed(dockerfile):
    """Installed into a virtual environment in the build stage, which the final stage copies and
    puts first on PATH (so `kshare` and the venv's pip, for derived images' plugins, are found)."""
    starts = [n for n, inst in enumerate(dockerfile) if inst.keyword == "FROM"]
    build = dockerfile[starts[0]:starts[-1]]
    runs = " ".join(i.args for i in build if i.keyword == "RUN")
    assert "venv /opt/kshare" in runs and "/opt/kshare/bin/pip install .[console]" in runs  # the console too
    stage = final_stage(dockerfile)
    assert any(i.keyword == "COPY" and i.args.split() == ["--from=build", "/opt/kshare", "/opt/kshare"]
               for i in stage)
    env: dict[str, str] = {}
    for inst in stage:
        if inst.keyword == "ENV":
            env |= env_pairs(inst)
    assert env["PATH"].startswith("/opt/kshare/bin:")


def test_builds_with_the_classic_builder(dockerfile):
    """Nothing that only BuildKit understands: where no registry is reachable BuildKit cannot fetch
    its `# syntax=` frontend, and the classic builder refuses heredocs, RUN --mount and COPY --chmod."""
    text = DOCKERFILE.read_text()
    assert not re.search(r"^#\s*syntax\s*=", text, re.M | re.I)
    for inst in dockerfile:
        assert not inst.heredocs, f"{inst.keyword} uses a heredoc"
        assert "--mount" not in inst.args and "--chmod" not in inst.args and "--link" not in inst.args, inst.args


def test_env_names_real_settings_with_valid_values(dockerfile):
    env: dict[str, str] = {}
    for inst in final_stage(dockerfile):
        if inst.keyword == "ENV":
            env |= env_pairs(inst)
    kshare = {k: v for k, v in env.items() if k.startswith("KSHARE_")}
    assert kshare.get("KSHARE_LISTEN", "").startswith("0.0.0.0:"), "a container must listen on all interfaces"
    for name, value in kshare.items():
        assert name in SETTING_BY_ENV, f"{name} is not a setting"
        SETTING_BY_ENV[name].coerce(value, f"Dockerfile ENV {name}")
    # with a backend named, the image's environment is a complete, valid configuration
    load_config(env={**kshare, "KSHARE_BOOTSTRAP_SERVERS": "kafka:9092"})


def test_exposes_the_listener_port(dockerfile):
    stage = final_stage(dockerfile)
    env = {}
    for inst in stage:
        if inst.keyword == "ENV":
            env |= env_pairs(inst)
    port = env["KSHARE_LISTEN"].rpartition(":")[2]
    exposed = {p.split("/")[0] for i in stage if i.keyword == "EXPOSE" for p in i.args.split()}
    assert port in exposed


def test_dockerignore_keeps_what_the_build_copies(dockerfile):
    rules = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]

    def excluded(path: str) -> bool:
        result = False
        for rule in rules:
            negate = rule.startswith("!")
            pattern = rule.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path, pattern + "/*") or pattern == "**":
                result = not negate
        return result

    copied = []
    for inst in dockerfile:
        if inst.keyword == "COPY" and "--from" not in inst.args and not inst.heredocs:
            copied += [p for p in inst.args.split()[:-1] if not p.startswith("--")]
    assert copied, "the build copies nothing from the context?"
    for source in copied:
        assert (REPO / source).exists(), f"COPY {source}: no such file in the repository"
        assert not excluded(source), f".dockerignore excludes {source}, which the Dockerfile copies"
    assert excluded(".git") and excluded(".venv") and excluded("tests")


# -- the healthcheck script written by the Dockerfile ------------------------------------------------

def _healthcheck(dockerfile) -> tuple[str, str]:
    stage = final_stage(dockerfile)
    check = _one(stage, "HEALTHCHECK")
    command = check.args.split(" CMD ", 1)[1].strip()
    argv = __import__("json").loads(command)
    for inst in stage:
        parts = inst.args.split()
        if inst.keyword == "COPY" and "--from" not in inst.args and parts[-1].endswith("/" + argv[0]):
            return argv[0], (REPO / parts[0]).read_text()
    pytest.fail(f"HEALTHCHECK runs {argv[0]}, which the Dockerfile does not create")


class _FakeKafka:
    """Answers one request per connection with a canned ApiVersions response header + error code."""

    def __init__(self, error_code: int = 0, echo_correlation: bool = True) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.error_code, self.echo = error_code, echo_correlation
        self.requests: list[tuple[int, int, int]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                size = struct.unpack(">i", conn.recv(4))[0]
                body = conn.recv(size)
                api_key, version, correlation = struct.unpack(">hhi", body[:8])
                self.requests.append((api_key, version, correlation))
                answer = struct.pack(">ihi", correlation if self.echo else correlation + 1, self.error_code, 0)
                conn.sendall(struct.pack(">i", len(answer)) + answer)

    def close(self) -> None:
        self.sock.close()


def _run_check(tmp_path, script: str, listen: str) -> subprocess.CompletedProcess:
    path = tmp_path / "healthcheck.py"
    path.write_text(script)
    return subprocess.run([sys.executable, str(path)], env={"KSHARE_LISTEN": listen},
                          capture_output=True, text=True, timeout=30)


def test_healthcheck_passes_on_an_apiversions_answer(dockerfile, tmp_path):
    _, script = _healthcheck(dockerfile)
    fake = _FakeKafka()
    try:
        result = _run_check(tmp_path, script, f"0.0.0.0:{fake.port}")  # 0.0.0.0 means loopback
    finally:
        fake.close()
    assert result.returncode == 0, result.stderr
    assert fake.requests and fake.requests[0][:2] == (18, 0)  # ApiVersions v0


@pytest.mark.parametrize("error_code,echo", [(35, True), (0, False)])
def test_healthcheck_fails_on_a_bad_answer(dockerfile, tmp_path, error_code, echo):
    _, script = _healthcheck(dockerfile)
    fake = _FakeKafka(error_code, echo)
    try:
        result = _run_check(tmp_path, script, f"127.0.0.1:{fake.port}")
    finally:
        fake.close()
    assert result.returncode == 1 and "kshare-healthcheck" in result.stderr


def test_healthcheck_fails_when_nothing_listens(dockerfile, tmp_path):
    _, script = _healthcheck(dockerfile)
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    result = _run_check(tmp_path, script, f"127.0.0.1:{port}")
    assert result.returncode == 1 and "kshare-healthcheck" in result.stderr
