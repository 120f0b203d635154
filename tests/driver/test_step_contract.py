"""The `Step` contract, as the claim lifecycle keeps it: which hook runs when, in which order, with what;
shown with recording steps around the real allocation and CDI steps."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra import reboot
from vke_gpu_dra.batch import BatchRunner, Op
from vke_gpu_dra.checkpoint import CheckpointStore, ClaimEntry, ClaimState
from vke_gpu_dra.lifecycle import ClaimLifecycle
from vke_gpu_dra.nodelock import LOCK_FILE, NodeLock
from vke_gpu_dra.steps import ClaimWork, Node, Step
from vke_gpu_dra.steps.allocation import AllocationStep
from vke_gpu_dra.steps.cdi import CdiStep
from vke_gpu_dra_core import facts, featuregates
from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, PreparedDevice
from vke_gpu_dra_core.discovery.simulated import SimulatedSource

from tests.driver.claims import claim, result

POOL = "node-a"
DEVICES = SimulatedSource(2, "NVIDIA A30", POOL).discover().devices
REF = ClaimRef("default", "c", "uid-1")


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


class LifecycleNode:
    """A lifecycle with `first`, the allocation step, `second` and the CDI step, behind the batch runner."""

    def __init__(self, root: Path) -> None:
        self.log: list[tuple[str, str, Any]] = []
        self.first, self.second = Recording("first", self.log), Recording("second", self.log)
        cdi_root, data = root / "cdi", root / "plugin"
        data.mkdir(parents=True)
        self.store = CheckpointStore(data)
        self.lifecycle = ClaimLifecycle(
            driver_name=facts.DRIVER_NAME,
            pool_name=POOL,
            devices={d.name: d for d in DEVICES},
            store=self.store,
            cdi_root=cdi_root,
            steps=[
                self.first,
                AllocationStep(featuregates.FeatureGates()),
                self.second,
                CdiStep(cdi_root, base_devices=DEVICES),
            ],
        )
        lock = NodeLock(data / LOCK_FILE)
        self.runner = BatchRunner(lock, self.lifecycle, lambda: str(self.store.path))
        with lock.held(time.monotonic() + 10):
            reboot.start(self.lifecycle, data, boot_id=None, restore_wait=1.0)

    def prepare(self) -> list[PreparedDevice]:
        op = self.runner.submit(Op("prepare", REF, claim("uid-1", result("gpu-1")), time.monotonic() + 10))
        assert op.result is not None
        return op.result

    def unprepare(self) -> None:
        self.runner.submit(Op("unprepare", REF, None, time.monotonic() + 10))

    def hooks(self, hook: str) -> list[tuple[str, Any]]:
        return [(name, seen) for name, called, seen in self.log if called == hook]


@pytest.fixture
def node(tmp_path: Path) -> LifecycleNode:
    return LifecycleNode(tmp_path)


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
