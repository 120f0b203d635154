"""`DraDriver`: the driver's namespace and Helm release (this repository's chart or NVIDIA's).

Both charts are installed with `helm.v3.Release` (see README, "Helm resource choice"). A Helm value
set to `null` deletes a chart default (the procedure's `--set controller.affinity=null`). The Python
SDK strips `None` from inline `values` before they reach the provider, so nulls travel in a values
file (`value_yaml_files`); pulumi-kubernetes keeps nulls from values files since 4.30.0
(pulumi/pulumi-kubernetes#2997), which makes `allowNullValues` unnecessary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import pulumi
import pulumi_kubernetes as k8s
import yaml
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.config import IMPLEMENTATION_NVIDIA, DriverConfig, Taint

from . import manifests
from .driver_image import ChartImage
from .project_files import DRIVER_CHART

#: The release is named as the procedure names it, whichever chart it installs.
RELEASE_NAME: Final = facts.NVIDIA_CHART


@dataclass(frozen=True)
class ChartValues:
    """Values for one release: `values` (no nulls) and `nulls` (keys set to null, as a values file)."""

    values: dict[str, Any]
    nulls: dict[str, Any]

    def null_file(self) -> str | None:
        return yaml.safe_dump(self.nulls, sort_keys=True) if self.nulls else None


def nvidia_values() -> ChartValues:
    """Exactly the procedure's `--set` flags for NVIDIA's chart 25.8.1."""
    return ChartValues(
        values={
            "gpuResourcesEnabledOverride": True,
            "resources": {"computeDomains": {"enabled": False}},
            "kubeletPlugin": {"affinity": manifests.dra_node_affinity()},
        },
        nulls={"controller": {"affinity": None}},
    )


def python_values(cfg: DriverConfig, taints: Sequence[Taint] = ()) -> ChartValues:
    """Values for driver/chart (its values.yaml contract). DeviceClasses come from the program."""
    image: dict[str, Any] = {"pullPolicy": cfg.image_pull_policy}
    on_all_nodes = cfg.kubelet_plugin_on_all_nodes
    kubelet_plugin: dict[str, Any] = {
        "tolerations": manifests.tolerations(taints),
        "affinity": manifests.any_node_affinity() if on_all_nodes else manifests.dra_node_affinity(),
    }
    return ChartValues(
        values={
            "image": image,
            "imagePullSecrets": [{"name": s} for s in cfg.image_pull_secrets],
            "driverName": facts.DRIVER_NAME,
            "deviceSource": {
                "type": cfg.device_source,
                "simulatedGpus": cfg.simulated_gpus,
                "simulatedProduct": cfg.simulated_product,
            },
            "kubeletPlugin": kubelet_plugin,
            "deviceClasses": {"enabled": False},
            "nvidiaDriverRoot": cfg.nvidia_driver_root,
            "claimReconcileIntervalSeconds": cfg.claim_reconcile_interval_seconds,
            "health": {
                "additionalXidsToIgnore": cfg.additional_xids_to_ignore,
                "recoveryWindowSeconds": cfg.health_recovery_window_seconds,
            },
        },
        nulls={},
    )


def chart_values(cfg: DriverConfig, taints: Sequence[Taint] = ()) -> ChartValues:
    chart = nvidia_values() if cfg.implementation == IMPLEMENTATION_NVIDIA else python_values(cfg, taints)
    if cfg.feature_gates:  # both charts take featureGates {Name: bool}
        chart.values["featureGates"] = dict(cfg.feature_gates)
    return chart


def with_image(chart: ChartValues, image: ChartImage) -> ChartValues:
    """The python chart's values with the image (repository, tag or digest) and its pull secrets."""
    pull_policy = chart.values["image"]["pullPolicy"]
    values = dict(chart.values)
    values["image"] = pulumi.Output.from_input(image.values).apply(lambda v: {**v, "pullPolicy": pull_policy})
    names = [s["name"] for s in chart.values["imagePullSecrets"]]
    values["imagePullSecrets"] = [{"name": n} for n in dict.fromkeys((*names, *image.pull_secrets))]
    return ChartValues(values=values, nulls=chart.nulls)


def chart_creates_device_classes(cfg: DriverConfig) -> bool:
    """NVIDIA's chart always renders gpu/mig DeviceClasses with GPU resources on; ours has them off."""
    return cfg.implementation == IMPLEMENTATION_NVIDIA


class DraDriver(pulumi.ComponentResource):
    """Namespace `nvidia-dra-driver-gpu` and the driver's Helm release in it."""

    namespace: pulumi.Output[str]
    release: k8s.helm.v3.Release

    def __init__(
        self,
        name: str,
        cfg: DriverConfig,
        *,
        provider: k8s.Provider,
        taints: Sequence[Taint] = (),
        image: ChartImage | None = None,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`image` (python driver): the image values, pull secrets and the resources that make the
        image pullable (build, push, kind load, credentials); the release waits for them."""
        super().__init__("vke-gpu-dra:index:DraDriver", name, None, opts)
        ns_manifest = manifests.driver_namespace()
        ns = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=ns_manifest["metadata"],
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(depends_on)),
        )
        chart = chart_values(cfg, taints)
        release_deps: list[pulumi.Resource] = [ns, *depends_on]
        if image is not None and cfg.implementation != IMPLEMENTATION_NVIDIA:
            chart = with_image(chart, image)
            release_deps += image.depends_on
        null_file = chart.null_file()
        if cfg.implementation == IMPLEMENTATION_NVIDIA:
            source: dict[str, Any] = {
                "chart": facts.NVIDIA_CHART,
                "version": cfg.nvidia_chart_version,
                "repository_opts": k8s.helm.v3.RepositoryOptsArgs(repo=facts.NVIDIA_CHART_REPO),
            }
        else:
            source = {"chart": DRIVER_CHART}
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name=RELEASE_NAME,
            namespace=ns.metadata.name,
            create_namespace=False,
            values=chart.values,
            value_yaml_files=[pulumi.StringAsset(null_file)] if null_file else None,
            timeout=cfg.timeout_seconds,
            atomic=False,
            **source,
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=release_deps),
        )
        self.namespace = ns.metadata.name
        self.register_outputs({"namespace": self.namespace, "releaseStatus": self.release.status})
