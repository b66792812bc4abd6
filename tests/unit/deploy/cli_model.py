"""Check a ``kshare ...`` argv against the real Typer app: commands, options and option values.

Walks the command tree that ``typer.main.get_command(kshare_sidecar.cli.app)`` builds (groups have
``commands``, every command has ``params`` with ``opts``), so a renamed command or option shows up
here as a failing deployment test instead of a container that exits at start-up.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

import typer.main

from kshare_sidecar import cli
from kshare_sidecar.config import BY_KEY, ConfigError

HELP = ("--help",)


@cache
def root() -> Any:
    return typer.main.get_command(cli.app)


def subcommands(command: Any) -> dict[str, Any]:
    return dict(getattr(command, "commands", None) or {})


def _is_option(param: Any) -> bool:
    return getattr(param, "param_type_name", "option") == "option"


def _setting_for(param_name: str):
    """The config setting an option feeds (``bootstrap_server`` -> ``bootstrap.servers``), if any."""
    dotted = param_name.replace("_", ".")
    return BY_KEY.get(dotted) or BY_KEY.get(dotted + "s")


def _check_value(path: str, opt: str, param: Any, value: str) -> str | None:
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", str)
    base = getattr(annotation, "__origin__", None) and annotation.__args__[0] or annotation
    if base in (int, float):
        try:
            base(value)
        except ValueError:
            return f"{path} {opt}: {value!r} is not {base.__name__}"
    if param.name == "log_level" and not isinstance(logging.getLevelName(value.upper()), int):
        return f"{path} {opt}: {value!r} is not a logging level"
    setting = _setting_for(param.name)
    if setting is not None:
        try:
            setting.coerce(value, f"{path} {opt}")
        except ConfigError as exc:
            return str(exc)
    return None


def check_argv(argv: list[str]) -> list[str]:
    """Problems with ``argv`` (the arguments after ``kshare``); empty when it names a real command."""
    command, path, problems = root(), ["kshare"], []
    positional = 0
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-") and token != "-":
            name, eq, inline = token.partition("=")
            if name in HELP:
                i += 1
                continue
            params = {o: p for p in command.params if _is_option(p)
                      for o in (*p.opts, *getattr(p, "secondary_opts", ()))}
            param = params.get(name)
            if param is None:
                problems.append(f"{' '.join(path)} has no option {name} (options: {', '.join(sorted(params))})")
                i += 1
                continue
            if getattr(param, "is_flag", False):
                if eq:
                    problems.append(f"{' '.join(path)} {name} is a flag and takes no value")
                i += 1
                continue
            if eq:
                value = inline
            elif i + 1 < len(argv):
                value = argv[i + 1]
                i += 1
            else:
                problems.append(f"{' '.join(path)} {name} needs a value")
                break
            if problem := _check_value(" ".join(path), name, param, value):
                problems.append(problem)
            i += 1
            continue
        subs = subcommands(command)
        if subs:
            if token not in subs:
                problems.append(f"{' '.join(path)} has no command {token!r} (commands: {', '.join(sorted(subs))})")
                return problems
            command = subs[token]
            path.append(token)
            positional = 0
        else:
            arguments = [p for p in command.params if not _is_option(p)]
            if positional >= len(arguments) and not any(getattr(p, "nargs", 1) == -1 for p in arguments):
                problems.append(f"{' '.join(path)} takes no argument {token!r}")
            positional += 1
        i += 1
    asked_help = any(token in HELP for token in argv)  # `kshare --help`: the group's help, no command needed
    if subcommands(command) and not getattr(command, "invoke_without_command", False) and not asked_help:
        problems.append(f"{' '.join(path)} is a command group: name one of {', '.join(sorted(subcommands(command)))}")
    return problems
