"""The whole program: read the config, wire the components, export the results."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_volcengine as volcengine
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.config import IMPLEMENTATION_PYTHON, StackConfig

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


def build(cfg: StackConfig | None = None) -> dict[str, Any]:
    """Register every resource of the stack and export its outputs; returns the exports."""
    cfg = cfg if cfg is not None else config_mod.load()
    exports: dict[str, Any] = {}
    gate: list[pulumi.Resource] = []
    provider: k8s.Provider
    taints = cfg.node_pool.taints if cfg.provisions_vke else ()
    python_driver = cfg.driver.implementation == IMPLEMENTATION_PYTHON
    image_cfg = cfg.driver_image
    image: DriverImage | None = None

    if cfg.provisions_vke:
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
        provider = cluster.provider
        gate = [pool.node_pool, pool.runtime, pool.ready]
        if python_driver and image_cfg is not None:
            image = DriverImage(
                "driver-image",
                image_cfg,
                region=cfg.volcengine.region,
                volcengine_provider=volc,
                cluster_id=cluster.cluster_id,
                addon_depends_on=gate,
            )
        exports.update(
            clusterId=cluster.cluster_id,
            nodePoolId=pool.node_pool_id,
            kubeconfig=cluster.kubeconfig,
        )
    else:
        provider = ExistingCluster(
            "existing",
            kubeconfig=cfg.kubeconfig,
            kubeconfig_path=cfg.kubeconfig_path,
            context=cfg.kubeconfig_context,
        ).provider
        if python_driver and image_cfg is not None:
            image = DriverImage("driver-image", image_cfg)

    driver = DraDriver(
        "dra-driver",
        cfg.driver,
        provider=provider,
        taints=taints,
        image=image.chart if image is not None else None,
        depends_on=gate,
    )
    after_driver: list[pulumi.Resource] = [driver.release]
    if not chart_creates_device_classes(cfg.driver):
        classes = DeviceClasses("device-classes", provider=provider, depends_on=gate)
        after_driver.append(classes)
    exports.update(
        driverNamespace=driver.namespace,
        driverImplementation=cfg.driver.implementation,
        **({"driverImage": image.reference} if image is not None else {}),
        deviceClassNames=[spec.name for spec in facts.DEVICE_CLASSES],
    )
    if cfg.sample.enabled:
        sample = SampleWorkload(
            "sample", cfg.sample, provider=provider, taints=taints, depends_on=after_driver
        )
        exports["sample"] = {
            "namespace": sample.namespace,
            "resourceClaimTemplate": sample.claim_template_name,
            "deployment": sample.deployment_name,
        }
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
