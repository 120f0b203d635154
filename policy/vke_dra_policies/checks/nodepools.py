"""GPU node pools: DRA labels, GPU instance types, containerd runtime, auto-scaling bounds."""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import Any, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r
from vke_gpu_dra_core.versions import at_least, format_version

from . import Violation

MIN_CONTAINERD = format_version(facts.MIN_CONTAINERD_VERSION)
RUNTIME_TYPE = "containerd"
#: NodePoolRuntime inputs (components/runtime.py; a dynamic resource keeps its Python names, camelCase too).
RUNTIME_VERSION_KEYS = ("runtime_version", "runtimeVersion")
RUNTIME_TYPE_KEYS = ("runtime_type", "runtimeType")
RUNTIME_POOL_KEYS = ("node_pool_id", "nodePoolId")
#: The one GPU instance-type catalog (rows and families), in the operator tools.
CATALOG_FILE: Final = "core/src/vke_gpu_dra_core/gpu_catalog.yaml"


def pool_labels(pool: r.Res) -> Mapping[str, Any] | r.Unknown:
    """Node labels of a pool as {key: value} (VKE writes them as a list of {key, value})."""
    raw = pool.get("kubernetesConfig", "labels")
    if raw is r.UNKNOWN:
        return r.UNKNOWN
    if isinstance(raw, Mapping):
        return dict(raw)
    labels: dict[str, Any] = {}
    for item in r.as_list(raw):
        if isinstance(item, Mapping) and isinstance(item.get("key"), str):
            labels[item["key"]] = item.get("value")
    return labels


def instance_types(pool: r.Res) -> list[Any] | r.Unknown:
    raw = pool.get("nodeConfig", "instanceTypeIds")
    if raw is r.UNKNOWN:
        return r.UNKNOWN
    return list(raw) if isinstance(raw, list) else []


def schedule_label(pool: r.Res) -> Any:
    labels = pool_labels(pool)
    return r.UNKNOWN if labels is r.UNKNOWN else labels.get(facts.LABEL_GPU_SCHEDULE)


def is_device_plugin_pool(pool: r.Res) -> bool:
    """Labelled for VKE's device-plugin (`nvidia`) or mGPU (`mgpu`) GPU scheduling."""
    return schedule_label(pool) in facts.LABEL_GPU_SCHEDULE_CONFLICTING


def is_dra_pool(pool: r.Res) -> bool:
    """Labelled for DRA scheduling (`vke.node.gpu.schedule=nvidia-dra`)."""
    return schedule_label(pool) == facts.LABEL_GPU_SCHEDULE_DRA


def is_dra_gpu_pool(pool: r.Res, gpu_types: Container[str]) -> bool:
    """A GPU pool meant for DRA: any DRA label or a GPU instance type, and not a device-plugin/mGPU pool."""
    if is_device_plugin_pool(pool):
        return False
    labels = pool_labels(pool)
    if labels is not r.UNKNOWN and (
        labels.get(facts.LABEL_GPU_SCHEDULE) == facts.LABEL_GPU_SCHEDULE_DRA
        or facts.LABEL_GPU_PRESENT in labels
    ):
        return True
    types = instance_types(pool)
    return types is not r.UNKNOWN and any(isinstance(t, str) and t in gpu_types for t in types)


def labels(pool: r.Res, gpu_types: Container[str]) -> list[Violation]:
    """Every DRA GPU pool carries both labels of the procedure."""
    if not is_dra_gpu_pool(pool, gpu_types):
        return []
    found = pool_labels(pool)
    if found is r.UNKNOWN:
        return []
    out = []
    for key, want in facts.REQUIRED_NODE_LABELS.items():
        value = found.get(key)
        if value is r.UNKNOWN or value == want:
            continue
        seen = "is missing" if key not in found else f'is "{value}"'
        out.append(
            Violation(
                f"{pool.label}: node label {key} {seen} on a GPU node pool; add kubernetesConfig.labels "
                f'{{key: "{key}", value: "{want}"}} so DRA schedules its GPUs and the driver runs there.',
                pool.urn,
            )
        )
    return out


