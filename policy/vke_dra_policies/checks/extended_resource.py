"""nvidia.com/gpu from one source per node: no NVIDIA device plugin release on the DRA GPU nodes.

NVIDIA's device plugin advertises `nvidia.com/gpu` in each node's capacity. Where gpu.nvidia.com maps the
same name (`DeviceClass.spec.extendedResourceName`, KEP-5004), a node must not advertise it both ways;
without the mapping the VKE DRA procedure still forbids device-plugin scheduling on DRA nodes. The VKE
add-on and the schedule label are `conflicts.py`'s; this module finds the device plugin the stack itself
deploys: a Helm release of NVIDIA's `nvidia-device-plugin` chart (whose default affinity admits every node
labelled `nvidia.com/gpu.present=true`, as every DRA node is), of NVIDIA's `gpu-operator` with its device
plugin on, or a DaemonSet running the `k8s-device-plugin` image.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r
from vke_gpu_dra_core.versions import parse_major_minor

from . import Violation
from .conflicts import dra_clusters
from .driver import driver_releases, effective_values

#: NVIDIA's device plugin chart (github.com/NVIDIA/k8s-device-plugin, repo https://nvidia.github.io/k8s-device-plugin).
DEVICE_PLUGIN_CHART: Final = "nvidia-device-plugin"
#: NVIDIA's GPU operator chart, which deploys the device plugin unless `devicePlugin.enabled=false`.
GPU_OPERATOR_CHART: Final = "gpu-operator"
#: The device plugin's image (nvcr.io/nvidia/k8s-device-plugin).
DEVICE_PLUGIN_IMAGE: Final = "k8s-device-plugin"
#: The first release of NVIDIA's DRA chart whose gpu.nvidia.com DeviceClass sets extendedResourceName.
NVIDIA_CHART_MAPPING_SINCE: Final = (25, 12)

_AFFINITY_TERMS: Final = (
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
)


def _chart_name(res: r.Res) -> str:
    """The chart's last path segment (`nvdp/nvidia-device-plugin`, `oci://…/gpu-operator` -> the name)."""
    chart = res.get("chart")
    return chart.rstrip("/").rsplit("/", 1)[-1] if isinstance(chart, str) else ""


def gpu_mapping(resources: Sequence[r.Res]) -> str | None:
    """Where the stack maps nvidia.com/gpu to DRA devices (a phrase for a message), or None."""
    for dc in r.of_type(resources, pt.DEVICE_CLASS):
        if r.get_path(dc.props, ("spec", "extendedResourceName")) == facts.GPU_EXTENDED_RESOURCE:
            return f"{dc.label} maps {facts.GPU_EXTENDED_RESOURCE} (extendedResourceName)"
    for release, kind in driver_releases(list(resources)):
        if kind == "nvidia":
            version = release.get("version")
            parsed = parse_major_minor(version) if isinstance(version, str) else None
            if parsed is not None and parsed >= NVIDIA_CHART_MAPPING_SINCE:
                return f"NVIDIA's chart {version} ({release.label}) maps {facts.GPU_EXTENDED_RESOURCE}"
            continue
        values = effective_values(release, kind)
        if values is r.UNKNOWN:
            continue
        enabled = r.truthy(r.get_path(values, ("deviceClasses", "enabled")))
        name = r.get_path(values, ("deviceClasses", "gpuExtendedResourceName"))
        if enabled is True and name == facts.GPU_EXTENDED_RESOURCE:
            return (
                f"{release.label} maps {facts.GPU_EXTENDED_RESOURCE} (deviceClasses.gpuExtendedResourceName)"
            )
    return None


def _excludes_dra(expr: Any) -> bool:
    """A matchExpression that no node labelled vke.node.gpu.schedule=nvidia-dra satisfies."""
    if not isinstance(expr, Mapping) or expr.get("key") != facts.LABEL_GPU_SCHEDULE:
        return False
    values = r.as_list(expr.get("values"))
    operator = expr.get("operator")
    return (
        (operator == "In" and facts.LABEL_GPU_SCHEDULE_DRA not in values)
        or (operator == "NotIn" and facts.LABEL_GPU_SCHEDULE_DRA in values)
        or operator == "DoesNotExist"
    )


