"""The DRA driver's Helm release: which implementation it is and the values the procedure sets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import yaml
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from .. import chart_defaults
from . import Violation

#: How the project's own chart can be referenced (a path to driver/chart, or its chart name).
PROJECT_CHART_MARKERS: Final = ("driver/chart", "vke-gpu-dra")
KUBELET_AFFINITY_PATH: Final = (
    "kubeletPlugin",
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
)

DriverKind = Literal["nvidia", "python"]


def driver_kind(res: r.Res) -> DriverKind | None:
    """ "nvidia" for NVIDIA's chart, "python" for the project's chart, None for any other Helm resource."""
    if res.type not in pt.HELM_TYPES:
        return None
    chart = res.get("chart")
    chart_text = chart if isinstance(chart, str) else ""
    if facts.NVIDIA_CHART in chart_text:
        return "nvidia"
    if any(marker in chart_text for marker in PROJECT_CHART_MARKERS):
        return "python"
    return None


def driver_releases(resources: list[r.Res]) -> list[tuple[r.Res, DriverKind]]:
    return [(res, kind) for res in resources if (kind := driver_kind(res)) is not None]


def _asset_text(asset: Any) -> str | None:
    """Text of a StringAsset, as pulumi_policy (object) or the wire (signature map) hands it over."""
    text = asset.get("text") if isinstance(asset, Mapping) else getattr(asset, "text", None)
    return text if isinstance(text, str) else None


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def project_chart_defaults() -> Mapping[str, Any]:
    """The defaults under the values of a release of the project's chart (those the policies read, copied
    from driver/chart/values.yaml into the pack: `chart_defaults`)."""
    return chart_defaults.load()


def effective_values(release: r.Res, kind: DriverKind | None = None) -> Mapping[str, Any] | r.Unknown:
    """Values Helm gets: chart defaults (the project's chart), values files (where the program puts
    nulls), then `values`. A null removes a default, as Helm does."""
    values, files = release.get("values"), release.get("valueYamlFiles")
    if values is r.UNKNOWN or files is r.UNKNOWN:
        return r.UNKNOWN
    merged: dict[str, Any] = dict(project_chart_defaults()) if kind == "python" else {}
    for asset in r.as_list(files):
        text = _asset_text(asset)
        loaded = yaml.safe_load(text) if text else None
        if isinstance(loaded, Mapping):
            merged = _merge(merged, loaded)
    return _merge(merged, values) if isinstance(values, Mapping) else merged


def _term_restricted(term: Any) -> bool:
    """A nodeSelectorTerm that only admits nodes labelled vke.node.gpu.schedule=nvidia-dra."""
    if not isinstance(term, Mapping):
        return False
    for expr in r.as_list(term.get("matchExpressions")):
        if (
            isinstance(expr, Mapping)
            and expr.get("key") == facts.LABEL_GPU_SCHEDULE
            and expr.get("operator") == "In"
            and r.as_list(expr.get("values")) == [facts.LABEL_GPU_SCHEDULE_DRA]
        ):
            return True
    return False


def kubelet_plugin_restricted(values: Mapping[str, Any]) -> bool | None:
    """Whether the kubelet plugin can only land on DRA nodes (affinity or nodeSelector); None if unknown."""
    selector = r.get_path(values, ("kubeletPlugin", "nodeSelector"))
    if selector is r.UNKNOWN:
        return None
    if (
        isinstance(selector, Mapping)
        and selector.get(facts.LABEL_GPU_SCHEDULE) == facts.LABEL_GPU_SCHEDULE_DRA
    ):
        return True
    terms = r.get_path(values, KUBELET_AFFINITY_PATH)
    if terms is r.UNKNOWN:
        return None
    return isinstance(terms, list) and bool(terms) and all(_term_restricted(t) for t in terms)


def values(release: r.Res, kind: DriverKind, *, dra_nodes: bool = True) -> list[Violation]:
    """Kubelet plugin on DRA nodes only; for NVIDIA's chart also the procedure's settings.

    `dra_nodes` is False for stacks that create no VKE node pools (an existing cluster, where no
    node carries the DRA label and the plugin's placement is the operator's choice).
    """
    vals = effective_values(release, kind)
    if vals is r.UNKNOWN:
        return []
    out = []
    restricted = kubelet_plugin_restricted(vals)
    if restricted is False and dra_nodes:
        found = r.get_path(vals, KUBELET_AFFINITY_PATH)
        out.append(
            Violation(
                f"{release.label}: kubeletPlugin node affinity is {found!r}, so the kubelet plugin may run "
                f"on nodes without DRA; set {r.format_path(KUBELET_AFFINITY_PATH)} to one term with "
                "matchExpressions "
                f'[{{key: "{facts.LABEL_GPU_SCHEDULE}", operator: "In", values: '
                f'["{facts.LABEL_GPU_SCHEDULE_DRA}"]}}].',
                release.urn,
            )
        )
    if kind != "nvidia":
        return out
    override = r.get_path(vals, ("gpuResourcesEnabledOverride",))
    if override is not r.UNKNOWN and r.truthy(override) is not True:
        out.append(
            Violation(
                f"{release.label}: gpuResourcesEnabledOverride is {override!r}; set it to true (the "
                "procedure's --set gpuResourcesEnabledOverride=true) so the chart serves gpu.nvidia.com "
                "and mig.nvidia.com.",
                release.urn,
            )
        )
    compute = r.get_path(vals, ("resources", "computeDomains", "enabled"))
    if compute is not r.UNKNOWN and (compute is None or r.truthy(compute) is not False):
        out.append(
            Violation(
                f"{release.label}: resources.computeDomains.enabled is {compute!r}; set it to false (the "
                "procedure turns compute domains off on VKE).",
                release.urn,
            )
        )
    controller = r.get_path(vals, ("controller",))
    affinity = r.get_path(vals, ("controller", "affinity"))
    is_null = isinstance(controller, Mapping) and "affinity" in controller and affinity in (None, {})
    if affinity is not r.UNKNOWN and not is_null:
        found = "not set (the chart's default applies)" if affinity is None else repr(affinity)
        out.append(
            Violation(
                f"{release.label}: controller.affinity is {found}; set controller.affinity to null (the "
                "procedure's --set controller.affinity=null) so the controller can run on VKE's nodes.",
                release.urn,
            )
        )
    return out


def driver_values(resources: list[r.Res]) -> list[Violation]:
    """Every driver release; the placement rule applies where the stack makes its own DRA nodes."""
    dra_nodes = bool(r.of_type(resources, pt.NODE_POOL))
    out = []
    for release, kind in driver_releases(resources):
        out.extend(values(release, kind, dra_nodes=dra_nodes))
    return out


def chart_creates_device_classes(release: r.Res, kind: DriverKind) -> bool | None:
    """Whether the release renders gpu.nvidia.com and mig.nvidia.com itself (None while unknown).

    NVIDIA's chart always does (the program relies on it); the project's chart when
    `deviceClasses.enabled` (its default).
    """
    if kind == "nvidia":
        return True
    vals = effective_values(release, kind)
    if vals is r.UNKNOWN:
        return None
    enabled = r.get_path(vals, ("deviceClasses", "enabled"))
    return None if enabled is r.UNKNOWN else r.truthy(enabled) is True
