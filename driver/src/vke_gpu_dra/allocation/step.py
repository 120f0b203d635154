"""Step: the claim's devices on this node, and the held-devices guard (`guard.find_holders`).

Admit reads the claim's allocation results for this driver and pool (`allocation.allocated_devices`)
and refuses, with `DevicesHeld`, devices that other claims hold where the overlap is not allowed:
the checkpoint's entries as the batch holds them (a claim admitted earlier in the same batch holds its
devices already), the claims other steps know (`Step.holders`: adopted from NVIDIA's plugin) and the
devices that share a GPU's memory (`Step.overlapping`: dynamic MIG). The state then has the holders
checked against the API server and tries again (`DeviceState.prepare`).
"""

from __future__ import annotations

from collections.abc import Sequence

from vke_gpu_dra_core.featuregates import FeatureGates

from ..claims.step import ClaimWork, Node, Step, held_by_steps, overlaps_of
from . import allocated_devices
from .guard import DevicesHeld, admin_access_devices, find_holders


class AllocationStep(Step):
    name = "allocation"

    def __init__(self, gates: FeatureGates, guarded_by: Sequence[Step] = ()) -> None:
        """`guarded_by`: the steps whose `holders` and `overlapping` the guard sees."""
        self.gates = gates
        self.guarded_by = tuple(guarded_by)
        self._overlapping = overlaps_of(self.guarded_by)

    def admit(self, work: ClaimWork, node: Node) -> None:
        work.allocated = allocated_devices(
            work.ref,
            work.claim,
            driver_name=node.driver_name,
            pool_name=node.pool_name,
            devices=node.devices,
            gates=self.gates,
        )
        work.devices = list({a.device.name: a.device for a in work.allocated}.values())
        admin = admin_access_devices(work.claim, driver_name=node.driver_name, pool_name=node.pool_name)
        known = held_by_steps(self.guarded_by, node)
        holders = find_holders(
            work.ref,
            work.allocated,
            [*node.others(work.ref.uid), *known.values()],
            admin=admin,
            tolerated=work.tolerated,
            adopted=set(known),
            overlapping=self._overlapping,
        )
        if holders:
            raise DevicesHeld(work.ref, holders)
