"""`GpuNodePool`: the GPU node pool, its containerd pin and the node readiness gate."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Final

import pulumi
from pulumi_volcengine import vke
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.config import NodePoolConfig, VolcengineAccess

from .readiness import NodeReadinessGate
from .runtime import NodePoolRuntime

#: Label the program adds to the pool's nodes so the readiness gate selects exactly this pool.
POOL_LABEL_KEY: Final = "vke-gpu-dra/node-pool"

#: The pool is created empty; NodePoolRuntime scales it once the runtime is pinned. Later
#: changes of min/desired/max go through NodePoolRuntime, so the NodePool ignores all three: the
#: Terraform provider sends the whole autoScaling block (min/desired as created, 0) whenever one
#: of its fields changes, which would empty the pool.
SCALED_BY_RUNTIME: Final = [
    "autoScaling.minReplicas",
    "autoScaling.desiredReplicas",
    "autoScaling.maxReplicas",
]


def node_selector(pool_name: str) -> str:
    """Label selector of the pool's nodes: the DRA label and the pool label."""
    return f"{facts.LABEL_GPU_SCHEDULE}={facts.LABEL_GPU_SCHEDULE_DRA},{POOL_LABEL_KEY}={pool_name}"


def encode_password(password: str) -> str:
    """The VKE API takes the node login password base64-encoded."""
    return base64.b64encode(password.encode("utf-8")).decode("ascii")


class GpuNodePool(pulumi.ComponentResource):
    """A VKE node pool of GPU instances labelled for DRA, pinned to containerd 2.1+, waited for.

    Children: `vke.NodePool` (labels from facts.REQUIRED_NODE_LABELS plus user labels and taints,
    `cordon: false`, created with 0 nodes), `NodePoolRuntime` (pins `KubernetesConfig.Runtime`
    through the VKE OpenAPI, then scales to min/desired/max) and `NodeReadinessGate` (waits for the
    nodes to be Ready with containerd 2.1+). Depend on `ready` to run after all three.
    """

    node_pool_id: pulumi.Output[str]
    node_pool: vke.NodePool
    runtime: NodePoolRuntime
    ready: NodeReadinessGate

    def __init__(
        self,
        name: str,
        cfg: NodePoolConfig,
        *,
        cluster_id: pulumi.Input[str],
        subnet_ids: pulumi.Input[Sequence[str]],
        security_group_id: pulumi.Input[str],
        kubeconfig: pulumi.Input[str],
        access: VolcengineAccess,
        protect: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("vke-gpu-dra:index:GpuNodePool", name, None, opts)
        if cfg.password is not None:
            login = vke.NodePoolNodeConfigSecurityLoginArgs(
                password=pulumi.Output.secret(encode_password(cfg.password.reveal()))
            )
        else:
            login = vke.NodePoolNodeConfigSecurityLoginArgs(ssh_key_pair_name=cfg.key_pair_name)
        data_volumes = (
            [vke.NodePoolNodeConfigDataVolumeArgs(type=cfg.data_volume_type, size=cfg.data_volume_size)]
            if cfg.data_volume_size
            else None
        )
        labels = [vke.NodePoolKubernetesConfigLabelArgs(key=lb.key, value=lb.value) for lb in cfg.all_labels]
        labels.append(vke.NodePoolKubernetesConfigLabelArgs(key=POOL_LABEL_KEY, value=cfg.name))
        pool = vke.NodePool(
            f"{name}-pool",
            name=cfg.name,
            cluster_id=cluster_id,
            node_config=vke.NodePoolNodeConfigArgs(
                instance_type_ids=list(cfg.instance_types),
                subnet_ids=subnet_ids,
                security=vke.NodePoolNodeConfigSecurityArgs(
                    security_group_ids=[security_group_id], login=login
                ),
                image_id=cfg.image_id or None,
                instance_charge_type=cfg.instance_charge_type,
                system_volume=vke.NodePoolNodeConfigSystemVolumeArgs(
                    type=cfg.system_volume_type, size=cfg.system_volume_size
                ),
                data_volumes=data_volumes,
                additional_container_storage_enabled=bool(cfg.data_volume_size),
                hpc_cluster_ids=[cfg.hpc_cluster_id] if cfg.hpc_cluster_id else None,
            ),
            kubernetes_config=vke.NodePoolKubernetesConfigArgs(
                cordon=False,
                labels=labels,
                taints=[
                    vke.NodePoolKubernetesConfigTaintArgs(key=t.key, value=t.value, effect=t.effect)
                    for t in cfg.taints
                ],
            ),
            auto_scaling=vke.NodePoolAutoScalingArgs(
                enabled=True, min_replicas=0, desired_replicas=0, max_replicas=cfg.max_replicas
            ),
            opts=pulumi.ResourceOptions(parent=self, protect=protect, ignore_changes=list(SCALED_BY_RUNTIME)),
        )
        secret = ["access_key", "secret_key", "session_token"]
        runtime = NodePoolRuntime(
            f"{name}-runtime",
            cluster_id=cluster_id,
            node_pool_id=pool.id,
            runtime_version=cfg.containerd_version,
            min_replicas=cfg.min_replicas,
            max_replicas=cfg.max_replicas,
            desired_replicas=cfg.desired_replicas,
            region=access.region,
            endpoint=access.endpoint,
            access_key=access.access_key.reveal() if access.access_key else None,
            secret_key=access.secret_key.reveal() if access.secret_key else None,
            session_token=access.session_token.reveal() if access.session_token else None,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[pool], additional_secret_outputs=secret),
        )
        gate = NodeReadinessGate(
            f"{name}-ready",
            kubeconfig=kubeconfig,
            node_pool_id=pool.id,
            label_selector=node_selector(cfg.name),
            expected_nodes=cfg.desired_replicas,
            timeout_seconds=cfg.readiness_timeout_minutes * 60,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[runtime], additional_secret_outputs=["kubeconfig"]
            ),
        )
        self.node_pool = pool
        self.runtime = runtime
        self.ready = gate
        self.node_pool_id = pool.id
        self.register_outputs({"nodePoolId": self.node_pool_id, "nodes": gate.nodes})
