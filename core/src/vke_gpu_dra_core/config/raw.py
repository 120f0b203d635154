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

from .stack_config import PROJECT, Issue, StackConfigError


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


_TAG: Final = "tag:yaml.org,2002:"
#: Plain scalars Go's yaml.v3 reads as numbers (its `resolve`: strconv.ParseInt with base 0 after removing
#: underscores, then its float pattern); `.inf`/`.nan` as YAML 1.2 writes them.
_INT_RE: Final = re.compile(r"^[-+]?(?:0b[01_]+|0o[0-7_]+|0x[0-9a-fA-F_]+|0[0-7_]*|[1-9][0-9_]*)$")
_FLOAT_RE: Final = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


class PulumiYamlLoader(yaml.SafeLoader):
    """YAML as the Pulumi CLI reads Pulumi.yaml and Pulumi.<stack>.yaml (Go's yaml.v3, YAML 1.2):
    only `true`/`false` (also `True`, `TRUE`, `False`, `FALSE`) are booleans, so YAML 1.1's `yes`, `no`,
    `on`, `off`, `y`, `n` stay words (the program sees `production: yes` as 'yes' and refuses it);
    numbers are yaml.v3's (`0o17` is 15, `1:30` is a word); a date such as `2026-01-01` stays a word."""

    def construct_go_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node)).replace("_", "")
        sign, digits = (-1, text[1:]) if text.startswith("-") else (1, text.removeprefix("+"))
        if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
            return sign * int(digits, 8)  # a leading 0 is octal, as Go's ParseInt reads it
        return sign * int(digits, 0)


PulumiYamlLoader.yaml_implicit_resolvers = {
    first: [
        (tag, regexp)
        for tag, regexp in resolvers
        if tag.removeprefix(_TAG) not in ("bool", "int", "float", "timestamp")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
PulumiYamlLoader.add_implicit_resolver(
    _TAG + "bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
PulumiYamlLoader.add_implicit_resolver(_TAG + "int", _INT_RE, list("-+0123456789"))
PulumiYamlLoader.add_implicit_resolver(_TAG + "float", _FLOAT_RE, list("-+0123456789."))
PulumiYamlLoader.add_constructor(_TAG + "int", PulumiYamlLoader.construct_go_int)


def load_pulumi_yaml(text: str) -> Any:
    """One Pulumi project or stack file's content, read as the Pulumi CLI reads it (`PulumiYamlLoader`);
    yaml.YAMLError when it is not YAML."""
    return yaml.load(text, Loader=PulumiYamlLoader)


def _is_plain(value: Any) -> bool:
    """JSON-shaped: what a Pulumi config value can be (strings, numbers, booleans, lists, maps)."""
    if value is None or isinstance(value, str | bool | int | float):
        return True
    if isinstance(value, list):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def raw_from_stack_file(
    stack_config: Mapping[str, Any], secret_value: Callable[[str], str] | None = None
) -> RawConfig:
    """RawConfig from the `config:` mapping of a Pulumi.<stack>.yaml (tests and tooling).

    Values are stringified as the engine does (lists and bools to JSON); `{secure: …}` entries become
    secret keys whose value is `secret_value(key)` (a placeholder by default). A key that is not a word
    or a value that is not JSON-shaped (a `!!binary` or `!!set`) is a StackConfigError naming the key.
    """
    values: dict[str, str] = {}
    secrets: set[str] = set()
    issues: list[Issue] = []
    for key, value in stack_config.items():
        if not isinstance(key, str):
            issues.append(Issue(str(key), "(set)", "config keys are words such as nodePool.minReplicas"))
            continue
        full = key if ":" in key else f"{PROJECT}:{key}"
        if isinstance(value, dict) and "secure" in value:
            secrets.add(full)
            values[full] = secret_value(full) if secret_value else "placeholder-secret"
        elif isinstance(value, str):
            values[full] = value
        elif _is_plain(value):
            values[full] = json.dumps(value)
        else:
            shown = full.removeprefix(f"{PROJECT}:") if full.startswith(f"{PROJECT}:") else f"({full})"
            issues.append(
                Issue(shown, f"a YAML {type(value).__name__}", "a string, number, boolean, list or map")
            )
    if issues:
        raise StackConfigError(issues)
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
