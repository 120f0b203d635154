"""What is generated from the key table: Pulumi.yaml (project, runtime and its `config:` block) and the
key tables of docs/configuration.md (between its two marker comments). A test keeps both files equal to
this output; `python -m vke_gpu_dra_core.config --write` rewrites them.
"""

from __future__ import annotations

import json
from typing import Any, Final

import yaml

from .keys import KEYS, PROVIDER_KEYS, Key
from .stack_config import PROJECT

GENERATE_COMMAND: Final = "python -m vke_gpu_dra_core.config --write"
PULUMI_YAML: Final = "Pulumi.yaml"
CONFIGURATION_DOC: Final = "docs/configuration.md"
DOC_BEGIN: Final = f"<!-- BEGIN generated from the key table by `{GENERATE_COMMAND}`; do not edit -->"
DOC_END: Final = "<!-- END generated -->"


def declared_in_pulumi_yaml(key: Key) -> bool:
    """Whether Pulumi.yaml can declare the key: only a name without a dot.

    The Pulumi CLI reads a project config key's dots as a path into an object (`driver.image` is `image`
    inside `driver`) and merges its default there, while `pulumi config set driver.image X` stores the flat
    key `driver.image`: a dotted declaration would neither type-check the stack's value nor default it, and
    `driver.image` beside `driver.image.build` fails every preview ("driver.image: expected a map"). The
    program's reader checks and defaults every key (`vke_gpu_dra_core.config.load`).
    """
    return "." not in key.name


def pulumi_yaml_config() -> dict[str, dict[str, Any]]:
    """The `config:` block of Pulumi.yaml as it must be (typed project config of the keys without a dot)."""
    block: dict[str, dict[str, Any]] = {}
    for k in KEYS:
        if not declared_in_pulumi_yaml(k):
            continue
        entry: dict[str, Any] = {"type": k.type}
        if k.type == "array":
            entry["items"] = {"type": "string"}
        entry["default"] = k.default_value()
        entry["description"] = k.description
        block[k.name] = entry
    return block


def render_pulumi_yaml() -> str:
    """Pulumi.yaml with the config block generated from the key table."""
    project = {
        "name": PROJECT,
        "description": "GPU dynamic resource allocation (DRA) on Volcengine Kubernetes Engine",
        "runtime": {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}},
        "config": pulumi_yaml_config(),
    }
    header = (
        "# Generated from the key table (core/src/vke_gpu_dra_core/config/keys.py):\n"
        f"#   {GENERATE_COMMAND}\n"
        "# Only keys without a dot are declared: the CLI reads a declared key's dots as a path into an\n"
        "# object. Every key, dotted ones included, is in docs/configuration.md and checked by the program.\n"
    )
    return header + yaml.safe_dump(project, sort_keys=False, allow_unicode=True, width=100)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "\\<")


def default_cell(key: Key) -> str:
    default = key.default if key.type == "string" else json.dumps(key.default)
    return f"`{default}`" if default else '`""`'


def allowed_cell(key: Key) -> str:
    """The key's own constraints in words, and when they are checked."""
    parts = [c.doc for c in key.checks]
    parts += [f"each {c.doc}" for c in key.each]
    if key.convert is not None:
        parts.append(key.convert.doc)
    if key.secret and key.secret_required:
        parts.append("a secret (pulumi config set --secret)")
    text = "; ".join(parts)
    return f"{key.when.doc}: {text}" if key.when is not None and text else text


def _table(keys: tuple[Key, ...]) -> list[str]:
    lines = ["| key | type | default | meaning | allowed |", "|---|---|---|---|---|"]
    for key in keys:
        cells = (
            f"`{key.full}`",
            key.type,
            default_cell(key),
            _cell(key.description),
            _cell(allowed_cell(key)),
        )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def configuration_block() -> str:
    """The generated part of docs/configuration.md, markers included."""
    lines = [
        DOC_BEGIN,
        "",
        "## Keys",
        "",
        *_table(KEYS),
        "",
        "## Provider keys",
        "",
        "Read for `target=vke` only (the runtime-pinning resource calls the Volcengine API with them); not "
        "declared in Pulumi.yaml.",
        "",
        *_table(PROVIDER_KEYS),
        "",
        DOC_END,
    ]
    return "\n".join(lines)


def render_configuration_doc(current: str) -> str:
    """`current` (docs/configuration.md) with its generated block replaced by the table's."""
    head, begin, rest = current.partition(DOC_BEGIN)
    _, end, tail = rest.partition(DOC_END)
    if not begin or not end:
        raise ValueError(
            f"{CONFIGURATION_DOC}: the marker comments {DOC_BEGIN!r} and {DOC_END!r} are missing"
        )
    return head + configuration_block() + tail
