"""Render the settings reference (docs/configuration.md tables) from `kshare_sidecar.config.settings.SETTINGS`.

    python -m kshare_sidecar.config.doc                 # print the generated Markdown
    python -m kshare_sidecar.config.doc --write FILE    # replace the generated block in FILE
    python -m kshare_sidecar.config.doc --check FILE    # exit 1 when FILE's block is stale

The generated block sits between `BEGIN` and `END` marker comments, so the hand-written prose
around it survives regeneration.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .settings import (
    FOREIGN_GROUP_CONFIGS,
    GROUP_CONFIG_NAMES,
    GROUP_CONFIGS,
    KSHARE_GROUP_CONFIGS,
    SETTINGS,
    Setting,
    env_name,
)

BEGIN = "<!-- BEGIN GENERATED SETTINGS (python -m kshare_sidecar.config.doc --write docs/configuration.md) -->"
END = "<!-- END GENERATED SETTINGS -->"

#: What a `check=` validator accepts, by validator name (a new validator falls back to a pointer).
_CHECKS = {
    "_bootstrap": "`host:port[,host:port...]`, required",
    "_host_port": "`host:port`",
    "_optional_host_port": "`host:port` or empty",
    "_offset_reset": "`latest`, `earliest`, `by_duration:<ISO-8601 duration>`",
    "_listeners": "`NAME://host:port[,...]`",
    "_protocol_map": "`NAME:PROTOCOL[,...]`; protocols `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`",
    "_mechanisms": "comma-separated `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`",
    "dlq_topic_problem": "`\"\"` or a legal topic name not starting with `__` (per group: any name not "
                         "starting with `__`; see `deadletter.strict.names`)",
    "_topic_list_problem": "comma-separated legal topic names, none starting with `__`",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def default_text(setting: Setting) -> str:
    if setting.default == "":
        return '`""` (empty)'
    if isinstance(setting.default, bool):
        return f"`{str(setting.default).lower()}`"
    return f"`{setting.default}`"


def allowed_text(setting: Setting) -> str:
    parts = []
    if setting.low is not None or setting.high is not None:
        low = "" if setting.low is None else setting.low
        high = "" if setting.high is None else setting.high
        parts.append(f"{low} .. {high}")
    elif setting.kind is bool:
        parts.append("`true`, `false`")
    if setting.choices:
        parts.append(", ".join(f"`{c}`" for c in setting.choices))
    if setting.check is not None:
        parts.append(_CHECKS.get(getattr(setting.check, "__name__", ""), "validated: see meaning"))
    if not parts:
        parts.append("any text" if setting.kind is str else setting.kind.__name__)
    return "; ".join(parts)


def settings_table() -> str:
    rows = ["| Key | Environment variable | Type | Default | Allowed | Meaning |",
            "|---|---|---|---|---|---|"]
    for s in SETTINGS:
        rows.append(f"| `{s.key}` | `{env_name(s.key)}` | {s.kind.__name__} | {default_text(s)} | "
                    f"{_cell(allowed_text(s))} | {_cell(s.doc)} |")
    return "\n".join(rows)


def group_table() -> str:
    rows = ["| Group config | Default taken from |", "|---|---|"]
    for key in GROUP_CONFIG_NAMES:
        if key == "share.assignor":
            rows.append(f"| `{key}` | `{GROUP_CONFIGS[key]}` (kshare's own key, not Kafka's: allowed values are the "
                        "registered assignor names; listed by a describe of all configs only when set) |")
        elif key in KSHARE_GROUP_CONFIGS and key not in GROUP_CONFIGS:  # a group's own choice only
            s = FOREIGN_GROUP_CONFIGS[key]
            rows.append(f"| `{key}` | `{s.default}` (kshare's own key, a group's choice only: "
                        f"{', '.join(s.choices or ())}; docs/migration.md; listed only when set) |")
        elif key in KSHARE_GROUP_CONFIGS:
            whose = "KIP-1191's name (Kafka 4.4)" if key.startswith("errors.") else "kshare's own key, not Kafka's"
            rows.append(f"| `{key}` | `{GROUP_CONFIGS[key]}` ({whose}: docs/extensions.md; listed by a describe of "
                        "all configs only when set) |")
        elif key in GROUP_CONFIGS:
            rows.append(f"| `{key}` | `{GROUP_CONFIGS[key]}` |")
        else:
            s = FOREIGN_GROUP_CONFIGS[key]
            rows.append(f"| `{key}` | `{s.default}` ({s.low} .. {s.high}; stored and described, not acted on) |")
    return "\n".join(rows)


def render() -> str:
    """The generated block, markers included."""
    return "\n".join([
        BEGIN,
        "",
        f"### Sidecar settings ({len(SETTINGS)})",
        "",
        settings_table(),
        "",
        f"### Per-group configs ({len(GROUP_CONFIG_NAMES)})",
        "",
        "Set on a share group with the admin API (IncrementalAlterConfigs on a GROUP resource); a group",
        "without an override uses the sidecar setting on the right.",
        "",
        group_table(),
        "",
        END,
    ])


def splice(document: str) -> str:
    """``document`` with its generated block replaced by a fresh one (appended when absent)."""
    block = render()
    start, end = document.find(BEGIN), document.find(END)
    if start == -1 or end == -1 or end < start:
        return document.rstrip("\n") + "\n\n" + block + "\n"
    return document[:start] + block + document[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stdout.write(render() + "\n")
        return 0
    if len(args) == 2 and args[0] in ("--write", "--check"):
        path = Path(args[1])
        current = path.read_text() if path.exists() else ""
        fresh = splice(current)
        if args[0] == "--check":
            if fresh != current:
                sys.stderr.write(f"{path} is stale: run python -m kshare_sidecar.config.doc --write {path}\n")
                return 1
            return 0
        path.write_text(fresh)
        return 0
    sys.stderr.write("usage: python -m kshare_sidecar.config.doc [--write FILE | --check FILE]\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
