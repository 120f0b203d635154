"""Start-up of dynamic MIG (feature gate DynamicMIG): which GPUs are partitioned, with which profiles.

Only when the API server keeps shared counters (`cluster_features`, the plugin's one detection of what
the server keeps; `counter_layout` maps its answer to the slice layout); otherwise every GPU is published
as without the gate, and a log line says why. Per GPU:

* no MIG support (NVML answers NOT_SUPPORTED, NVIDIA's issue #1092; a simulated product without MIG
  profiles in the catalog): published as today;
* MIG-capable with MIG mode off: published whole, with a log line (turning MIG mode on is the
  administrator's step: it may need a GPU reset);
* MIG mode on (every simulated GPU whose product has catalogued MIG profiles): the whole GPU, its counter
  set and one device per MIG placement, with the profiles NVML reports (the catalog's for simulated GPUs).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device
from vke_gpu_dra_core.mig_partitions import MigCatalogError, MigProfile, mig_product

from ..cluster_features import ClusterFeatures, CounterShape
from .backends import MigBackend, SimulatedMigBackend
from .manager import PartitionManager
from .publish import CounterLayout, PartitionedGpu, partitioned_gpu

if TYPE_CHECKING:
    from ..discovery.mig_lifecycle import MigLifecycle

log = logging.getLogger(__name__)

#: The first release with partitionable devices in `resource.k8s.io/v1` (the slice limits start there).
FIRST_VERSION: Final = (1, 34)
#: Where the server keeps shared counters -> the slice layout that publishes them.
LAYOUTS: Final[dict[CounterShape, CounterLayout]] = {"beside-devices": "inline", "own-slice": "split"}


def counter_layout(features: ClusterFeatures) -> CounterLayout | None:
    """The slice layout for the counters this server keeps: `inline` beside the devices (1.34), `split`
    in slices of their own (1.35+); None when it drops them or is older than 1.34."""
    if features.shared_counters is None or features.version is None or features.version < FIRST_VERSION:
        return None
    return LAYOUTS[features.shared_counters]


@dataclass(frozen=True)
class DynamicMig:
    """The partitioned GPUs, their manager, and every device the node publishes (placements included)."""

    manager: PartitionManager
    devices: list[Device]


def _minor(device: Device) -> int:
    return device.minor if device.minor is not None else int(device.name.rsplit("-", 1)[1])


def _whole_gpus(devices: Sequence[Device]) -> list[Device]:
    return [d for d in devices if d.device_type == facts.DEVICE_TYPE_GPU]


def _with_placements(devices: Sequence[Device], gpus: Sequence[PartitionedGpu]) -> list[Device]:
    placements = {g.whole.name: list(g.placements.values()) for g in gpus}
    result: list[Device] = []
    for device in devices:
        result.append(device)
        result += placements.get(device.name, [])
    return result


def simulated_dynamic_mig(devices: Sequence[Device], plugin_data_dir: Path) -> DynamicMig:
    """Simulated GPUs: the catalog's MIG profiles of their product; instances in a file."""
    gpus: list[PartitionedGpu] = []
    for whole in _whole_gpus(devices):
        product = str(whole.attributes.get(facts.ATTR_PRODUCT_NAME, ""))
        try:
            profiles = mig_product(product).profiles
        except MigCatalogError as exc:
            log.info("GPU published whole: %s", exc, extra={"fields": {"device": whole.name}})
            continue
        gpus.append(partitioned_gpu(whole, _minor(whole), profiles))
    backend = SimulatedMigBackend(plugin_data_dir, {g.parent_uuid: (g.minor, g.profiles) for g in gpus})
    return DynamicMig(PartitionManager(backend, gpus), _with_placements(devices, gpus))


def nvml_dynamic_mig_at(driver_root: Path, devices: Sequence[Device]) -> DynamicMig:
    """The plugin's NVML case: NVML found under `driver_root` as discovery finds it, capability nodes
    from the host's /proc. Raises MigLifecycleError or NvmlUnavailableError when NVML fails."""
    from ..discovery.mig_lifecycle import MigLifecycle  # noqa: PLC0415  (NVML bindings only in nvml mode)
    from .backends import NvmlMigBackend  # noqa: PLC0415

    lifecycle = MigLifecycle(driver_root=driver_root)
    return nvml_dynamic_mig(devices, NvmlMigBackend(lifecycle), lifecycle)


def nvml_dynamic_mig(devices: Sequence[Device], backend: MigBackend, lifecycle: MigLifecycle) -> DynamicMig:
    """GPUs through NVML: MIG capability, mode and profiles as NVML reports them."""
    by_uuid = {d.uuid: d for d in _whole_gpus(devices)}
    found: list[tuple[Device, list[MigProfile]]] = []
    with lifecycle.session() as mig:
        for gpu in mig.gpus():
            whole = by_uuid.get(gpu.uuid)
            if whole is None:
                continue  # left out by discovery (its problem is logged there)
            if not gpu.mig_capable:
                continue  # published as without the gate (NVIDIA #1092)
            if not gpu.mig_enabled:
                log.warning(
                    "GPU published whole: it supports MIG but its MIG mode is off; dynamic MIG needs MIG "
                    "mode on (nvidia-smi -i <index> -mig 1, a GPU reset where the GPU asks for one)",
                    extra={"fields": {"device": whole.name, "uuid": gpu.uuid, "pending": gpu.mig_pending}},
                )
                continue
            found.append((whole, mig.profiles(gpu.uuid)))
    gpus = [partitioned_gpu(whole, _minor(whole), profiles) for whole, profiles in found]
    return DynamicMig(PartitionManager(backend, gpus), _with_placements(devices, gpus))
