"""The policy pack: its name, its version, and the table of its policies.

One row per policy: its name (`vke_gpu_dra_core.policy_names`), what it guards (the description the
CLI shows), its enforcement level and severity, its config schema, and the check (`checks/`) it runs.
policy/README.md has one row per policy with the same level. The analyzer server is server.py; how a
row becomes a pulumi_policy policy is binding.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pulumi_policy import EnforcementLevel, Policy, PolicyConfigSchema, Severity
from vke_gpu_dra_core import policy_names as names
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r
from vke_gpu_dra_core.catalog import CatalogError, GpuTypes, gpu_types

from . import binding, context
from .binding import ResourceRow, Row, StackRow
from .checks import (
    Violation,
    capacity,
    claims,
    cluster,
    conflicts,
    deviceclasses,
    driver,
    extended_resource,
    image,
    nodepools,
    protection,
    secrets,
    sharing,
)
from .context import Run, StackInfo

PACK_NAME: Final = "vke-gpu-dra"
PACK_VERSION: Final = "0.1.0"
PACK_DESCRIPTION: Final = "GPU DRA on VKE: the procedure's requirements as policies."

MANDATORY, ADVISORY = EnforcementLevel.MANDATORY, EnforcementLevel.ADVISORY
#: The level of a policy that names none (every row names its own).
DEFAULT_LEVEL: Final = ADVISORY


def _config_list(config: Mapping[str, Any], key: str) -> list[str]:
    value = config.get(key)
    return [str(v) for v in value] if isinstance(value, list) else []


# --- the policies ---

_EXTRA_TYPES = PolicyConfigSchema(
    {
        "extraGpuInstanceTypes": {
            "type": "array",
            "items": {"type": "string"},
            "description": "More GPU instance types: exact ids (ecs.x.2xlarge) or families (ecs.x, ecs.x.*).",
        }
    }
)
_ADDONS = PolicyConfigSchema(
    {
        "forbiddenAddons": {
            "type": "array",
            "items": {"type": "string"},
            "description": "VKE add-ons scheduling GPUs without DRA (default: nvidia-device-plugin, mgpu).",
        }
    }
)
_PRODUCTION = PolicyConfigSchema(
    {
        "production": {
            "type": "boolean",
            "description": "Treat the stack as production (default: stack config <project>:production).",
        }
    }
)


def _gpu_types(config: Mapping[str, Any], stack: StackInfo) -> GpuTypes:
    """The GPU catalog's rows and families, the stack config's rows and the policy config's extra types."""
    extra = _config_list(config, "extraGpuInstanceTypes")
    try:
        return gpu_types(extra, config_value=stack.config_value("gpuInstanceTypes"))
    except CatalogError:  # a bad stack config row: gpu-claims-fit-node-pools names it
        return gpu_types(extra)


def _forbidden_addons(config: Mapping[str, Any]) -> list[str]:
    return _config_list(config, "forbiddenAddons") or list(conflicts.DEFAULT_FORBIDDEN_ADDONS)


def _claims(resources: list[r.Res], _config: Mapping[str, Any], _stack: StackInfo) -> list[Violation]:
    return claims.template_classes(resources) + claims.pod_claims(resources)


def _secrets(resources: list[r.Res], _config: Mapping[str, Any], _stack: StackInfo) -> list[Violation]:
    return secrets.secret_props(resources) + secrets.plaintext_outputs(resources)


def _protection(res: r.Res, config: Mapping[str, Any], stack: StackInfo) -> list[Violation]:
    production = context.production(config, stack)
    stack_sets_it = context.stack_marks_production(stack)
    return protection.protected(res, production.value, production.problem, stack_sets_it, stack.stack)


def _api_server(res: r.Res, _config: Mapping[str, Any], _stack: StackInfo) -> list[Violation]:
    if res.type == pt.CLUSTER:
        return cluster.api_server_public(res)
    return cluster.open_api_server_rules([res])


