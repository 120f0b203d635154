"""The `Step` contract, as the claim lifecycle keeps it: which hook runs when, in which order, with what;
shown with recording steps around the real allocation and CDI steps."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra.allocation.step import AllocationStep
from vke_gpu_dra.cdi.step import CdiStep
from vke_gpu_dra.claims import reboot
from vke_gpu_dra.claims.batch import BatchRunner, Op
from vke_gpu_dra.claims.checkpoint import CheckpointStore, ClaimEntry, ClaimState, encode
from vke_gpu_dra.claims.lifecycle import ClaimLifecycle
from vke_gpu_dra.claims.step import ClaimPending, ClaimWork, Node, Step, record_types
from vke_gpu_dra.nodelock import LOCK_FILE, NodeLock
from vke_gpu_dra.partitions.records import MigDevices
from vke_gpu_dra.sharing.records import SharingRecord
from vke_gpu_dra.state import RECORD_TYPES, default_steps
from vke_gpu_dra_core import facts, featuregates
from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, PreparedDevice
from vke_gpu_dra_core.discovery.simulated import SimulatedSource

from tests.driver.claim_objects import claim, result

POOL = "node-a"
DEVICES = SimulatedSource(2, "NVIDIA A30", POOL).discover().devices
REF = ClaimRef("default", "c", "uid-1")


@dataclass(frozen=True)
class Changed:
    """A recording step's record: the devices it "changed" for a claim, and a generation a restore bumps."""

    devices: tuple[str, ...] = ()
    generation: int = 0

    def __bool__(self) -> bool:
        return bool(self.devices)

    def held_devices(self) -> set[str]:
        return set(self.devices)

    def to_json(self) -> dict[str, Any]:
        return {"devices": list(self.devices), "generation": self.generation}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Changed:
        if not isinstance(data, dict) or set(data) != {"devices", "generation"}:
            raise ValueError(f"{where} must be an object with devices and generation, got {data!r}")
        return cls(tuple(data["devices"]), data["generation"])


class Recording(Step):
    """Records each hook it is called with into a log shared by the steps; can decide, fail or lose."""

    def __init__(self, name: str, log: list[tuple[str, str, Any]]) -> None:
        self.name = name
        self.log = log
        self.decides = False
        self.fails_set_up = False
        self.fails_clean = False
        self.is_lost = False

    def start(self, node: Node) -> None:
        self.log.append((self.name, "start", sorted(node.entries)))

    def loaded(self, node: Node) -> None:
        self.log.append((self.name, "loaded", sorted(node.entries)))

    def admit(self, work: ClaimWork, node: Node) -> None:
        self.log.append((self.name, "admit", [d.name for d in work.devices]))
        if self.decides:
            work.decided = True

    def set_up(self, work: ClaimWork, node: Node) -> None:
        self.log.append((self.name, "set_up", work.ref.uid in node.entries))
        if self.fails_set_up:
            raise ClaimError(f"claim {work.label}: {self.name} failed")

    def clean(self, ref: ClaimRef, entry: ClaimEntry | None, node: Node, deadline: float) -> None:
        self.log.append((self.name, "clean", None if entry is None else entry.state))
        if self.fails_clean:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: {self.name} cannot undo")

    def lost(self, entry: ClaimEntry, node: Node) -> bool:
        return self.is_lost

    def restore(self, work: ClaimWork, node: Node, deadline: float | None) -> None:
        assert work.restoring is not None
        self.log.append((self.name, "restore", work.restoring.state))


class Keeping(Recording):
    """A recording step that keeps a record (`Changed`) of the devices it changes for each claim."""

    record = Changed

    def __init__(self, name: str, log: list[tuple[str, str, Any]]) -> None:
        super().__init__(name, log)
        self.pending = False
        self.bumps_on_restore = False
        self.roll_back_failed = False

    def admit(self, work: ClaimWork, node: Node) -> None:
        super().admit(work, node)
        work.records[self.name] = Changed(tuple(d.name for d in work.devices))

    def set_up(self, work: ClaimWork, node: Node) -> None:
        entry = node.entries[work.ref.uid]
        self.log.append((self.name, "record at set_up", (entry.state, entry.record(self.name))))
        if self.pending:
            raise ClaimPending(f"claim {work.label}: {self.name} under way")
        super().set_up(work, node)

    def clean(self, ref: ClaimRef, entry: ClaimEntry | None, node: Node, deadline: float) -> None:
        self.log.append((self.name, "record at clean", None if entry is None else entry.record(self.name)))
        super().clean(ref, entry, node, deadline)

    def restore(self, work: ClaimWork, node: Node, deadline: float | None) -> None:
        super().restore(work, node, deadline)
        record = work.records[self.name]
        assert isinstance(record, Changed)
        if self.bumps_on_restore:
            work.records[self.name] = Changed(record.devices, record.generation + 1)

    def device_uuids(self, entry: ClaimEntry) -> Mapping[str, str]:
        record = entry.record(self.name)
        assert isinstance(record, Changed)
        return {d: f"UUID-{d}-{record.generation}" for d in record.devices}


