"""The procedure's usage limits: no device-plugin or mGPU GPU scheduling where DRA is on."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from . import Violation
from .driver import driver_releases
from .nodepools import is_device_plugin_pool, is_dra_pool, schedule_label

#: VKE add-ons that schedule GPUs without DRA, as VKE names them in its add-on release notes
#: ("nvidia-device-plugin": volcengine.com/docs/6460/350800, "mgpu": volcengine.com/docs/6460/159262);
#: extendable by config.
DEFAULT_FORBIDDEN_ADDONS: Final = ("nvidia-device-plugin", "mgpu")


def _cluster_key(res: r.Res, clusters: Sequence[r.Res]) -> str:
    """Which cluster a pool or add-on belongs to: by dependency, by id, or the only cluster there is."""
    for cluster in clusters:
        if cluster.urn in res.dependencies or cluster.urn == res.parent:
            return cluster.urn
    cluster_id = res.get("clusterId")
    for cluster in clusters:
        if isinstance(cluster_id, str) and cluster_id in (cluster.get("id"), cluster.urn):
            return cluster.urn
    if len(clusters) == 1:
        return clusters[0].urn
    return cluster_id if isinstance(cluster_id, str) else "<unknown cluster>"


def dra_clusters(resources: Sequence[r.Res]) -> set[str]:
    """Clusters where DRA is on: a pool labelled nvidia-dra, or (for every cluster) a DRA driver release."""
    clusters = r.of_type(resources, pt.CLUSTER)
    keys = {_cluster_key(p, clusters) for p in r.of_type(resources, pt.NODE_POOL) if is_dra_pool(p)}
    if driver_releases(list(resources)):
        keys |= {c.urn for c in clusters}
    return keys


def device_plugin_beside_dra(resources: Sequence[r.Res], forbidden_addons: Iterable[str]) -> list[Violation]:
    clusters = r.of_type(resources, pt.CLUSTER)
    on = dra_clusters(resources)
    forbidden = {name.strip().lower() for name in forbidden_addons}
    out = []
    for addon in r.of_type(resources, pt.ADDON):
        name = addon.get("name")
        if isinstance(name, str) and name.lower() in forbidden and _cluster_key(addon, clusters) in on:
            out.append(
                Violation(
                    f'{addon.label}: add-on "{name}" schedules GPUs with the device plugin/mGPU on a '
                    "cluster whose GPU nodes use DRA, which the VKE DRA procedure forbids; remove the "
                    "add-on (or move DRA to another cluster).",
                    addon.urn,
                )
            )
    for pool in r.of_type(resources, pt.NODE_POOL):
        if is_device_plugin_pool(pool) and _cluster_key(pool, clusters) in on:
            value = schedule_label(pool)
            out.append(
                Violation(
                    f'{pool.label}: node label {facts.LABEL_GPU_SCHEDULE}="{value}" turns on '
                    f"{'mGPU' if value == 'mgpu' else 'NVIDIA device-plugin'} scheduling in a cluster where "
                    "DRA is on; "
                    f'set it to "{facts.LABEL_GPU_SCHEDULE_DRA}" (and nvidia.com/gpu.present=true) or move '
                    "the pool to a cluster without DRA.",
                    pool.urn,
                )
            )
    return out
