"""Resource sets shaped like the program's registrations, for the policy pack's tests.

`program_stack(stack, implementation)` returns what the Pulumi program registers for one example
stack (types, names, inputs in the engine's camelCase, protect, parent, dependencies, secrets as
the engine marks them on the wire). Broken variants are small mutations of these.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import yaml
from vke_gpu_dra import facts

PROJECT = "vke-gpu-dra"
SIG = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
ASSET_SIG = "c44067f5952c0a294b673a41bacd8c17"
UNKNOWN_STRING = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"

STACKS = ("dev", "prod", "local")
IMPLEMENTATIONS = ("python", "nvidia")

KUBECONFIG_TEXT = (
    "apiVersion: v1\nkind: Config\nclusters:\n- name: vke\n  cluster:\n    server: https://203.0.113.7:6443\n"
    "users:\n- name: admin\n  user:\n    client-key-data: c2VjcmV0LWtleQ==\n"
)


def secret(value: Any) -> dict[str, Any]:
    """A value as the engine sends a secret to an analyzer."""
    return {SIG: SECRET_SIG, "value": value}


def string_asset(text: str) -> dict[str, Any]:
    return {SIG: ASSET_SIG, "text": text}


@dataclass
class SimRes:
    """One registered resource (what the analyzer receives)."""

    type: str
    name: str
    props: dict[str, Any]
    protect: bool = False
    parent: str = ""
    dependencies: list[str] = field(default_factory=list)
    urn: str = ""


class Stack(list[SimRes]):
    """The resources of one stack, with lookups for the mutations of the broken-stack tests."""

    def __init__(self, name: str, resources: list[SimRes], config: dict[str, str]) -> None:
        super().__init__(resources)
        self.name = name
        self.config = config

    def one(self, type_: str, name_part: str = "") -> SimRes:
        found = [r for r in self if r.type == type_ and name_part in r.name]
        assert len(found) == 1, f"expected one {type_} {name_part!r}, found {[r.name for r in found]}"
        return found[0]

    def mutated(self, fn: Callable[[Stack], None]) -> Stack:
        clone = Stack(self.name, [replace(r, props=copy.deepcopy(r.props)) for r in self], dict(self.config))
        fn(clone)
        return clone


def _urn(stack: str, type_: str, name: str, parent_types: str = "") -> str:
    qualified = f"{parent_types}${type_}" if parent_types else type_
    return f"urn:pulumi:{stack}::{PROJECT}::{qualified}::{name}"


def _dra_affinity() -> dict[str, Any]:
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


def _release_props(implementation: str, on_all_nodes: bool) -> dict[str, Any]:
    common = {
        "name": "nvidia-dra-driver-gpu",
        "namespace": facts.DRIVER_NAMESPACE,
        "createNamespace": False,
        "timeout": 600,
        "atomic": False,
        "compat": "true",
    }
    if implementation == "nvidia":
        nulls = yaml.safe_dump({"controller": {"affinity": None}})
        return {
            **common,
            "chart": "nvidia-dra-driver-gpu",
            "version": "25.8.1",
            "repositoryOpts": {"repo": "https://helm.ngc.nvidia.com/nvidia"},
            "values": {
                "gpuResourcesEnabledOverride": True,
                "resources": {"computeDomains": {"enabled": False}},
                "kubeletPlugin": {"affinity": _dra_affinity()},
            },
            "valueYamlFiles": [string_asset(nulls)],
            "allowNullValues": True,
        }
    kubelet: dict[str, Any] = {"tolerations": []}
    extra: dict[str, Any] = {}
    if on_all_nodes:
        extra = {
            "valueYamlFiles": [string_asset(yaml.safe_dump({"kubeletPlugin": {"affinity": None}}))],
            "allowNullValues": True,
        }
    else:
        kubelet["affinity"] = _dra_affinity()
    values = {
        "image": {"pullPolicy": "IfNotPresent"},
        "imagePullSecrets": [],
        "driverName": facts.DRIVER_NAME,
        "deviceSource": {
            "type": "simulated" if on_all_nodes else "nvml",
            "simulatedGpus": 8,
            "simulatedProduct": "NVIDIA A30",
        },
        "kubeletPlugin": kubelet,
        "deviceClasses": {"enabled": False},
    }
    return {**common, "chart": "./driver/chart", "values": values, **extra}


def _vke_resources(stack: str, production: bool) -> tuple[list[SimRes], dict[str, Any]]:
    cluster_parent = "vke-gpu-dra:index:VkeCluster"
    pool_parent = "vke-gpu-dra:index:GpuNodePool"
    cluster = SimRes(
        "volcengine:vke/cluster:Cluster",
        "vke-cluster",
        {
            "name": "vke-gpu-dra",
            "kubernetesVersion": "1.34",
            "deleteProtectionEnabled": False,
            "description": "VKE cluster with GPU dynamic resource allocation",
            "clusterConfig": {
                "subnetIds": ["subnet-1"],
                "apiServerPublicAccessEnabled": True,
                "apiServerPublicAccessConfig": {
                    "publicAccessNetworkConfig": {"billingType": "PostPaidByTraffic", "bandwidth": 10}
                },
                "resourcePublicAccessDefaultEnabled": False,
            },
            "podsConfig": {
                "podNetworkMode": "VpcCniShared",
                "vpcCniConfig": {"subnetIds": ["subnet-1"], "vpcId": "vpc-1"},
            },
            "servicesConfig": {"serviceCidrsv4s": ["172.30.0.0/18"]},
        },
        protect=production,
    )
    cluster.urn = _urn(stack, cluster.type, cluster.name, cluster_parent)
    kubeconfig = SimRes(
        "volcengine:vke/kubeconfig:Kubeconfig",
        "vke-kubeconfig",
        {"clusterId": "cc-1", "type": "Public", "validDuration": 8760},
    )
    kubeconfig.urn = _urn(stack, kubeconfig.type, kubeconfig.name, cluster_parent)
    k8s = SimRes(
        "pulumi:providers:kubernetes",
        "vke-k8s",
        {"kubeconfig": secret(KUBECONFIG_TEXT), "enableServerSideApply": "true"},
    )
    k8s.urn = _urn(stack, k8s.type, k8s.name, cluster_parent)
    volc = SimRes(
        "pulumi:providers:volcengine",
        "volcengine",
        {
            "region": "cn-beijing",
            "accessKey": secret("AKLTexampleaccesskey"),
            "secretKey": secret("examplesecretkey=="),
        },
    )
    volc.urn = _urn(stack, volc.type, volc.name)
    rule = SimRes(
        "volcengine:vpc/securityGroupRule:SecurityGroupRule",
        "network-sg-vpc-all",
        {
            "securityGroupId": "sg-1",
            "direction": "ingress",
            "protocol": "all",
            "portStart": -1,
            "portEnd": -1,
            "cidrIp": "192.168.0.0/16",
            "policy": "accept",
            "priority": 1,
        },
    )
    rule.urn = _urn(stack, rule.type, rule.name, "vke-gpu-dra:index:Network")
    labels = [{"key": k, "value": v} for k, v in facts.REQUIRED_NODE_LABELS.items()]
    labels.append({"key": "vke-gpu-dra/node-pool", "value": "gpu-dra"})
    pool = SimRes(
        "volcengine:vke/nodePool:NodePool",
        "gpu-pool",
        {
            "name": "gpu-dra",
            "clusterId": "cc-1",
            "nodeConfig": {
                "instanceTypeIds": ["ecs.gni2.3xlarge"],
                "subnetIds": ["subnet-1"],
                "security": {
                    "securityGroupIds": ["sg-1"],
                    "login": {"password": secret("UzNjcjN0LVBhc3N3MHJk")},
                },
                "instanceChargeType": "PostPaid",
                "systemVolume": {"type": "ESSD_PL0", "size": 100},
                "dataVolumes": [{"type": "ESSD_PL0", "size": 200}],
                "additionalContainerStorageEnabled": True,
            },
            "kubernetesConfig": {"cordon": False, "labels": labels, "taints": []},
            "autoScaling": {"enabled": True, "minReplicas": 0, "desiredReplicas": 0, "maxReplicas": 1},
        },
        protect=production,
    )
    pool.urn = _urn(stack, pool.type, pool.name, pool_parent)
    runtime = SimRes(
        "pulumi-python:dynamic/vke:NodePoolRuntime",
        "gpu-runtime",
        {
            "cluster_id": "cc-1",
            "node_pool_id": "np-1",
            "runtime_type": "containerd",
            "runtime_version": "2.1",
            "min_replicas": 1,
            "max_replicas": 1,
            "desired_replicas": 1,
            "region": "cn-beijing",
            "endpoint": "",
            "access_key": secret("AKLTexampleaccesskey"),
            "secret_key": secret("examplesecretkey=="),
        },
        dependencies=[pool.urn],
    )
    runtime.urn = _urn(stack, runtime.type, runtime.name, pool_parent)
    gate = SimRes(
        "pulumi-python:dynamic/vke:NodeReadinessGate",
        "gpu-ready",
        {
            "kubeconfig": secret(KUBECONFIG_TEXT),
            "context": "",
            "node_pool_id": "np-1",
            "label_selector": "vke.node.gpu.schedule=nvidia-dra,vke-gpu-dra/node-pool=gpu-dra",
            "expected_nodes": 1,
            "min_containerd": "2.1",
            "timeout_seconds": 1800,
            "poll_seconds": 10,
        },
    )
    gate.urn = _urn(stack, gate.type, gate.name, pool_parent)
    outputs = {"clusterId": "cc-1", "nodePoolId": "np-1", "kubeconfig": secret(KUBECONFIG_TEXT)}
    return [volc, rule, cluster, kubeconfig, k8s, pool, runtime, gate], outputs


def _k8s_resources(stack: str, implementation: str, on_all_nodes: bool) -> list[SimRes]:
    out = []
    ns = SimRes(
        "kubernetes:core/v1:Namespace",
        "dra-driver-namespace",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": facts.DRIVER_NAMESPACE}},
    )
    release = SimRes(
        "kubernetes:helm.sh/v3:Release", "dra-driver-release", _release_props(implementation, on_all_nodes)
    )
    out += [ns, release]
    if implementation == "python":
        for dc in facts.DEVICE_CLASSES:
            m = dc.manifest()
            out.append(
                SimRes(
                    "kubernetes:resource.k8s.io/v1:DeviceClass",
                    f"device-classes-{dc.name}",
                    {
                        "apiVersion": m["apiVersion"],
                        "kind": m["kind"],
                        "metadata": m["metadata"],
                        "spec": m["spec"],
                    },
                )
            )
    rct = SimRes(
        "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate",
        "sample-claim-template",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "single-gpu", "namespace": "default"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
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
        },
    )
    deployment = SimRes(
        "kubernetes:apps/v1:Deployment",
        "sample-deployment",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "gpu-test", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "gpu-test"}},
                "template": {
                    "metadata": {"labels": {"app": "gpu-test"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "test",
                                "image": "doc-cn-beijing.cr.volces.com/vke/gpu-burn:1.0",
                                "command": ["sh"],
                                "args": ["-c", "nvidia-smi -L; sleep 600"],
                                "resources": {"claims": [{"name": "gpu"}]},
                            }
                        ],
                        "terminationGracePeriodSeconds": 3,
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
                    },
                },
            },
        },
    )
    out += [rct, deployment]
    for res in out:
        res.urn = _urn(stack, res.type, res.name)
    return out


def program_stack(stack: str, implementation: str) -> Stack:
    """The example stacks: dev and prod create a VKE cluster; local uses an existing cluster."""
    production = stack == "prod"
    config = {
        f"{PROJECT}:production": "true" if production else "false",
        f"{PROJECT}:driver.implementation": implementation,
    }
    resources: list[SimRes] = []
    outputs: dict[str, Any] = {}
    if stack == "local":
        k8s = SimRes(
            "pulumi:providers:kubernetes",
            "existing-k8s",
            {"kubeconfig": "~/.kube/config", "enableServerSideApply": "true"},
        )
        k8s.urn = _urn(stack, k8s.type, k8s.name, "vke-gpu-dra:index:ExistingCluster")
        resources.append(k8s)
        config[f"{PROJECT}:target"] = "existing-cluster"
    else:
        vke, outputs = _vke_resources(stack, production)
        resources += vke
    resources += _k8s_resources(stack, implementation, on_all_nodes=stack == "local")
    outputs.update(
        {
            "driverNamespace": facts.DRIVER_NAMESPACE,
            "driverImplementation": implementation,
            "deviceClassNames": [dc.name for dc in facts.DEVICE_CLASSES],
            "verifyCommands": ["kubectl get deviceclass,resourceslice"],
        }
    )
    root = SimRes("pulumi:pulumi:Stack", f"{PROJECT}-{stack}", outputs)
    root.urn = _urn(stack, root.type, root.name)
    return Stack(stack, [root, *resources], config)


def example_stacks() -> Iterator[tuple[str, str]]:
    for stack in STACKS:
        for implementation in IMPLEMENTATIONS:
            yield stack, implementation
