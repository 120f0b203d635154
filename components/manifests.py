"""Kubernetes objects of the program as plain API JSON (pure functions, no Pulumi).

The components register exactly these objects, so the same dicts serve the resources and the
schema tests. Names of the sample come from the procedure's "Validating results" section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.config import SampleConfig, Taint

SAMPLE_CLAIM_TEMPLATE: Final = facts.SAMPLE_CLAIM_TEMPLATE
SAMPLE_DEPLOYMENT: Final = facts.SAMPLE_DEPLOYMENT
#: The sample's second Deployment, written the classic way (`resources.limits: nvidia.com/gpu: 1`, no claim):
#: on clusters where gpu.nvidia.com maps nvidia.com/gpu, the scheduler makes its claim.
SAMPLE_CLASSIC_DEPLOYMENT: Final = facts.SAMPLE_CLASSIC_DEPLOYMENT
SAMPLE_CLASSIC_APP_LABEL: Final = {"app": SAMPLE_CLASSIC_DEPLOYMENT}
SAMPLE_CONTAINER: Final = "test"
SAMPLE_REQUEST: Final = "gpu"
SAMPLE_APP_LABEL: Final = {"app": SAMPLE_DEPLOYMENT}

#: The kubelet plugin mounts host paths and talks to the kubelet: its namespace must allow it.
DRIVER_NAMESPACE_LABELS: Final = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "app.kubernetes.io/part-of": "vke-gpu-dra",
}


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def driver_namespace() -> dict[str, Any]:
    return namespace(facts.DRIVER_NAMESPACE, DRIVER_NAMESPACE_LABELS)


def device_classes(extended_resource: bool = False) -> list[dict[str, Any]]:
    """gpu.nvidia.com and mig.nvidia.com, as defined by the shared facts; with `extended_resource`
    gpu.nvidia.com maps nvidia.com/gpu (`spec.extendedResourceName`)."""
    return [spec.manifest(extended_resource=extended_resource) for spec in facts.DEVICE_CLASSES]


def tolerations(taints: Sequence[Taint]) -> list[dict[str, str]]:
    """Tolerations matching the node pool's taints (for the kubelet plugin and the sample)."""
    result = []
    for t in taints:
        tol = {"key": t.key, "effect": t.effect}
        if t.value:
            tol.update(operator="Equal", value=t.value)
        else:
            tol["operator"] = "Exists"
        result.append(tol)
    return result


def resource_claim_template(ns: str) -> dict[str, Any]:
    """The procedure's ResourceClaimTemplate: exactly one device of class gpu.nvidia.com."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": SAMPLE_CLAIM_TEMPLATE, "namespace": ns},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": SAMPLE_REQUEST,
                            "exactly": {
                                "deviceClassName": facts.DEVICE_CLASS_GPU.name,
                                "allocationMode": "ExactCount",
                                "count": 1,
                            },
                        }
                    ]
                }
            }
        },
    }


def deployment(sample: SampleConfig, taints: Sequence[Taint] = ()) -> dict[str, Any]:
    """The procedure's Deployment gpu-test: one pod whose container claims the template's GPU."""
    return _sample_deployment(
        sample,
        taints,
        name=SAMPLE_DEPLOYMENT,
        labels=SAMPLE_APP_LABEL,
        resources={"claims": [{"name": SAMPLE_REQUEST}]},
        claims=[{"name": SAMPLE_REQUEST, "resourceClaimTemplateName": SAMPLE_CLAIM_TEMPLATE}],
    )


def classic_deployment(sample: SampleConfig, taints: Sequence[Taint] = ()) -> dict[str, Any]:
    """Deployment gpu-test-classic: the sample's pod written for the device plugin, `nvidia.com/gpu: 1` in
    `resources.limits` (requests default to limits) and no claim."""
    return _sample_deployment(
        sample,
        taints,
        name=SAMPLE_CLASSIC_DEPLOYMENT,
        labels=SAMPLE_CLASSIC_APP_LABEL,
        resources={"limits": {facts.GPU_EXTENDED_RESOURCE: "1"}},
        claims=None,
    )


def _sample_deployment(
    sample: SampleConfig,
    taints: Sequence[Taint],
    *,
    name: str,
    labels: Mapping[str, str],
    resources: dict[str, Any],
    claims: list[dict[str, str]] | None,
) -> dict[str, Any]:
    """One replica of the sample's container (image, command, args) with `resources`, and the pod's
    `claims` when it has any; tolerations for the GPU pool's `taints`."""
    container: dict[str, Any] = {
        "name": SAMPLE_CONTAINER,
        "image": sample.image,
        "command": list(sample.command),
        "resources": resources,
    }
    if sample.args:
        container["args"] = list(sample.args)
    pod_spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 3}
    if claims is not None:
        pod_spec["resourceClaims"] = claims
    tols = tolerations(taints)
    if tols:
        pod_spec["tolerations"] = tols
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": sample.namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def any_node_affinity() -> dict[str, Any]:
    """A required node affinity every node meets (kubelet labels each node with kubernetes.io/os).

    It opens this repository's kubelet plugin to every node explicitly (Helm replaces the chart's
    default list with it), rather than leaving the DaemonSet without any affinity.
    """
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "Exists"}]}
                ]
            }
        }
    }


def dra_node_affinity() -> dict[str, Any]:
    """The procedure's kubelet-plugin affinity: vke.node.gpu.schedule In [nvidia-dra], one term."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": facts.LABEL_GPU_SCHEDULE,
                                "operator": "In",
                                "values": [facts.LABEL_GPU_SCHEDULE_DRA],
                            }
                        ]
                    }
                ]
            }
        }
    }
