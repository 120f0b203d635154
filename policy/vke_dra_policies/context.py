"""What a policy call knows beyond its arguments: the stack under analysis and the run's decoded resources.

The analyzer server (server.py) builds one `Run` per request (the stack of its last ConfigureStack and
the request's resources, decoded with their secretness) and runs the pack's policies for it; the
policies hand the run's stack to the checks. A policy called outside a run (directly, as in the tests)
converts pulumi_policy's own arguments, and its checks read `STACK`, the stack the process environment
names; the server starts from it and never changes it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vke_gpu_dra_core import config as stack_config
from vke_gpu_dra_core import policy_names, vke_releases
from vke_gpu_dra_core import resources as r

from . import wire


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


#: The stack the process environment names (the CLI sets PULUMI_PROJECT, PULUMI_STACK, PULUMI_CONFIG):
#: the stack of a call outside a run, and where the server's runs start before ConfigureStack.
STACK = StackInfo(
    project=os.environ.get("PULUMI_PROJECT", ""),
    stack=os.environ.get("PULUMI_STACK", ""),
    config=wire.parse_config_env(os.environ.get("PULUMI_CONFIG")),
)


@dataclass(frozen=True)
class Run:
    """One analyzer request: the stack under analysis and the request's resources (URN -> decoded)."""

    stack: StackInfo
    resources: Mapping[str, r.Res] = field(default_factory=dict)


@dataclass(frozen=True)
class Production:
    """Whether the stack is production, read as the program reads it; `problem` when the value is invalid."""

    value: bool
    problem: str | None = None


def production(policy_config: Mapping[str, Any], stack: StackInfo) -> Production:
    """Policy config `production` wins; else `stack`'s config `<project>:production`.

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
        raw = stack.config_value("production")
        if raw is None:
            return Production(False)
        where = f"stack config {stack_config.PROJECT}:production"
    value = stack_config.parse_bool(raw)
    if value is None:
        shown = raw if isinstance(raw, str) else repr(raw)
        return Production(True, f"{where} = {shown!r}: allowed: {stack_config.BOOLEAN_ALLOWED}")
    return Production(value)


def stack_marks_production(stack: StackInfo) -> bool:
    """Whether the stack's own setting `<project>:production` is true (the program protects then)."""
    return stack_config.parse_bool(stack.config_value("production")) is True


def forces_kubernetes_version(stack: StackInfo) -> bool:
    """The stack config asks VKE for a Kubernetes line its docs do not list (cluster.forceKubernetesVersion;
    a value that is not a boolean, which the program refuses, forces nothing)."""
    return stack_config.parse_bool(stack.config_value(vke_releases.FORCE_KEY)) is True


def is_production(policy_config: Mapping[str, Any], stack: StackInfo) -> bool:
    return production(policy_config, stack).value
