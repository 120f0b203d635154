"""The steps of the claim lifecycle: one feature each, called in order through one small interface.

`lifecycle.ClaimLifecycle` takes a claim through its phases and calls every step's hook of that phase in
the order the steps were given (`DeviceState` gives takeover, allocation, dynamic MIG, sharing, device
metadata, CDI):

* `start(node)`: at start-up, under the node lock, before the checkpoint is read (NVIDIA's claims
  adopted, temp files of interrupted writes removed, the base CDI spec written);
* `loaded(node)`: at start-up, once the checkpoint's entries are known (MIG devices no entry owns);
* `admit(work, node)`: a new prepare, before anything is changed on the node: check the claim, plan,
  say what it will hold (`ClaimWork`); a step that answers the claim by itself sets `work.decided`, and
  the steps after it are skipped;
* `set_up(work, node)`: its entry is on disk (when `work.durable_start`): apply the plan;
* `clean(ref, entry, node, deadline)`: undo what `entry` records (an unprepare, a ghost, a failed
  prepare's roll-back), in either state; raises ClaimError and the entry stays;
* `lost(entry, node)`: a completed claim lost something this step gives (its CDI spec vanished);
* `restore(work, node, deadline)`: a completed claim gets back what it lost, `work` rebuilt from its
  entry (`work.restoring`): its CDI spec on a repeated prepare; after a reboot (`deadline` given) its
  MIG devices and GPU settings too. What changed (new MIG ids) goes back into `work`;
* `holders(node)` and `overlapping(name)`: what the held-devices guard must see besides the
  checkpoint (claims known only to a step, devices that share a GPU's memory).

Every hook has a no-op default: a step implements the phases it takes part in. A new feature is a new
step, not more methods on the state. Steps never see each other: what they pass on is in `ClaimWork`.

A step that changes something for a claim outside the checkpoint declares its record type (`record`):
its record goes into `ClaimWork.records` under the step's `name` at admit, and into the claim's entry
from there (the checkpoint reads it back with `record_types`). What it needs between admit and set-up
it keeps in `ClaimWork.plans` under its name. A step whose claims are rolled back when their set-up
fails says so (`roll_back_failed`); a set-up still under way (`ClaimPending`) is never rolled back. A
step that adds to a prepared claim's status gives it through `device_uuids`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, PreparedDevice

from .checkpoint import ClaimEntry, ClaimState, Record, RecordType

if TYPE_CHECKING:
    from ..allocation import AllocatedDevice

#: CDI edits by device name (env, mounts, device nodes), as the sharing and takeover steps give them.
Edits = dict[str, dict[str, Any]]


@dataclass
class Node:
    """What the steps see of the node: its devices and the checkpoint's entries as the batch holds them
    (the caller holds the node lock; `entries` is changed in place by the lifecycle only)."""

    driver_name: str
    pool_name: str
    devices: Mapping[str, Device]
    entries: dict[str, ClaimEntry] = field(default_factory=dict)

    def others(self, uid: str) -> list[ClaimEntry]:
        """The entries of the node's other claims."""
        return [e for other, e in self.entries.items() if other != uid]


@dataclass(eq=False)
class ClaimWork:
    """One claim being prepared: what the steps found, planned and made, in the order they ran."""

    ref: ClaimRef
    claim: Mapping[str, Any]
    deadline: float
    #: UIDs of holders checked live whose overlap with this claim is allowed (admin access).
    tolerated: frozenset[str] = frozenset()
    #: A step answered the claim by itself (adopted from NVIDIA's plugin): later steps' admit is skipped.
    decided: bool = False
    #: The claim's results on this node (the allocation step), one per result.
    allocated: list[AllocatedDevice] = field(default_factory=list)
    #: The claim's devices, each once (a MIG placement as its created MIG device once set up).
    devices: list[Device] = field(default_factory=list)
    #: Each step's record of what it changes for the claim, by step name: written with the claim's
    #: PrepareStarted entry before anything is changed, and updated by the step as it goes.
    records: dict[str, Record] = field(default_factory=dict)
    #: What a step keeps between its admit and its set-up, by step name (not written anywhere).
    plans: dict[str, Any] = field(default_factory=dict)
    #: Per-device CDI edits of the claim's own (MPS pipe and shm, NVIDIA's MPS edits of an adopted claim).
    edits: Edits = field(default_factory=dict)
    #: The claim needs a CDI spec of its own (its devices carry edits of their own); else its CDI ids
    #: name the node's base spec.
    own_spec: bool = False
    #: The answer: one prepared device per result, with its CDI ids.
    prepared: list[PreparedDevice] = field(default_factory=list)
    #: A completed claim's entry being restored (`Step.restore`); None while preparing.
    restoring: ClaimEntry | None = None

    @property
    def label(self) -> str:
        return f"{self.ref.namespace}/{self.ref.name}"

    @property
    def durable_start(self) -> bool:
        """Something outside the checkpoint changes before the claim is complete: its PrepareStarted
        entry must be on disk first, so that a crash in between leaves what unprepare cleans."""
        return self.own_spec or any(self.records.values())

    def record(self, step: str) -> Record | None:
        """The record step `step` keeps for the claim so far (None: none)."""
        return self.records.get(step)

    @property
    def records_changed(self) -> bool:
        """A restore changed a step's record (MIG devices created again with new ids)."""
        kept = {name: record for name, record in self.records.items() if record}
        return self.restoring is not None and kept != dict(self.restoring.records)

    def entry(self, state: ClaimState) -> ClaimEntry:
        """The claim's checkpoint entry in `state`, holding its devices (so the held-devices guard of a
        claim admitted after it in the same batch sees them) and the steps' records."""
        return ClaimEntry(
            self.ref.uid, self.ref.namespace, self.ref.name, state, tuple(self.prepared), self.records
        )