class LifecycleNode:
    """A lifecycle with `first`, the allocation step, `second` and the CDI step, behind the batch runner."""

    def __init__(self, root: Path, *, keeping: bool = False) -> None:
        """`keeping`: a step that keeps a record (`Keeping`) goes after `second`."""
        self.log: list[tuple[str, str, Any]] = []
        self.first, self.second = Recording("first", self.log), Recording("second", self.log)
        self.keeping = Keeping("keeping", self.log)
        cdi_root, data = root / "cdi", root / "plugin"
        data.mkdir(parents=True)
        steps = [
            self.first,
            AllocationStep(featuregates.FeatureGates()),
            self.second,
            CdiStep(cdi_root, base_devices=DEVICES),
        ]
        if keeping:
            steps.insert(3, self.keeping)
        self.data = data
        self.store = CheckpointStore(data, records=record_types(steps))
        self.lifecycle = ClaimLifecycle(
            driver_name=facts.DRIVER_NAME,
            pool_name=POOL,
            devices={d.name: d for d in DEVICES},
            store=self.store,
            cdi_root=cdi_root,
            steps=steps,
        )
        lock = NodeLock(data / LOCK_FILE)
        self.runner = BatchRunner(lock, self.lifecycle, lambda: str(self.store.path))
        with lock.held(time.monotonic() + 10):
            reboot.start(self.lifecycle, data, boot_id=None, restore_wait=1.0)

    def prepare(self) -> list[PreparedDevice]:
        op = self.prepare_op()
        assert op.result is not None
        return op.result

    def prepare_op(self) -> Op:
        return self.runner.submit(Op("prepare", REF, claim("uid-1", result("gpu-1")), time.monotonic() + 10))

    def unprepare(self) -> None:
        self.runner.submit(Op("unprepare", REF, None, time.monotonic() + 10))

    def hooks(self, hook: str) -> list[tuple[str, Any]]:
        return [(name, seen) for name, called, seen in self.log if called == hook]


@pytest.fixture
def node(tmp_path: Path) -> LifecycleNode:
    return LifecycleNode(tmp_path)


@pytest.fixture
def keeping(tmp_path: Path) -> LifecycleNode:
    return LifecycleNode(tmp_path, keeping=True)


def test_start_runs_every_step_before_and_after_the_checkpoint_is_read(node: LifecycleNode) -> None:
    assert [(name, hook) for name, hook, _ in node.log] == [
        ("first", "start"),
        ("second", "start"),
        ("first", "loaded"),
        ("second", "loaded"),
    ]


def test_a_prepare_admits_then_sets_up_in_order_and_an_unprepare_cleans_in_reverse(
    node: LifecycleNode,
) -> None:
    devices = node.prepare()
    assert [d.device_name for d in devices] == ["gpu-1"]
    # admit in order: the allocation step between them found the devices for the steps after it
    assert node.hooks("admit") == [("first", []), ("second", ["gpu-1"])]
    # set up in order, the claim's entry already known to the batch
    assert node.hooks("set_up") == [("first", True), ("second", True)]
    assert node.store.load().entries["uid-1"].state is ClaimState.PREPARE_COMPLETED
    node.prepare()  # a completed claim answers from its entry: no step admits it again
    assert len(node.hooks("admit")) == 2 and node.hooks("restore") == []
    node.unprepare()
    assert node.hooks("clean") == [
        ("second", ClaimState.PREPARE_COMPLETED),
        ("first", ClaimState.PREPARE_COMPLETED),
    ]
    assert node.store.load().entries == {}


def test_a_step_that_decides_skips_the_admit_of_the_steps_after_it(node: LifecycleNode) -> None:
    node.first.decides = True
    node.prepare()
    assert node.hooks("admit") == [("first", [])]
    assert [name for name, _ in node.hooks("set_up")] == ["first", "second"]  # every step sets up


def test_a_failed_set_up_answers_its_error_and_kubelets_retry_admits_the_claim_again(
    node: LifecycleNode,
) -> None:
    """A claim that changes nothing outside the checkpoint before it completes (answered from the base
    spec) has no started entry on disk: a failed set-up keeps nothing, and the retry starts over."""
    node.second.fails_set_up = True
    with pytest.raises(ClaimError, match="claim default/c: second failed"):
        node.prepare()
    assert node.store.load().entries == {}
    node.second.fails_set_up = False
    node.prepare()
    assert [name for name, _ in node.hooks("admit")] == ["first", "second", "first", "second"]
    assert node.store.load().entries["uid-1"].state is ClaimState.PREPARE_COMPLETED


