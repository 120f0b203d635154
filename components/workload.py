"""`SampleWorkload`: the procedure's ResourceClaimTemplate `single-gpu` and Deployment `gpu-test`, and
with the nvidia.com/gpu mapping the classic Deployment `gpu-test-classic`."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s
from vke_gpu_dra_core.config import SampleConfig, Taint

from . import manifests

DEFAULT_NAMESPACE = "default"


class SampleWorkload(pulumi.ComponentResource):
    """A Deployment whose single pod claims one GPU through a ResourceClaimTemplate.

    Its pod runs `nvidia-smi -L` (by default), so `kubectl logs deployment/gpu-test` shows the GPU
    the driver allocated. The namespace is created unless it is `default`.
    """

    namespace: str
    claim_template_name: pulumi.Output[str]
    deployment_name: pulumi.Output[str]
    #: gpu-test-classic's name, or None when the sample has no classic Deployment.
    classic_deployment_name: pulumi.Output[str] | None

    def __init__(
        self,
        name: str,
        cfg: SampleConfig,
        *,
        provider: k8s.Provider,
        taints: Sequence[Taint] = (),
        classic: bool = False,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("vke-gpu-dra:index:SampleWorkload", name, None, opts)
        after: list[pulumi.Resource] = list(depends_on)
        if cfg.namespace != DEFAULT_NAMESPACE:
            ns = k8s.core.v1.Namespace(
                f"{name}-namespace",
                metadata=manifests.namespace(cfg.namespace)["metadata"],
                opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=after),
            )
            after = [*after, ns]
        rct = manifests.resource_claim_template(cfg.namespace)
        template = k8s.resource.v1.ResourceClaimTemplate(
            f"{name}-claim-template",
            metadata=rct["metadata"],
            spec=rct["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=after),
        )
        dep = manifests.deployment(cfg, taints)
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=dep["metadata"],
            spec=dep["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[*after, template]),
        )
        self.classic_deployment_name = None
        outputs: dict[str, pulumi.Output[str]] = {}
        if classic:
            classic_dep = manifests.classic_deployment(cfg, taints)
            self.classic_deployment_name = k8s.apps.v1.Deployment(
                f"{name}-classic-deployment",
                metadata=classic_dep["metadata"],
                spec=classic_dep["spec"],
                opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=after),
            ).metadata.name
            outputs["classicDeployment"] = self.classic_deployment_name
        self.namespace = cfg.namespace
        self.claim_template_name = template.metadata.name
        self.deployment_name = deployment.metadata.name
        self.register_outputs(
            {"claimTemplate": self.claim_template_name, "deployment": self.deployment_name, **outputs}
        )
