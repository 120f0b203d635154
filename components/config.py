"""The program's side of the stack configuration: the running engine's raw config, and Pulumi secrets.

Everything else (the key table, the typed dataclasses, the reader and its rules, Pulumi.yaml and the
configuration reference) is `vke_gpu_dra_core.config`, shared with the operator tools and the policy pack.
"""

from __future__ import annotations

import os

import pulumi
from pulumi.runtime import config as runtime_config
from vke_gpu_dra_core.config import RawConfig, SecretStr, StackConfig, StackConfigError
from vke_gpu_dra_core.config import load as load_raw

__all__ = ["StackConfigError", "load", "raw_from_pulumi_runtime", "secret"]


def raw_from_pulumi_runtime() -> RawConfig:
    """Everything the running Pulumi program was given (set_all_config and PULUMI_CONFIG)."""
    merged: dict[str, str] = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    secret_keys = set(runtime_config.get_config_secret_keys_env())
    secret_keys |= {k for k in merged if runtime_config.is_config_secret(k)}
    env = {k: v for k, v in os.environ.items() if k.startswith("VOLCENGINE_")}
    return RawConfig(values=merged, secret_keys=frozenset(secret_keys), environ=env)


def load(raw: RawConfig | None = None) -> StackConfig:
    """The validated stack config of `raw`, by default the running engine's; raises StackConfigError."""
    return load_raw(raw if raw is not None else raw_from_pulumi_runtime())


def secret(value: SecretStr | None) -> pulumi.Output[str] | None:
    """A secret config value as a Pulumi secret (None when unset)."""
    return pulumi.Output.secret(value.reveal()) if value else None
