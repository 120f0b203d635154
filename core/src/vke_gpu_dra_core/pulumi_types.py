"""Pulumi type tokens of the resources a vke-gpu-dra stack registers, and where a workload's pod spec sits.

The policy pack and the capacity planner read a stack's resources by these tokens, and the program's
tests look its resources up by them (pulumi-volcengine 0.0.47, pulumi-kubernetes 4.34, and the
program's own dynamic resources, which Pulumi names `pulumi-python:dynamic/<module>:<name>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

# --- Volcengine (pulumi-volcengine) ---
CLUSTER: Final = "volcengine:vke/cluster:Cluster"
NODE_POOL: Final = "volcengine:vke/nodePool:NodePool"
ADDON: Final = "volcengine:vke/addon:Addon"
KUBECONFIG: Final = "volcengine:vke/kubeconfig:Kubeconfig"
SECURITY_GROUP_RULE: Final = "volcengine:vpc/securityGroupRule:SecurityGroupRule"

# --- Pulumi itself ---
K8S_PROVIDER: Final = "pulumi:providers:kubernetes"
#: The Kubernetes provider plugin the program asks for (its providers' `version`), rather than the
#: SDK's own 4.34.2: release v4.25.0 is what the Go module proxy serves of the provider, so the
#: toolchain builds it and scripts/setup installs it offline (toolchain/pulumi-kubernetes/build.toml's
#: `release`); online the CLI downloads the same release. The SDK's types are a superset the provider
#: handles (later API groups, resource.k8s.io/v1 included, through discovery); one version everywhere
#: means no "expected to have version" warning and a plugin cache that names what it holds.
KUBERNETES_PROVIDER_VERSION: Final = "4.25.0"
STACK: Final = "pulumi:pulumi:Stack"

# --- Kubernetes (pulumi-kubernetes: kubernetes:<group>/<version>:<Kind>, core/v1 for the core group) ---
KUBERNETES_PREFIX: Final = "kubernetes:"
RESOURCE_GROUP_PREFIX: Final = "kubernetes:resource.k8s.io/"
DEVICE_CLASS: Final = "kubernetes:resource.k8s.io/v1:DeviceClass"
RESOURCE_CLAIM_TEMPLATE: Final = "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate"
RESOURCE_CLAIM: Final = "kubernetes:resource.k8s.io/v1:ResourceClaim"
NAMESPACE: Final = "kubernetes:core/v1:Namespace"
HELM_RELEASE: Final = "kubernetes:helm.sh/v3:Release"
HELM_CHART_V3: Final = "kubernetes:helm.sh/v3:Chart"
HELM_CHART_V4: Final = "kubernetes:helm.sh/v4:Chart"
HELM_TYPES: Final = (HELM_RELEASE, HELM_CHART_V3, HELM_CHART_V4)

# --- the program's dynamic resources (components/runtime.py, components/readiness.py) ---
DYNAMIC_PREFIX: Final = "pulumi-python:dynamic"
NODE_POOL_RUNTIME_NAME: Final = "NodePoolRuntime"
NODE_POOL_RUNTIME: Final = f"{DYNAMIC_PREFIX}/vke:{NODE_POOL_RUNTIME_NAME}"
NODE_READINESS_GATE: Final = f"{DYNAMIC_PREFIX}/vke:NodeReadinessGate"

# --- workloads: their tokens and where their pod spec sits ---
POD: Final = "kubernetes:core/v1:Pod"
DEPLOYMENT: Final = "kubernetes:apps/v1:Deployment"
STATEFUL_SET: Final = "kubernetes:apps/v1:StatefulSet"
DAEMON_SET: Final = "kubernetes:apps/v1:DaemonSet"
REPLICA_SET: Final = "kubernetes:apps/v1:ReplicaSet"
JOB: Final = "kubernetes:batch/v1:Job"
CRON_JOB: Final = "kubernetes:batch/v1:CronJob"

#: Job token -> the path of its Job spec (parallelism, completions) in the object.
JOB_SPEC_PATHS: Final[Mapping[str, tuple[str, ...]]] = {
    JOB: ("spec",),
    CRON_JOB: ("spec", "jobTemplate", "spec"),
}
_POD_TEMPLATE: Final = ("template", "spec")
_TEMPLATE_POD_SPEC: Final = ("spec", *_POD_TEMPLATE)

#: Workload token -> the path of its pod spec in the object.
POD_SPEC_PATHS: Final[Mapping[str, tuple[str, ...]]] = {
    POD: ("spec",),
    DEPLOYMENT: _TEMPLATE_POD_SPEC,
    STATEFUL_SET: _TEMPLATE_POD_SPEC,
    DAEMON_SET: _TEMPLATE_POD_SPEC,
    REPLICA_SET: _TEMPLATE_POD_SPEC,
    JOB: (*JOB_SPEC_PATHS[JOB], *_POD_TEMPLATE),
    CRON_JOB: (*JOB_SPEC_PATHS[CRON_JOB], *_POD_TEMPLATE),
}


def kind_of(token: str) -> str:
    """The last part of a type token: `Deployment` of `kubernetes:apps/v1:Deployment`."""
    return token.rsplit(":", 1)[-1]


#: Workload kind (as a manifest writes it) -> the path of its pod spec in the object.
POD_SPEC_PATHS_BY_KIND: Final[Mapping[str, tuple[str, ...]]] = {
    kind_of(token): path for token, path in POD_SPEC_PATHS.items()
}
WORKLOAD_KINDS: Final = tuple(POD_SPEC_PATHS_BY_KIND)
#: Job kind (as a manifest writes it) -> the path of its Job spec in the object.
JOB_SPEC_PATHS_BY_KIND: Final[Mapping[str, tuple[str, ...]]] = {
    kind_of(token): path for token, path in JOB_SPEC_PATHS.items()
}


def is_node_pool_runtime(token: str) -> bool:
    """The program's dynamic resource that pins a node pool's container runtime (any module name)."""
    return token.startswith(DYNAMIC_PREFIX) and token.endswith(NODE_POOL_RUNTIME_NAME)


def kubernetes_api_version_kind(token: str) -> tuple[str, str]:
    """apiVersion and kind of a `kubernetes:<group>/<version>:<Kind>` token (`v1` for core/v1)."""
    _, _, rest = token.partition(":")
    api_version, _, kind = rest.rpartition(":")
    return api_version.removeprefix("core/"), kind