class ClaimPending(ClaimError):
    """A set-up under way that the claim's next prepare waits for again (an MPS daemon not Ready yet): the
    claim keeps its PrepareStarted entry and what it records, and is not rolled back."""


class Step:
    """One feature's part in the claim lifecycle (see the module docstring); every hook is optional."""

    #: The step's name in logs and errors, and the key of its record in a claim's entry.
    name = "step"
    #: The type of the record the step keeps in a claim's entry (None: it keeps none).
    record: ClassVar[RecordType | None] = None
    #: A claim with a record of this step is rolled back (cleaned, its entry removed) when its set-up
    #: fails; other failed claims keep their PrepareStarted entry for unprepare to clean.
    roll_back_failed: bool = False

    def start(self, node: Node) -> None:
        """Start-up, before the checkpoint is read."""

    def loaded(self, node: Node) -> None:
        """Start-up, once `node.entries` holds the checkpoint's entries."""

    def admit(self, work: ClaimWork, node: Node) -> None:
        """A new prepare: check and plan, nothing changed on the node; raises ClaimError."""

    def set_up(self, work: ClaimWork, node: Node) -> None:
        """Apply what `admit` planned; raises ClaimError, the claim's answer: a claim whose start was
        durable keeps its PrepareStarted entry for unprepare to clean (one with GPU sharing is rolled
        back at once), one that changed nothing outside the checkpoint keeps nothing."""

    def clean(self, ref: ClaimRef, entry: ClaimEntry | None, node: Node, deadline: float) -> None:
        """Undo what `entry` records (None: the claim has no entry of ours); raises ClaimError."""

    def lost(self, entry: ClaimEntry, node: Node) -> bool:
        """A completed claim lost something this step gives it."""
        return False

    def restore(self, work: ClaimWork, node: Node, deadline: float | None) -> None:
        """Give a completed claim (`work.restoring`) back what it lost; `deadline` after a reboot."""

    def holders(self, node: Node) -> Mapping[str, ClaimEntry]:
        """Claims known only to this step that hold devices, as entries, by UID."""
        return {}

    def name_claim(self, uid: str, namespace: str, name: str) -> None:
        """Reconciliation found the namespace/name of claim `uid`, which only this step knows (`holders`)."""

    def overlapping(self, device_name: str) -> AbstractSet[str]:
        """The devices that share a GPU's memory with `device_name` (dynamic MIG)."""
        return frozenset()

    def device_uuids(self, entry: ClaimEntry) -> Mapping[str, str]:
        """For a prepared claim's status: the UUID of each device this step created for the claim, by
        the allocated device's name."""
        return {}


def record_types(steps: Iterable[Step | type[Step]]) -> dict[str, RecordType]:
    """The record type of each step (or step class) that keeps one, by step name: what the checkpoint
    reads."""
    found: dict[str, RecordType] = {}
    for step in steps:
        if step.record is not None:
            if step.name in found:
                raise ValueError(f"two steps keep a record under the name {step.name!r}")
            found[step.name] = step.record
    return found


def held_by_steps(steps: Iterable[Step], node: Node) -> dict[str, ClaimEntry]:
    """Every step's `holders`, without the claims the checkpoint has."""
    found: dict[str, ClaimEntry] = {}
    for step in steps:
        found.update(step.holders(node))
    return {uid: e for uid, e in found.items() if uid not in node.entries}


def overlaps_of(steps: Sequence[Step]) -> Callable[[str], AbstractSet[str]]:
    """One `overlapping` for the guard, the union of every step's."""

    def overlapping(device_name: str) -> AbstractSet[str]:
        found: set[str] = set()
        for step in steps:
            found |= step.overlapping(device_name)
        return found

    return overlapping