def test_a_failed_clean_keeps_the_entry_for_the_next_unprepare(node: LifecycleNode) -> None:
    node.prepare()
    node.first.fails_clean = True
    with pytest.raises(ClaimError, match="first cannot undo"):
        node.unprepare()
    assert "uid-1" in node.store.load().entries
    node.first.fails_clean = False
    node.unprepare()
    assert node.store.load().entries == {}


def test_a_completed_claim_a_step_says_lost_is_restored_by_every_step_in_order(node: LifecycleNode) -> None:
    node.prepare()
    node.second.is_lost = True
    node.prepare()
    assert node.hooks("restore") == [
        ("first", ClaimState.PREPARE_COMPLETED),
        ("second", ClaimState.PREPARE_COMPLETED),
    ]


def test_an_unprepare_of_an_unknown_claim_gives_every_step_no_entry(node: LifecycleNode) -> None:
    node.unprepare()
    assert node.hooks("clean") == [("second", None), ("first", None)]


def test_a_steps_record_is_on_disk_before_its_set_up_and_kept_under_its_name(keeping: LifecycleNode) -> None:
    op = keeping.prepare_op()
    started = (ClaimState.PREPARE_STARTED, Changed(("gpu-1",)))
    assert keeping.hooks("record at set_up") == [("keeping", started)]
    entry = keeping.store.load().entries["uid-1"]
    assert entry.state is ClaimState.PREPARE_COMPLETED and dict(entry.records) == {
        "keeping": Changed(("gpu-1",))
    }
    assert op.entry == entry, "the answered entry, for the steps' status hooks"
    assert keeping.keeping.device_uuids(entry) == {"gpu-1": "UUID-gpu-1-0"}
    [stored] = stored_claims(keeping)
    assert stored["keeping"] == {"devices": ["gpu-1"], "generation": 0}
    # Another store of the same steps reads it back; the guard holds what the record holds.
    assert CheckpointStore(keeping.data, records=record_types([keeping.keeping])).load().entries == {
        "uid-1": entry
    }
    assert entry.held_devices() == {"gpu-1"}
    keeping.unprepare()
    assert keeping.hooks("record at clean") == [("keeping", Changed(("gpu-1",)))]
    assert keeping.store.load().entries == {}


def stored_claims(node: LifecycleNode) -> list[dict[str, Any]]:
    """The claims as the checkpoint's reader sees them (the file with its journal applied), as JSON."""
    return list(json.loads(encode(node.store.load().entries))["claims"])


def test_a_failed_set_up_keeps_the_started_entry_unless_a_step_with_a_record_asks_for_a_roll_back(
    keeping: LifecycleNode,
) -> None:
    keeping.second.fails_set_up = True
    with pytest.raises(ClaimError, match="second failed"):
        keeping.prepare()
    kept = keeping.store.load().entries["uid-1"]
    assert kept.state is ClaimState.PREPARE_STARTED and kept.record("keeping") == Changed(("gpu-1",))
    assert keeping.hooks("clean") == [], "nothing undone: unprepare cleans it"
    keeping.unprepare()
    keeping.keeping.roll_back_failed = True
    with pytest.raises(ClaimError, match="second failed"):
        keeping.prepare()
    assert keeping.store.load().entries == {}, "rolled back: cleaned, and its entry gone"
    assert keeping.hooks("record at clean")[-1] == ("keeping", Changed(("gpu-1",)))


def test_a_set_up_under_way_is_never_rolled_back(keeping: LifecycleNode) -> None:
    keeping.keeping.roll_back_failed = True
    keeping.keeping.pending = True
    with pytest.raises(ClaimPending, match="keeping under way"):
        keeping.prepare()
    assert keeping.store.load().entries["uid-1"].state is ClaimState.PREPARE_STARTED
    assert keeping.hooks("clean") == []
    keeping.keeping.pending = False
    keeping.prepare()  # kubelet's retry: the started claim is admitted and set up again
    assert keeping.store.load().entries["uid-1"].state is ClaimState.PREPARE_COMPLETED


def test_a_record_a_restore_changes_is_written_and_answered(keeping: LifecycleNode) -> None:
    keeping.prepare()
    keeping.second.is_lost = True
    keeping.keeping.bumps_on_restore = True
    op = keeping.prepare_op()
    assert op.entry is not None and op.entry.record("keeping") == Changed(("gpu-1",), 1)
    assert keeping.store.load().entries["uid-1"].record("keeping") == Changed(("gpu-1",), 1)
    assert keeping.keeping.device_uuids(op.entry) == {"gpu-1": "UUID-gpu-1-1"}


def test_the_plugins_checkpoint_reads_every_record_its_steps_keep(tmp_path: Path) -> None:
    steps = default_steps(
        devices=DEVICES,
        cdi_root=tmp_path / "cdi",
        plugin_data_dir=tmp_path,
        gates=featuregates.FeatureGates(),
    )
    assert record_types(steps) == RECORD_TYPES == {"partitions": MigDevices, "sharing": SharingRecord}
