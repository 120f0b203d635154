"""Raw config as the Pulumi engine hands it over (full keys to strings), read from stack files too.

The running program gets it from the engine (`components/config.py`); tools and tests build it from a
stack file's `config:` mapping with `raw_from_stack_file`, and from the project defaults of a Pulumi.yaml
with `project_defaults`, as the CLI passes both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from .model import PROJECT


@dataclass(frozen=True)
class RawConfig:
    """Raw config as the engine provides it: full keys (`project:key`) to strings, plus secret keys."""

    values: Mapping[str, str]
    secret_keys: frozenset[str] = frozenset()
    environ: Mapping[str, str] = field(default_factory=dict)


#: What `pulumi.Config.get_bool` accepts (the Python SDK compares with exactly these strings and raises
#: ConfigTypeError for anything else, "TRUE", "yes", "1" and "on" included).
BOOLEAN_TRUE: Final = ("true", "True")
BOOLEAN_FALSE: Final = ("false", "False")
BOOLEAN_ALLOWED: Final = "true or false"


def parse_bool(raw: object) -> bool | None:
    """A boolean config value as Pulumi's config reads it; None when it is not one.

    `raw` is the engine's string, or a bool where a caller already holds typed YAML or JSON.
    """
    if isinstance(raw, bool):
        return raw
    if raw in BOOLEAN_TRUE:
        return True
    if raw in BOOLEAN_FALSE:
        return False
    return None


_BOOL_TAG: Final = "tag:yaml.org,2002:bool"


class PulumiYamlLoader(yaml.SafeLoader):
    """YAML as the Pulumi CLI reads Pulumi.yaml and Pulumi.<stack>.yaml (Go's yaml.v3, YAML 1.2):
    only `true`/`false` (also `True`, `TRUE`, `False`, `FALSE`) are booleans. YAML 1.1's `yes`, `no`,
    `on`, `off`, `y`, `n` stay strings, so the program sees `production: yes` as the string 'yes' and
    refuses it, and so does every tool reading the file with this loader."""


PulumiYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
PulumiYamlLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_pulumi_yaml(text: str) -> Any:
    """One Pulumi project or stack file's content, read as the Pulumi CLI reads it (`PulumiYamlLoader`);
    yaml.YAMLError when it is not YAML."""
    return yaml.load(text, Loader=PulumiYamlLoader)


def raw_from_stack_file(
    stack_config: Mapping[str, Any], secret_value: Callable[[str], str] | None = None
) -> RawConfig:
    """RawConfig from the `config:` mapping of a Pulumi.<stack>.yaml (tests and tooling).

    Values are stringified as the engine does (lists and bools to JSON); `{secure: …}` entries become
    secret keys whose value is `secret_value(key)` (a placeholder by default).
    """
    values: dict[str, str] = {}
    secrets: set[str] = set()
    for key, value in stack_config.items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        if isinstance(value, dict) and "secure" in value:
            secrets.add(full)
            values[full] = secret_value(full) if secret_value else "placeholder-secret"
        elif isinstance(value, str):
            values[full] = value
        else:
            values[full] = json.dumps(value)
    return RawConfig(values=values, secret_keys=frozenset(secrets))


def project_defaults(project: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults a Pulumi.yaml's `config:` block declares, as full keys (what the CLI passes on).

    `project` is the parsed Pulumi.yaml; entries without a default are left out.
    """
    name = project.get("name") or PROJECT
    block = project.get("config") or {}
    defaults: dict[str, Any] = {}
    if not isinstance(block, Mapping):
        return defaults
    for key, entry in block.items():
        full = key if ":" in str(key) else f"{name}:{key}"
        if isinstance(entry, Mapping):
            if "default" in entry:
                defaults[full] = entry["default"]
        else:
            defaults[full] = entry
    return defaults