TABLE: Final[tuple[Row, ...]] = (
    ResourceRow(
        names.KUBERNETES_VERSION,
        "The VKE cluster runs a Kubernetes line VKE documents for DRA (1.34 or later: resource.k8s.io/v1), "
        "or one the stack forces.",
        (pt.CLUSTER,),
        lambda res, _c, s: cluster.kubernetes_version(res, context.forces_kubernetes_version(s)),
        severity=Severity.CRITICAL,
    ),
    ResourceRow(
        names.KUBERNETES_VERSION_FORCED,
        "The VKE cluster's Kubernetes line is not forced past VKE's docs (cluster.forceKubernetesVersion).",
        (pt.CLUSTER,),
        lambda res, _c, s: cluster.kubernetes_version_forced(res, context.forces_kubernetes_version(s)),
        level=ADVISORY,
        severity=Severity.MEDIUM,
    ),
    ResourceRow(
        names.NODE_POOL_LABELS,
        "GPU node pools carry vke.node.gpu.schedule=nvidia-dra and nvidia.com/gpu.present=true.",
        (pt.NODE_POOL,),
        lambda res, c, s: nodepools.labels(res, _gpu_types(c, s)),
        config_schema=_EXTRA_TYPES,
    ),
    ResourceRow(
        names.NODE_POOL_INSTANCE_TYPES,
        "DRA GPU node pools use GPU instance types.",
        (pt.NODE_POOL,),
        lambda res, c, s: nodepools.gpu_instance_types(res, _gpu_types(c, s)),
        config_schema=_EXTRA_TYPES,
    ),
    StackRow(
        names.NODE_POOL_RUNTIME,
        "DRA GPU node pools are pinned to containerd 2.1 or later.",
        lambda res, c, s: nodepools.runtimes(res, _gpu_types(c, s)),
        config_schema=_EXTRA_TYPES,
    ),
    StackRow(
        names.NO_DEVICE_PLUGIN,
        "No NVIDIA device-plugin or mGPU scheduling in a cluster where DRA is on (the procedure's usage "
        "limits).",
        lambda res, c, _s: conflicts.device_plugin_beside_dra(res, _forbidden_addons(c)),
        config_schema=_ADDONS,
    ),
    StackRow(
        names.NO_DEVICE_PLUGIN_ON_DRA_NODES,
        "No NVIDIA device plugin of the stack (Helm release, DaemonSet) on the DRA GPU nodes: it would "
        "advertise nvidia.com/gpu beside DRA, which gpu.nvidia.com may map too (KEP-5004).",
        lambda res, _c, _s: extended_resource.device_plugin_on_dra_nodes(res),
    ),
    StackRow(
        names.DRIVER_VALUES,
        "The DRA driver's kubelet plugin runs on DRA nodes only; NVIDIA's chart gets the procedure's values.",
        lambda res, _c, _s: driver.driver_values(res),
    ),
    StackRow(
        names.DEVICE_CLASSES,
        "DeviceClasses gpu.nvidia.com and mig.nvidia.com exist and their CEL selects the right devices.",
        lambda res, _c, _s: deviceclasses.device_classes(res),
    ),
    StackRow(
        names.CLAIM_REFERENCES,
        "Claim templates name DeviceClasses of the stack; pod claims name templates of the stack.",
        _claims,
    ),
    StackRow(
        names.SECRETS,
        "Kubeconfigs and passwords are secret in the state; no output holds a plaintext secret.",
        _secrets,
        severity=Severity.CRITICAL,
    ),
    ResourceRow(
        names.PRODUCTION_PROTECTION,
        "Production stacks protect the cluster and its node pools.",
        tuple(protection.PROTECTED_TYPES),
        _protection,
        config_schema=_PRODUCTION,
    ),
    ResourceRow(
        names.API_SERVER_PUBLIC_ACCESS,
        "The API server is not open to 0.0.0.0/0.",
        (pt.CLUSTER, pt.SECURITY_GROUP_RULE),
        _api_server,
        level=ADVISORY,
        severity=Severity.MEDIUM,
    ),
    ResourceRow(
        names.NODE_POOL_AUTO_SCALING,
        "Node pools bound their size with auto-scaling limits.",
        (pt.NODE_POOL,),
        lambda res, _c, _s: nodepools.auto_scaling_bounds(res),
        level=ADVISORY,
        severity=Severity.LOW,
    ),
    StackRow(names.CAPACITY, capacity.DESCRIPTION, capacity.claims_fit),
    StackRow(
        names.DRIVER_IMAGE_REGISTRY,
        "The driver image comes from a registry the nodes can pull from (no placeholder domain).",
        lambda res, _c, _s: image.registry_reachable(res),
    ),
    StackRow(
        names.DRIVER_IMAGE_DIGEST,
        "Production stacks run the driver image pinned by digest.",
        lambda res, c, s: image.pinned_by_digest(res) if context.is_production(c, s) else [],
        config_schema=_PRODUCTION,
    ),
    StackRow(
        names.DRIVER_IMAGE_DIGEST_ADVISORY,
        "Non-production stacks run the driver image pinned by digest (advisory).",
        lambda res, c, s: [] if context.is_production(c, s) else image.pinned_by_digest(res),
        level=ADVISORY,
        severity=Severity.LOW,
        config_schema=_PRODUCTION,
    ),
    StackRow(
        names.SHARING_FEATURE_GATES,
        sharing.DESCRIPTION,
        lambda res, c, _s: sharing.sharing_gates(res, c),
    ),
)


def policies(run: Run | None = None) -> list[Policy]:
    """The table as pulumi_policy policies that judge `run`; without one, their own arguments."""
    return binding.bind(TABLE, run)


#: The pack's policies outside any run: what the server publishes, and what direct calls use.
POLICIES: Final[list[Policy]] = policies()
