"""The whole program: read the config, wire the components, export the results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_volcengine as volcengine
from vke_gpu_dra_core import facts, pool_gpus
from vke_gpu_dra_core.config import IMPLEMENTATION_PYTHON, StackConfig, Taint

from . import config as config_mod
from . import manifests
from .cluster import ExistingCluster, VkeCluster
from .device_classes import DeviceClasses
from .driver import DraDriver, chart_creates_device_classes
from .driver_image import DriverImage
from .network import Network
from .node_pool import GpuNodePool
from .workload import SampleWorkload


def verify_commands(cfg: StackConfig) -> list[str]:
    """The procedure's checks (step 3 and "Validating results") as kubectl commands."""
    ns = facts.DRIVER_NAMESPACE
    dra_nodes = f"-l {facts.LABEL_GPU_SCHEDULE}={facts.LABEL_GPU_SCHEDULE_DRA}"
    commands = [
        "kubectl api-resources | grep resource.k8s.io",
        f"kubectl get pods -n {ns} -o wide",
        "kubectl get deviceclass,resourceslice",
        "kubectl get resourceslice -o yaml",
        f"kubectl get nodes {dra_nodes} "
        "-o custom-columns=NAME:.metadata.name,RUNTIME:.status.nodeInfo.containerRuntimeVersion",
        f"for n in $(kubectl get nodes {dra_nodes} -o name); do "
        "kubectl describe $n | grep -E 'nvidia\\.com/gpu|Capacity|Allocatable'; done",
    ]
    if cfg.sample.enabled:
        sns = cfg.sample.namespace
        commands += [
            f"kubectl get resourceclaimtemplates -n {sns}",
            f"kubectl get pods -n {sns} -o wide",
            f"kubectl get resourceclaims -n {sns}",
            f"kubectl describe resourceclaims -n {sns}",
            f"kubectl logs deployment/{manifests.SAMPLE_DEPLOYMENT} -n {sns} --all-pods=true",
        ]
        if _classic_sample(cfg):
            commands.append(
                f"kubectl logs deployment/{manifests.SAMPLE_CLASSIC_DEPLOYMENT} -n {sns} --all-pods=true"
            )
    return commands


def _volcengine_provider(cfg: StackConfig) -> pulumi.ProviderResource:
    access = cfg.volcengine
    assert access is not None  # load() guarantees it for target=vke
    secret = config_mod.secret
    return volcengine.Provider(
        "volcengine",
        region=access.region,
        endpoint=access.endpoint or None,
        access_key=secret(access.access_key),
        secret_key=secret(access.secret_key),
        session_token=secret(access.session_token),
    )


@dataclass(frozen=True)
class _Target:
    """The cluster the driver goes into: its Kubernetes provider and what the driver waits for."""

    provider: k8s.Provider
    #: The GPU node pool, its runtime pin and the readiness gate (empty for an existing cluster).
    gate: list[pulumi.Resource]
    #: The driver image this stack builds (the Python driver with `driver.registry`/`driver.image` set).
    image: DriverImage | None
    #: The cluster's own outputs (`clusterId`, `nodePoolId`, `kubeconfig` for a new VKE cluster).
    exports: dict[str, Any]
    #: The GPU nodes' taints, which the driver and the sample tolerate (none for an existing cluster).
    taints: tuple[Taint, ...] = ()


def _builds_image(cfg: StackConfig) -> bool:
    return cfg.driver.implementation == IMPLEMENTATION_PYTHON and cfg.driver_image is not None


def _vke_cluster(cfg: StackConfig) -> _Target:
    """A new VKE cluster: network, cluster, GPU node pool with its containerd pin, and the driver image."""
    volc = _volcengine_provider(cfg)
    volc_opts = pulumi.ResourceOptions(providers=[volc])
    network = Network(
        "network",
        cfg.network,
        name_prefix=cfg.name_prefix,
        extra_ingress_cidrs=cfg.cluster.pod_cidrs if cfg.cluster.pod_network_mode == "Flannel" else (),
        opts=volc_opts,
    )
    cluster = VkeCluster(
        "vke",
        cfg.cluster,
        vpc_id=network.vpc_id,
        subnet_ids=network.subnet_ids,
        volcengine_provider=volc,
        protect=cfg.production,
        opts=volc_opts,
    )
    assert cfg.volcengine is not None
    pool = GpuNodePool(
        "gpu",
        cfg.node_pool,
        cluster_id=cluster.cluster_id,
        subnet_ids=network.subnet_ids,
        security_group_id=network.security_group_id,
        kubeconfig=cluster.kubeconfig,
        access=cfg.volcengine,
        protect=cfg.production,
        opts=volc_opts,
    )
    gate: list[pulumi.Resource] = [pool.node_pool, pool.runtime, pool.ready]
    image = None
    if _builds_image(cfg):
        assert cfg.driver_image is not None
        image = DriverImage(
            "driver-image",
            cfg.driver_image,
            region=cfg.volcengine.region,
            volcengine_provider=volc,
            cluster_id=cluster.cluster_id,
            addon_depends_on=gate,
        )
    return _Target(
        provider=cluster.provider,
        gate=gate,
        image=image,
        exports={
            "clusterId": cluster.cluster_id,
            "nodePoolId": pool.node_pool_id,
            "kubeconfig": cluster.kubeconfig,
        },
        taints=cfg.node_pool.taints,
    )


