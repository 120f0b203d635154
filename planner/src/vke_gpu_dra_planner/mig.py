"""MIG partitions in the plan (the driver gate DynamicMIG): claims of each profile that fit, and why not.

A pool's node publishes per MIG-capable GPU a counter set, the whole GPU and every MIG placement
(`inventory.mig_devices`, from core's `mig_partitions`). How many one-device claims of a profile still
fit is what kube-scheduler finds when it allocates them one after the other: placements in slice order,
each taken while the counters it consumes are not exhausted (`allocator.NodeAllocator.counters_fit`).
Without DRAPartitionableDevices (off by default in 1.34 and 1.35) the API server drops the counters; the
driver, which checks that when it starts, then publishes its GPUs whole, as without DynamicMIG
(`admission.as_published`, `admission.counters_dropped` says so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from vke_gpu_dra_core import facts

from .gates import FeatureGates
from .inventory import GpuPool, Node

#: the profile name under which the whole GPU is counted
WHOLE_GPU: Final = "gpu"


def device_profile(node: Node, index: int) -> str:
    """The MIG profile of device `index` (WHOLE_GPU for a full GPU)."""
    value = node.devices[index].attributes.get(facts.ATTR_PROFILE)
    return value if isinstance(value, str) else WHOLE_GPU


def claims_per_profile(
    node: Node,
    keep_counters: bool,
    in_use: Iterable[int] = (),
    counters_used: Mapping[tuple[str, str], int] | None = None,
) -> dict[str, int]:
    """Per profile, how many more one-device claims of it fit on `node` (each profile on its own), given
    the devices `in_use` and the counters they consume (`counters_used`)."""
    if node.counters is None:
        return {}
    taken = set(in_use)
    available = node.counters.available()
    out: dict[str, int] = {}
    for index in range(len(node.devices)):
        out.setdefault(device_profile(node, index), 0)
    for profile in out:
        used = dict(counters_used or {})
        count = 0
        for index in range(len(node.devices)):
            if index in taken or device_profile(node, index) != profile:
                continue
            consumes = node.counters.consumes[index] if keep_counters else ()
            if any(used.get((s, c), 0) + amount > available.get((s, c), 0) for s, c, amount in consumes):
                continue
            for s, c, amount in consumes:
                used[(s, c)] = used.get((s, c), 0) + amount
            count += 1
        out[profile] = count
    return out


def pool_profiles(pool: GpuPool, gates: FeatureGates) -> dict[str, dict[str, int]]:
    """Per profile of a partitioned pool: claims that fit one empty GPU, one node and the pool at maximum
    size (each profile alone); {} when the pool's GPUs are not partitioned."""
    if not pool.partitionable or not gates.partitionable_devices or pool.gpus_per_node < 1:
        return {}  # no placements published: the driver publishes whole GPUs without shared counters
    node = pool.node(0)
    per_node = claims_per_profile(node, gates.partitionable_devices)
    return {
        profile: {
            "perGpu": count // pool.gpus_per_node,
            "perNode": count,
            "atMaxSize": count * pool.max_nodes,
        }
        for profile, count in per_node.items()
    }


def exhausted(counters: Iterable[tuple[str, str]]) -> str:
    """`gpu-0-counter-set: memory-slice-0, multiprocessors; ...` (sorted)."""
    by_set: dict[str, list[str]] = {}
    for counter_set, counter in sorted(counters):
        by_set.setdefault(counter_set, []).append(counter)
    return "; ".join(f"{name}: {', '.join(counters)}" for name, counters in by_set.items())
