"""What a policy call knows beyond its arguments: decoded resources and the stack's config.

The analyzer servicer (pack.py) fills these per request; policies read them. Outside a request
(direct calls in tests) the policies fall back to converting pulumi_policy's own arguments.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from vke_gpu_dra_core import config as stack_config
from vke_gpu_dra_core import policy_names
from vke_gpu_dra_core import resources as r

from . import wire

#: URN -> decoded resource for the request being analyzed.
CURRENT: ContextVar[Mapping[str, r.Res] | None] = ContextVar("vke_dra_current", default=None)


@dataclass
class StackInfo:
    """Project, stack and config of the stack under analysis (from ConfigureStack or the environment)."""

    project: str = ""
    stack: str = ""
    config: dict[str, Any] = field(default_factory=dict)

    def config_value(self, key: str) -> Any:
        """`<project>:<key>`, else the only `<any>:<key>`. `key` must be a key of the stack config's
        table (a misspelt name is a KeyError here, not a silently absent value)."""
        if key not in stack_config.KEYS_BY_NAME:
            raise KeyError(f"{key} is not a stack config key (vke_gpu_dra_core.config.KEYS)")
        if self.project and f"{self.project}:{key}" in self.config:
            return self.config[f"{self.project}:{key}"]
        matches = [v for k, v in self.config.items() if k.split(":", 1)[-1] == key]
        return matches[0] if len(matches) == 1 else None


STACK = StackInfo(
    project=os.environ.get("PULUMI_PROJECT", ""),
    stack=os.environ.get("PULUMI_STACK", ""),
    config=wire.parse_config_env(os.environ.get("PULUMI_CONFIG")),
)


@dataclass(frozen=True)
class Production:
    """Whether the stack is production, read as the program reads it; `problem` when the value is invalid."""

    value: bool
    problem: str | None = None


def production(policy_config: Mapping[str, Any]) -> Production:
    """Policy config `production` wins; else the stack config `<project>:production`.

    Both are read with the program's own boolean parser (`vke_gpu_dra_core.config.parse_bool`), so the
    pack and the program agree on every value: anything but true/false is a problem, and the stack counts as
    production meanwhile (a typo must not switch protection off).
    """
    if "production" in policy_config:
        raw, where = (
            policy_config["production"],
            f"policy config {policy_names.PRODUCTION_PROTECTION}.production",
        )
    else:
        raw = STACK.config_value("production")
        if raw is None:
            return Production(False)
        where = f"stack config {stack_config.PROJECT}:production"
    value = stack_config.parse_bool(raw)
    if value is None:
        shown = raw if isinstance(raw, str) else repr(raw)
        return Production(True, f"{where} = {shown!r}: allowed: {stack_config.BOOLEAN_ALLOWED}")
    return Production(value)


def is_production(policy_config: Mapping[str, Any]) -> bool:
    return production(policy_config).value
