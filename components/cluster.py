"""`VkeCluster` (cluster, kubeconfig, explicit Kubernetes provider) and `ExistingCluster`."""

from __future__ import annotations

import base64
import os

import pulumi
import pulumi_kubernetes as k8s
from pulumi_volcengine import vke
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core.config import ClusterConfig, SecretStr

KUBECONFIG_PUBLIC = "Public"
KUBECONFIG_PRIVATE = "Private"


def decode_kubeconfig(encoded: str) -> str:
    """The VKE API returns kubeconfigs base64-encoded."""
    return base64.b64decode(encoded).decode("utf-8")


class VkeCluster(pulumi.ComponentResource):
    """A VKE cluster (Kubernetes 1.34+), a kubeconfig for it and a Kubernetes provider using it.

    The kubeconfig text comes from `vke.get_kubeconfigs_output` for the `vke.Kubeconfig` resource,
    base64-decoded and wrapped as a Pulumi secret; `provider` is the only way the stack talks to
    the cluster.
    """

    cluster_id: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider

    def __init__(
        self,
        name: str,
        cfg: ClusterConfig,
        *,
        vpc_id: pulumi.Input[str],
        subnet_ids: pulumi.Input[list[str]],
        volcengine_provider: pulumi.ProviderResource | None = None,
        protect: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("vke-gpu-dra:index:VkeCluster", name, None, opts)
        public_access = None
        if cfg.api_server_public_access:
            public_access = vke.ClusterClusterConfigApiServerPublicAccessConfigArgs(
                public_access_network_config=vke.ClusterClusterConfigApiServerPublicAccessConfigPublicAccessNetworkConfigArgs(
                    billing_type=cfg.api_server_billing_type,
                    bandwidth=cfg.api_server_bandwidth,
                )
            )
        if cfg.pod_network_mode == "Flannel":
            pods = vke.ClusterPodsConfigArgs(
                pod_network_mode="Flannel",
                flannel_config=vke.ClusterPodsConfigFlannelConfigArgs(
                    pod_cidrs=list(cfg.pod_cidrs), max_pods_per_node=cfg.max_pods_per_node
                ),
            )
        else:
            pods = vke.ClusterPodsConfigArgs(
                pod_network_mode=cfg.pod_network_mode,
                vpc_cni_config=vke.ClusterPodsConfigVpcCniConfigArgs(subnet_ids=subnet_ids, vpc_id=vpc_id),
            )
        cluster = vke.Cluster(
            f"{name}-cluster",
            name=cfg.name,
            description="VKE cluster with GPU dynamic resource allocation",
            kubernetes_version=cfg.kubernetes_version,
            delete_protection_enabled=cfg.delete_protection,
            cluster_config=vke.ClusterClusterConfigArgs(
                subnet_ids=subnet_ids,
                api_server_public_access_enabled=cfg.api_server_public_access,
                api_server_public_access_config=public_access,
                resource_public_access_default_enabled=False,
            ),
            pods_config=pods,
            services_config=vke.ClusterServicesConfigArgs(service_cidrsv4s=[cfg.service_cidr]),
            # VKE returns both kubeconfigs (base64 text with credentials) as plain outputs.
            opts=pulumi.ResourceOptions(
                parent=self,
                protect=protect,
                additional_secret_outputs=["kubeconfigPublic", "kubeconfigPrivate"],
            ),
        )
        kubeconfig = vke.Kubeconfig(
            f"{name}-kubeconfig",
            cluster_id=cluster.id,
            type=KUBECONFIG_PUBLIC if cfg.api_server_public_access else KUBECONFIG_PRIVATE,
            valid_duration=cfg.kubeconfig_valid_hours,
            opts=pulumi.ResourceOptions(parent=self),
        )
        result = vke.get_kubeconfigs_output(
            ids=kubeconfig.id.apply(lambda kubeconfig_id: [kubeconfig_id]),
            opts=pulumi.InvokeOutputOptions(parent=self, provider=volcengine_provider),
        )
        text = result.kubeconfigs.apply(lambda items: decode_kubeconfig(items[0].kubeconfig))
        self.cluster_id = cluster.id
        self.kubeconfig = pulumi.Output.secret(text)
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self, version=pt.KUBERNETES_PROVIDER_VERSION),
        )
        self.register_outputs({"clusterId": self.cluster_id, "kubeconfig": self.kubeconfig})


class ExistingCluster(pulumi.ComponentResource):
    """A Kubernetes provider for a cluster given by kubeconfig text (secret) or path; creates nothing else."""

    provider: k8s.Provider

    def __init__(
        self,
        name: str,
        *,
        kubeconfig: SecretStr | None,
        kubeconfig_path: str,
        context: str = "",
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("vke-gpu-dra:index:ExistingCluster", name, None, opts)
        source: pulumi.Input[str] = (
            pulumi.Output.secret(kubeconfig.reveal()) if kubeconfig else os.path.expanduser(kubeconfig_path)
        )
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=source,
            context=context or None,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self, version=pt.KUBERNETES_PROVIDER_VERSION),
        )
        self.register_outputs({})
