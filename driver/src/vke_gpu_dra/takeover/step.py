"""Step: claims NVIDIA's plugin prepared on this node (the `takeover` package does the work).

* start: the claims of NVIDIA's checkpoint join the takeover's ledger, before the checkpoint is read;
* admit, first of all steps: a claim NVIDIA completed answers under this plugin's CDI ids, with NVIDIA's
  time-slice and MPS daemon left in force (`work.decided`: no sharing of this plugin's own); one NVIDIA
  only started has its leftovers released and is admitted anew by the steps after this one;
* clean, first: NVIDIA's leftovers of an adopted claim undone (nothing for any other claim); GPUs the
  node's other claims hold keep their settings;
* holders: adopted claims not released that kubelet has not prepared here again hold their devices.
"""

from __future__ import annotations

from collections.abc import Mapping

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, PreparedDevice

from ..claims.checkpoint import ClaimEntry, ClaimState
from ..claims.step import ClaimWork, Node, Step
from ..sharing.plan import devices_in_use
from . import AdoptionError, CleanupError, NvidiaClaim, NvidiaClaimState, Takeover
from .adoption import device_names


class TakeoverStep(Step):
    name = "takeover"

    def __init__(self, takeover: Takeover) -> None:
        self.takeover = takeover

    def start(self, node: Node) -> None:
        self.takeover.start()

    def admit(self, work: ClaimWork, node: Node) -> None:
        ref = work.ref
        claim = self.takeover.adopted(ref.uid)
        if claim is None:
            return
        self.takeover.name(ref.uid, ref.namespace, ref.name)  # reconciliation can read it now
        if claim.state is not NvidiaClaimState.PREPARE_COMPLETED:
            self.clean(ref, None, node, work.deadline)
            return
        try:
            answer = self.takeover.answer(claim, pool_name=node.pool_name, devices=node.devices)
        except AdoptionError as exc:
            raise ClaimError(f"claim {work.label}: {exc}") from None
        work.devices, work.prepared = answer.devices, answer.prepared
        work.edits.update(answer.extra_edits)
        work.own_spec = work.decided = True

    def clean(self, ref: ClaimRef, entry: ClaimEntry | None, node: Node, deadline: float) -> None:
        try:
            self.takeover.release(
                ref.uid,
                devices=node.devices,
                in_use=devices_in_use(node.others(ref.uid)),
                deadline=deadline,
            )
        except CleanupError as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: {exc}") from None

    def holders(self, node: Node) -> Mapping[str, ClaimEntry]:
        return {
            uid: adopted_entry(claim, driver_name=node.driver_name, pool_name=node.pool_name)
            for uid, claim in self.takeover.unreleased().items()
        }

    def name_claim(self, uid: str, namespace: str, name: str) -> None:
        """Record the namespace/name reconciliation found for adopted claim `uid` (NVIDIA 25.8.1 records
        none), as kubelet's prepare would."""
        self.takeover.name(uid, namespace, name)

    def unreleased_uids(self) -> set[str]:
        return set(self.takeover.unreleased())


def adopted_entry(claim: NvidiaClaim, *, driver_name: str, pool_name: str) -> ClaimEntry:
    """An adopted claim (not released) as a checkpoint entry: its namespace/name ("" when NVIDIA's file
    and kubelet named none), and the devices NVIDIA prepared (allocated, for one it only started)."""
    requests: dict[str, tuple[str, ...]] = {}
    for group in claim.groups:
        for d in group.devices:
            requests[d.device_name] = requests.get(d.device_name, ()) + d.requests
    for a in claim.allocated:
        if a.driver == driver_name:
            requests.setdefault(a.device, (a.request,))
    devices = tuple(
        PreparedDevice(
            request_names=requests.get(n, ()), pool_name=pool_name, device_name=n, cdi_device_ids=()
        )
        for n in device_names(claim, driver_name)
    )
    state = (
        ClaimState.PREPARE_COMPLETED
        if claim.state is NvidiaClaimState.PREPARE_COMPLETED
        else ClaimState.PREPARE_STARTED
    )
    return ClaimEntry(claim.uid, claim.namespace, claim.name, state, devices)
