"""Shared loaders for the deployment files (Dockerfile, compose/, docs) under test."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
COMPOSE_DIR = REPO / "compose"
DOCKERFILE = REPO / "Dockerfile"


def load_yaml(path: Path):
    yaml = pytest.importorskip("yaml", reason="PyYAML is needed to parse compose files (test extra)")
    return yaml.safe_load(path.read_text())


@dataclass
class Instruction:
    keyword: str
    args: str
    heredocs: dict[str, str] = field(default_factory=dict)  # delimiter -> body

    def exec_form(self) -> list[str] | None:
        """JSON (exec) form as a list, or None for shell form."""
        text = self.args.strip()
        if text.startswith("["):
            return json.loads(text)
        return None


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with line continuations joined and heredoc bodies attached (enough for our file)."""
    lines = text.splitlines()
    out: list[Instruction] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        while line.rstrip().endswith("\\") and i < len(lines):
            line = line.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
        keyword, _, args = line.strip().partition(" ")
        inst = Instruction(keyword.upper(), args.strip())
        for delim in re.findall(r"<<-?'?\"?(\w+)'?\"?", args):
            body = []
            while i < len(lines) and lines[i].strip() != delim:
                body.append(lines[i])
                i += 1
            i += 1  # the delimiter line
            inst.heredocs[delim] = "\n".join(body) + "\n"
        out.append(inst)
    return out


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    starts = [n for n, inst in enumerate(instructions) if inst.keyword == "FROM"]
    return instructions[starts[-1]:]


def env_pairs(inst: Instruction) -> dict[str, str]:
    """ENV key=value pairs (the modern form only, which is what our Dockerfile uses)."""
    return dict(part.split("=", 1) for part in shlex.split(inst.args))


def interpolate(value: str) -> str:
    """Compose ``${VAR:-default}`` / ``${VAR-default}`` with VAR unset: the default; ``${VAR}``: empty."""
    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", str(value))


@pytest.fixture(scope="session")
def dockerfile() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())
