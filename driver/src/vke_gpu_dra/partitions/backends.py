"""Where dynamic MIG devices are made: NVML on a node with GPUs, a file on a simulated node.

Both answer the same five questions (`MigBackend`): the MIG instances of a GPU, its GPU instances
without a compute instance (an interrupted create), create, destroy, and the capability device nodes
of an instance.

Simulated GPUs (`SimulatedMigBackend`) keep their instances in `simulated-mig.json` in the plugin data
directory, written atomically: a create allocates the next GPU-instance id and a random `MIG-` UUID and
refuses a placement that overlaps an existing instance, as NVML does; the claim's CDI device carries the
UUID in its environment (simulated devices have no device nodes). The file is the simulated node's
"hardware": it survives plugin restarts, and the start-up clean-up destroys what no claim owns.
"""

from __future__ import annotations

import json
import threading
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from vke_gpu_dra_core.mig_partitions import MigPlacement, MigProfile

from ..discovery.mig_lifecycle import MigInstance, MigNotFoundError, MigPlacementTakenError
from ..discovery.migcaps import DEFAULT_PROC, mig_caps_nodes, read_mig_minors
from ..fsutil import atomic_write

if TYPE_CHECKING:
    from ..discovery.mig_lifecycle import MigLifecycle

SIMULATED_STATE_FILE: Final = "simulated-mig.json"


class MigBackend(Protocol):
    """MIG instances of this node's GPUs, by parent GPU UUID."""

    simulated: bool

    def instances(self, parent: str) -> list[MigInstance]: ...

    def without_compute(self, parent: str) -> list[tuple[int, MigPlacement]]: ...

    def create(self, parent: str, profile_id: int, start: int) -> MigInstance: ...

    def destroy(self, parent: str, gi_id: int, ci_id: int | None) -> None: ...

    def caps_nodes(self, instance: MigInstance) -> tuple[str, ...] | None: ...


class NvmlMigBackend:
    """MIG instances through NVML, one NVML session per call (`MigLifecycle.session`)."""

    simulated = False

    def __init__(self, lifecycle: MigLifecycle, proc_root: Path = DEFAULT_PROC) -> None:
        self._lifecycle = lifecycle
        self._proc_root = proc_root

    def instances(self, parent: str) -> list[MigInstance]:
        with self._lifecycle.session() as mig:
            return mig.instances(parent)

    def without_compute(self, parent: str) -> list[tuple[int, MigPlacement]]:
        with self._lifecycle.session() as mig:
            return mig.gpu_instances_without_compute(parent)

    def create(self, parent: str, profile_id: int, start: int) -> MigInstance:
        with self._lifecycle.session() as mig:
            return mig.create(parent, profile_id, start)

    def destroy(self, parent: str, gi_id: int, ci_id: int | None) -> None:
        with self._lifecycle.session() as mig:
            mig.destroy(parent, gi_id, ci_id)

    def caps_nodes(self, instance: MigInstance) -> tuple[str, ...] | None:
        minors = read_mig_minors(self._proc_root)
        if minors is None:
            return None
        return mig_caps_nodes(minors, instance.parent_minor, instance.gi_id, instance.ci_id)


class SimulatedMigBackend:
    """Simulated MIG instances of simulated GPUs, kept in a file (see the module's docstring)."""

    simulated = True

    def __init__(self, directory: Path, profiles: Mapping[str, tuple[int, Sequence[MigProfile]]]) -> None:
        """`profiles`: parent UUID -> (minor, the GPU's MIG profiles)."""
        self._path = directory / SIMULATED_STATE_FILE
        self._profiles = dict(profiles)
        self._guard = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path

    def _load(self) -> dict[str, list[dict[str, Any]]]:
        try:
            data = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}
        return {str(k): list(v) for k, v in dict(data.get("gpus", {})).items()}

    def _save(self, gpus: Mapping[str, list[dict[str, Any]]]) -> None:
        atomic_write(self._path, json.dumps({"gpus": gpus}, indent=1, sort_keys=True).encode() + b"\n")

    def _instance(self, parent: str, row: Mapping[str, Any]) -> MigInstance:
        return MigInstance(
            parent_uuid=parent,
            parent_minor=self._profiles[parent][0] if parent in self._profiles else 0,
            gi_id=int(row["gi"]),
            ci_id=int(row["ci"]),
            profile_id=int(row["profileId"]),
            placement=MigPlacement(int(row["start"]), int(row["size"])),
            uuid=str(row["uuid"]),
        )

    def instances(self, parent: str) -> list[MigInstance]:
        with self._guard:
            return [self._instance(parent, row) for row in self._load().get(parent, [])]

    def without_compute(self, parent: str) -> list[tuple[int, MigPlacement]]:
        return []  # a simulated create is one write: no GPU instance is ever left without its CI

    def create(self, parent: str, profile_id: int, start: int) -> MigInstance:
        if parent not in self._profiles:
            raise MigNotFoundError(f"GPU {parent}: no such simulated GPU with MIG profiles")
        profile = next((p for p in self._profiles[parent][1] if p.profile_id == profile_id), None)
        if profile is None:
            raise MigNotFoundError(f"GPU {parent}: no GPU-instance profile {profile_id}")
        placement = next((p for p in profile.placements if p.start == start), None)
        if placement is None:
            raise MigNotFoundError(f"GPU {parent}: profile {profile_id} has no placement starting at {start}")
        with self._guard:
            gpus = self._load()
            rows = gpus.setdefault(parent, [])
            for row in rows:
                if placement.overlaps(MigPlacement(int(row["start"]), int(row["size"]))):
                    raise MigPlacementTakenError(
                        f"GPU {parent}: nvmlDeviceCreateGpuInstanceWithPlacement failed: Insufficient "
                        f"Resources (placement {start}+{placement.size} overlaps GPU instance {row['gi']})"
                    )
            row = {
                "gi": max((int(r["gi"]) for r in rows), default=0) + 1,
                "ci": 0,
                "profileId": profile_id,
                "start": placement.start,
                "size": placement.size,
                "uuid": f"MIG-{uuidlib.uuid4()}",
            }
            rows.append(row)
            self._save(gpus)
        return self._instance(parent, row)

    def destroy(self, parent: str, gi_id: int, ci_id: int | None) -> None:
        with self._guard:
            gpus = self._load()
            rows = gpus.get(parent, [])
            kept = [r for r in rows if int(r["gi"]) != gi_id]
            if len(kept) != len(rows):
                gpus[parent] = kept
                self._save(gpus)

    def caps_nodes(self, instance: MigInstance) -> tuple[str, ...] | None:
        return ()
