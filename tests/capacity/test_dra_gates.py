"""The planner's gates per `--kubernetes-version` are core's table (`vke_gpu_dra_core.dra_gates`), the one
the driver and the stack config read."""

from __future__ import annotations

from vke_gpu_dra_core import dra_gates
from vke_gpu_dra_core.versions import parse_major_minor
from vke_gpu_dra_planner import gates as planner_gates


def test_the_planners_versions_follow_cores_table() -> None:
    for version, gates in planner_gates.GATES.items():
        kept = dra_gates.slice_fields_kept(parse_major_minor(version) or (0, 0))
        assert gates.consumable_capacity == ("allowMultipleAllocations" in kept)
        assert gates.partitionable_devices == ("sharedCounters" in kept)
        assert gates.device_taints == ("taints" in kept)
        assert gates.extended_resource == (version == "1.36")