def _existing_cluster(cfg: StackConfig) -> _Target:
    """A cluster this stack does not create (its kubeconfig), and the driver image for it."""
    provider = ExistingCluster(
        "existing",
        kubeconfig=cfg.kubeconfig,
        kubeconfig_path=cfg.kubeconfig_path,
        context=cfg.kubeconfig_context,
    ).provider
    image = None
    if _builds_image(cfg):
        assert cfg.driver_image is not None
        image = DriverImage("driver-image", cfg.driver_image)
    return _Target(provider=provider, gate=[], image=image, exports={})


def _dra_driver(cfg: StackConfig, target: _Target) -> DraDriver:
    """The driver's namespace and Helm release, after the GPU nodes are ready."""
    return DraDriver(
        "dra-driver",
        cfg.driver,
        provider=target.provider,
        taints=target.taints,
        image=target.image.chart if target.image is not None else None,
        depends_on=target.gate,
    )


def _device_classes(cfg: StackConfig, target: _Target) -> list[pulumi.Resource]:
    """The DeviceClasses, unless the driver's chart renders them itself ([] then)."""
    if chart_creates_device_classes(cfg.driver):
        return []
    return [
        DeviceClasses(
            "device-classes",
            provider=target.provider,
            extended_resource=cfg.gpu_extended_resource,
            depends_on=target.gate,
        )
    ]


def _sample_workload(
    cfg: StackConfig, target: _Target, after_driver: list[pulumi.Resource]
) -> dict[str, Any]:
    """The sample ResourceClaimTemplate and Deployment, after the driver; returns the `sample` export."""
    sample = SampleWorkload(
        "sample",
        cfg.sample,
        provider=target.provider,
        taints=target.taints,
        classic=_classic_sample(cfg),
        depends_on=after_driver,
    )
    exports: dict[str, Any] = {
        "namespace": sample.namespace,
        "resourceClaimTemplate": sample.claim_template_name,
        "deployment": sample.deployment_name,
    }
    if sample.classic_deployment_name is not None:
        exports["classicDeployment"] = sample.classic_deployment_name
    skipped = pool_gpus.classic_sample(cfg).skipped
    if skipped:
        exports["classicDeploymentSkipped"] = skipped
        pulumi.log.info(skipped)
    return exports


def _classic_sample(cfg: StackConfig) -> bool:
    """Whether the sample's classic Deployment runs (`pool_gpus.classic_sample`)."""
    return pool_gpus.classic_sample(cfg).deployed


def build(cfg: StackConfig | None = None) -> dict[str, Any]:
    """Register every resource of the stack and export its outputs; returns the exports."""
    cfg = cfg if cfg is not None else config_mod.load()
    target = _vke_cluster(cfg) if cfg.provisions_vke else _existing_cluster(cfg)
    driver = _dra_driver(cfg, target)
    after_driver: list[pulumi.Resource] = [driver.release, *_device_classes(cfg, target)]
    exports: dict[str, Any] = {
        **target.exports,
        "driverNamespace": driver.namespace,
        "driverImplementation": cfg.driver.implementation,
        **({"driverImage": target.image.reference} if target.image is not None else {}),
        "deviceClassNames": [spec.name for spec in facts.DEVICE_CLASSES],
    }
    if cfg.sample.enabled:
        exports["sample"] = _sample_workload(cfg, target, after_driver)
    exports["verifyCommands"] = verify_commands(cfg)
    for key, value in exports.items():
        pulumi.export(key, value)
    return exports


def main() -> None:
    """Entry point of __main__.py: a configuration error is reported as one message, not a traceback."""
    try:
        cfg = config_mod.load()
    except config_mod.StackConfigError as error:
        pulumi.log.error(str(error))
        raise SystemExit(1) from None
    build(cfg)