def keeps_off_dra_nodes(placement: Mapping[str, Any]) -> bool | None:
    """Whether a pod placement (`nodeSelector`, `affinity`) admits no DRA node; None while unknown."""
    selector = placement.get("nodeSelector")
    terms = r.get_path(placement, _AFFINITY_TERMS)
    if selector is r.UNKNOWN or terms is r.UNKNOWN:
        return None
    if isinstance(selector, Mapping) and selector.get(facts.LABEL_GPU_SCHEDULE) not in (
        None,
        facts.LABEL_GPU_SCHEDULE_DRA,
    ):
        return True
    if isinstance(terms, list) and terms:
        return all(
            isinstance(t, Mapping) and any(_excludes_dra(e) for e in r.as_list(t.get("matchExpressions")))
            for t in terms
        )
    return False


#: Why each kind of device plugin reaches the DRA nodes (for the message).
_CHART_REACH: Final = (
    "the chart's default affinity admits nodes labelled "
    f"{facts.LABEL_GPU_PRESENT}={facts.LABEL_GPU_PRESENT_VALUE}, as every DRA node is"
)
_OPERATOR_REACH: Final = "the operator runs it on every GPU node"
_DAEMON_SET_REACH: Final = "nothing in its placement keeps it off them"


def _helm_device_plugin(res: r.Res) -> str | None:
    """What a Helm release of NVIDIA's device plugin or GPU operator is, if it runs on DRA nodes."""
    chart = _chart_name(res)
    if chart not in (DEVICE_PLUGIN_CHART, GPU_OPERATOR_CHART):
        return None
    values = effective_values(res)
    if values is r.UNKNOWN:
        return None
    enabled = r.get_path(values, ("devicePlugin", "enabled"))  # both charts default it to true
    if enabled is r.UNKNOWN or (enabled is not None and r.truthy(enabled) is False):
        return None
    if chart == GPU_OPERATOR_CHART:
        return f"NVIDIA's {GPU_OPERATOR_CHART} chart with devicePlugin.enabled ({_OPERATOR_REACH})"
    if keeps_off_dra_nodes(values) is False:
        return f"NVIDIA's {DEVICE_PLUGIN_CHART} chart ({_CHART_REACH})"
    return None


def _daemon_set_device_plugin(res: r.Res) -> str | None:
    """What a DaemonSet running the device plugin image is, if it runs on DRA nodes."""
    pod = r.get_path(res.props, ("spec", "template", "spec"))
    if not isinstance(pod, Mapping):
        return None
    images = [c.get("image") for c in r.as_list(pod.get("containers")) if isinstance(c, Mapping)]
    runs_plugin = any(isinstance(i, str) and DEVICE_PLUGIN_IMAGE in i for i in images)
    if runs_plugin and keeps_off_dra_nodes(pod) is False:
        return f"a DaemonSet running the {DEVICE_PLUGIN_IMAGE} image ({_DAEMON_SET_REACH})"
    return None


def _device_plugin_workloads(resources: Sequence[r.Res]) -> list[tuple[r.Res, str]]:
    """(resource, what it is and how it reaches the DRA nodes) for each device plugin the stack deploys."""
    found = []
    for res in resources:
        what = None
        if res.type in pt.HELM_TYPES:
            what = _helm_device_plugin(res)
        elif res.type == pt.DAEMON_SET:
            what = _daemon_set_device_plugin(res)
        if what is not None:
            found.append((res, what))
    return found


def device_plugin_on_dra_nodes(resources: Sequence[r.Res]) -> list[Violation]:
    if not dra_clusters(resources):
        return []
    mapping = gpu_mapping(resources)
    why = (
        f"{mapping} too, and a node must not advertise an extended resource through both a device plugin "
        "and DRA (KEP-5004)"
        if mapping is not None
        else "the VKE DRA procedure forbids device-plugin GPU scheduling on DRA nodes"
    )
    fix = (
        "remove it or set devicePlugin.enabled=false (device-plugin GPU nodes belong in a cluster "
        "without DRA), or keep it off the DRA nodes with a nodeSelector or an affinity that excludes "
        f"{facts.LABEL_GPU_SCHEDULE}={facts.LABEL_GPU_SCHEDULE_DRA}"
    )
    return [
        Violation(
            f"{res.label}: {what} would advertise {facts.GPU_EXTENDED_RESOURCE} on the DRA GPU nodes; {why}. "
            f"Fix: {fix}.",
            res.urn,
        )
        for res, what in _device_plugin_workloads(resources)
    ]
