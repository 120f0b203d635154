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

from . import resources as r
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
        """`<project>:<key>`, else the only `<any>:<key>`."""
        if self.project and f"{self.project}:{key}" in self.config:
            return self.config[f"{self.project}:{key}"]
        matches = [v for k, v in self.config.items() if k.split(":", 1)[-1] == key]
        return matches[0] if len(matches) == 1 else None


STACK = StackInfo(
    project=os.environ.get("PULUMI_PROJECT", ""),
    stack=os.environ.get("PULUMI_STACK", ""),
    config=wire.parse_config_env(os.environ.get("PULUMI_CONFIG")),
)


def is_production(policy_config: Mapping[str, Any]) -> bool:
    """Policy config `production` wins; else the stack config `<project>:production`."""
    if "production" in policy_config:
        return r.truthy(policy_config["production"]) is True
    return r.truthy(STACK.config_value("production")) is True
