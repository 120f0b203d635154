"""Step: GPU sharing, time-slicing and MPS (the `sharing` package does the work).

* admit: the claim's sharing plan (`sharing.plan.plan_claim`, pure), checked against the node's other
  claims and recorded in its PrepareStarted entry before anything is changed; a node without sharing
  refuses it there;
* set up: apply the plan (`SharingManager.prepare`); the MPS pipe and shm become per-device CDI edits
  (a claim with MPS gets a spec of its own, known at admit; a time-sliced one changes no edits). An
  MPS daemon that exists but is not Ready yet (`MpsDaemonPending`: its image may take longer than a
  call to pull) stays with the entry that records it, and kubelet's retry waits for it again;
* clean: undo the record (an MPS daemon kept across failed prepares included);
* restore: after a reboot the settings are applied again from the record alone; the MPS edits come back
  whenever the claim's spec is written again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef

from ..claims.checkpoint import ClaimEntry
from ..claims.step import ClaimWork, Node, Step
from .manager import CdiEdits, MpsDaemonPending
from .plan import Plan, plan_claim
from .records import STEP, SharingRecord

if TYPE_CHECKING:
    from .manager import SharingManager

log = logging.getLogger(__name__)


class SharingStep(Step):
    """`manager` None: no sharing on this node; a claim asking for it is refused at admit."""

    name = STEP
    record = SharingRecord
    roll_back_failed = True  # a GPU's settings are not left half-changed by a failed prepare

    def __init__(self, manager: SharingManager | None) -> None:
        self.manager = manager

    def admit(self, work: ClaimWork, node: Node) -> None:
        plan = plan_claim(work.ref, work.allocated, node.others(work.ref.uid))
        if plan:
            self._manager(work.ref)  # a node without sharing refuses it before anything is written
        work.plans[self.name], work.records[self.name] = plan, plan.record
        if plan.mps:
            work.own_spec = True  # its devices get the daemon's pipe and shm

    def set_up(self, work: ClaimWork, node: Node) -> None:
        plan = work.plans.get(self.name)
        if not isinstance(plan, Plan) or not plan:
            return
        try:
            edits = self._manager(work.ref).prepare(work.ref, plan, work.deadline)
        except MpsDaemonPending:
            log.info(
                "MPS control daemon not ready yet: it stays for kubelet's retry",
                extra={"fields": {"claim": work.label, "uid": work.ref.uid}},
            )
            raise
        self._add_edits(work, edits)

    def clean(self, ref: ClaimRef, entry: ClaimEntry | None, node: Node, deadline: float) -> None:
        record = SharingRecord.of(entry)
        if not record:
            return
        self._manager(ref).unprepare(
            ref, record, devices=node.devices, others=node.others(ref.uid), deadline=deadline
        )

    def restore(self, work: ClaimWork, node: Node, deadline: float | None) -> None:
        record = SharingRecord.of(work.restoring)
        if not record:
            return
        manager = self._manager(work.ref)
        if deadline is not None:
            manager.reapply_after_reboot(work.ref, record, devices=node.devices, deadline=deadline)
        self._add_edits(work, manager.restore(record))

    @staticmethod
    def _add_edits(work: ClaimWork, edits: CdiEdits) -> None:
        work.edits.update(edits)

    def _manager(self, ref: ClaimRef) -> SharingManager:
        if self.manager is None:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: GPU sharing is not available on this node")
        return self.manager
