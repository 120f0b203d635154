"""Stack configuration: one typed, validated object, read before any resource is registered.

* `keys` — the key table: every key once, with its type, default, description and constraints;
* `stack_config` — the frozen dataclasses the table fills (`StackConfig` and its sections), `SecretStr`,
  `Issue` and `StackConfigError`;
* `raw` — raw values as the engine hands them over, `parse_bool`, stack and project files;
* `reader` — `load(raw)` reads every key generically from the table, then the rules between keys;
* `render` — Pulumi.yaml and docs/configuration.md's key tables, generated from the table
  (`python -m vke_gpu_dra_core.config --write`).

Secret values (node password, kubeconfig, cloud credentials) are wrapped in `SecretStr` and never
appear in messages or reprs. Reading the running engine's config and making Pulumi secrets is the
program's side (`components/config.py`).
"""

from .keys import (
    ALL_KEYS,
    CLASSIC_SAMPLE_AUTO,
    CLASSIC_SAMPLE_OFF,
    CLASSIC_SAMPLE_ON,
    DEFAULT_SAMPLE_IMAGE,
    IMPLEMENTATION_NVIDIA,
    IMPLEMENTATION_PYTHON,
    KEYS,
    KEYS_BY_NAME,
    PROVIDER_KEYS,
    REPLACED_KEYS,
    Key,
)
from .raw import (
    BOOLEAN_ALLOWED,
    BOOLEAN_FALSE,
    BOOLEAN_TRUE,
    PulumiYamlLoader,
    RawConfig,
    load_pulumi_yaml,
    parse_bool,
    project_defaults,
    raw_from_stack_file,
)
from .reader import load, read
from .render import pulumi_yaml_config, render_configuration_doc, render_pulumi_yaml
from .stack_config import (
    BUILD_CR,
    BUILD_KIND,
    PROJECT,
    TARGET_EXISTING,
    TARGET_VKE,
    ClusterConfig,
    DriverConfig,
    DriverImageConfig,
    Issue,
    Label,
    NetworkConfig,
    NodePoolConfig,
    SampleConfig,
    SecretStr,
    StackConfig,
    StackConfigError,
    Taint,
    VolcengineAccess,
)

__all__ = [
    "ALL_KEYS",
    "BOOLEAN_ALLOWED",
    "BOOLEAN_FALSE",
    "BOOLEAN_TRUE",
    "BUILD_CR",
    "BUILD_KIND",
    "CLASSIC_SAMPLE_AUTO",
    "CLASSIC_SAMPLE_OFF",
    "CLASSIC_SAMPLE_ON",
    "DEFAULT_SAMPLE_IMAGE",
    "IMPLEMENTATION_NVIDIA",
    "IMPLEMENTATION_PYTHON",
    "KEYS",
    "KEYS_BY_NAME",
    "PROJECT",
    "PROVIDER_KEYS",
    "REPLACED_KEYS",
    "TARGET_EXISTING",
    "TARGET_VKE",
    "ClusterConfig",
    "DriverConfig",
    "DriverImageConfig",
    "Issue",
    "Key",
    "Label",
    "NetworkConfig",
    "NodePoolConfig",
    "PulumiYamlLoader",
    "RawConfig",
    "SampleConfig",
    "SecretStr",
    "StackConfig",
    "StackConfigError",
    "Taint",
    "VolcengineAccess",
    "load",
    "load_pulumi_yaml",
    "parse_bool",
    "project_defaults",
    "pulumi_yaml_config",
    "raw_from_stack_file",
    "read",
    "render_configuration_doc",
    "render_pulumi_yaml",
]