def gpu_instance_types(pool: r.Res, gpu_types: Container[str]) -> list[Violation]:
    """A pool labelled for DRA uses GPU instance types only."""
    found = pool_labels(pool)
    if found is r.UNKNOWN or is_device_plugin_pool(pool):
        return []
    if (
        found.get(facts.LABEL_GPU_SCHEDULE) != facts.LABEL_GPU_SCHEDULE_DRA
        and facts.LABEL_GPU_PRESENT not in found
    ):
        return []
    types = instance_types(pool)
    if types is r.UNKNOWN:
        return []
    if not types:
        return [
            Violation(
                f"{pool.label}: nodeConfig.instanceTypeIds is empty on a DRA GPU node pool; set GPU "
                f"instance types (see {CATALOG_FILE}).",
                pool.urn,
            )
        ]
    bad = [t for t in types if t is not r.UNKNOWN and not (isinstance(t, str) and t in gpu_types)]
    if not bad:
        return []
    return [
        Violation(
            f"{pool.label}: instance type(s) {', '.join(map(str, bad))} carry no NVIDIA GPU (not in the GPU "
            f"instance type catalog {CATALOG_FILE}); use a GPU Accelerated type such as ecs.gni2.3xlarge, "
            "or add the type to the policy config extraGpuInstanceTypes if it does carry a GPU.",
            pool.urn,
        )
    ]


def auto_scaling_bounds(pool: r.Res) -> list[Violation]:
    """Advisory: pools should bound their size (autoScaling enabled with minReplicas and maxReplicas)."""
    scaling = pool.get("autoScaling")
    if scaling is r.UNKNOWN:
        return []
    enabled = r.truthy(r.get_path(scaling, ("enabled",))) if isinstance(scaling, Mapping) else False
    if enabled is None:
        return []
    if enabled and isinstance(scaling, Mapping) and "minReplicas" in scaling and "maxReplicas" in scaling:
        return []
    found = (
        "autoScaling is not set"
        if scaling is None
        else ("autoScaling.enabled is false" if not enabled else "autoScaling has no minReplicas/maxReplicas")
    )
    return [
        Violation(
            f"{pool.label}: {found}, so the pool's size is unbounded by policy; set autoScaling {{enabled: "
            "true, minReplicas, maxReplicas} to cap GPU spend.",
            pool.urn,
        )
    ]


# --- runtime: NodePoolRuntime resources and the pools they pin ---


def _first(res: r.Res, keys: Sequence[str]) -> Any:
    for key in keys:
        value = res.get(key)
        if value is not None:
            return value
    return None


def runtime_for(pool: r.Res, runtimes: Sequence[r.Res]) -> list[r.Res]:
    """Runtime resources that belong to `pool`: by dependency (what the engine reports) or pool id."""
    pool_id = pool.get("id")
    out = []
    for rt in runtimes:
        ref = _first(rt, RUNTIME_POOL_KEYS)
        if pool.urn in rt.dependencies or (isinstance(ref, str) and ref == pool_id):
            out.append(rt)
    return out


def runtime_version(rt: r.Res) -> list[Violation]:
    """A NodePoolRuntime pins containerd 2.1 or later."""
    kind, version = _first(rt, RUNTIME_TYPE_KEYS), _first(rt, RUNTIME_VERSION_KEYS)
    fix = f'pin type "{RUNTIME_TYPE}" version "{MIN_CONTAINERD}" or later (the procedure\'s runtime)'
    out = []
    if kind is not None and kind is not r.UNKNOWN and kind != RUNTIME_TYPE:
        out.append(Violation(f'{rt.label}: runtime type "{kind}"; {fix}.', rt.urn))
    if version is r.UNKNOWN:
        return out
    if not isinstance(version, str) or not version:
        out.append(Violation(f"{rt.label}: no containerd version is set; {fix}.", rt.urn))
        return out
    ok = at_least(version, facts.MIN_CONTAINERD_VERSION)
    if ok is None:
        out.append(
            Violation(f'{rt.label}: containerd version "{version}" is not MAJOR.MINOR; {fix}.', rt.urn)
        )
    elif not ok:
        out.append(
            Violation(
                f'{rt.label}: containerd version "{version}" is older than {MIN_CONTAINERD}; {fix}.', rt.urn
            )
        )
    return out


def runtimes(resources: Sequence[r.Res], gpu_types: Container[str]) -> list[Violation]:
    """Each DRA GPU pool has a NodePoolRuntime, and every NodePoolRuntime pins containerd >= 2.1."""
    pools = [p for p in r.of_type(resources, pt.NODE_POOL) if is_dra_gpu_pool(p, gpu_types)]
    rts = [res for res in resources if r.is_node_pool_runtime(res)]
    out = []
    for pool in pools:
        if not runtime_for(pool, rts):
            out.append(
                Violation(
                    f"{pool.label}: no NodePoolRuntime resource pins this GPU node pool's container runtime "
                    f"(VKE's default may be older than containerd {MIN_CONTAINERD}); add one for the pool "
                    f'with type "{RUNTIME_TYPE}" and version "{MIN_CONTAINERD}" or later.',
                    pool.urn,
                )
            )
    for rt in rts:
        out.extend(runtime_version(rt))
    return out
