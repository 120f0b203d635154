"""Prepared-claim state of this node: prepare/unprepare, backed by the checkpoint and CDI specs.

`DeviceState` puts three parts together (driver/docs/claim-lifecycle.md):

* the batch runner (`claims.batch`): the node lock, batching of calls that arrive together, deadlines,
  and the one place where what a step raises becomes the answer of the calls it was for;
* the claim lifecycle (`claims.lifecycle`, with `claims.reboot` for the start): admit, set up, complete,
  clean and restore a claim, keeping the checkpoint's entries;
* the steps (`claims.step.Step`, each in its feature's package), one feature each, which the lifecycle
  calls in order through one small interface: takeover of NVIDIA's claims, allocation (with the
  held-devices guard), dynamic MIG, GPU sharing, device metadata and CDI (with the driver's user-space).

Stateless between calls: no prepared claim is kept in memory, so a claim prepared by one process is
known to the other at its next call (the other pod of a seamless upgrade).

Ghosts and held devices (see `ghosts`, `allocation.guard` and `reconcile`): `clean_ghost` removes the
entry of a claim the API server no longer has for this node as an unprepare, through the same batches and
clean-up, only while the entry is still the one judged and no prepare of the claim answered since it was
judged. A
prepare whose devices another claim's entry holds meets `DevicesHeld` at admit; `prepare` then has
`holder_check` (the reconciler) check those claims at once, outside the lock, and tries again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, PreparedDevice
from vke_gpu_dra_core.featuregates import FeatureGates

from .allocation.guard import DevicesHeld, Holder
from .allocation.step import AllocationStep
from .cdi.step import CdiStep
from .claims import reboot
from .claims.batch import BatchRunner, Op
from .claims.checkpoint import CheckpointStore, ClaimEntry, ClaimState
from .claims.lifecycle import ClaimLifecycle, RecoveryPending
from .claims.reboot import RebootRestore
from .claims.step import record_types
from .metadata.step import MetadataStep
from .nodelock import LOCK_FILE, LockTimeout, NodeLock, StateLockTimeout
from .partitions.step import PartitionStep
from .sharing.step import SharingStep
from .takeover.step import TakeoverStep

if TYPE_CHECKING:
    from .claims.step import Step
    from .partitions.manager import PartitionManager
    from .sharing.manager import SharingManager
    from .takeover import Takeover
    from .userspace import DriverEdits

__all__ = [
    "DEFAULT_LOCK_WAIT_SECONDS",
    "RECORD_TYPES",
    "DeviceState",
    "HolderCheck",
    "PreparedClaim",
    "RebootRestore",
    "StateLockTimeout",
    "checkpoint_store",
    "default_steps",
]

log = logging.getLogger(__name__)

#: How long a call without a deadline (start-up, inspection, tests) waits for the node lock:
#: kubelet's own call timeout.
DEFAULT_LOCK_WAIT_SECONDS: Final = 45.0

#: How long the start after a reboot waits for the claims' MPS daemons to be Ready again (the old
#: pod's end, then the new one's start; the image is the plugin's own, already on the node).
RESTORE_SECONDS: Final = 60.0

#: How long a clean stop waits for the node lock to fold the checkpoint's journal into its file.
CLOSE_LOCK_SECONDS: Final = 5.0

#: How often one prepare checks the claims holding its devices and tries again.
HOLDER_CHECKS: Final = 3


class HolderCheck(Protocol):
    """Checks the claims whose entries hold a new claim's devices, by `deadline` (time.monotonic()):
    cleans the ghosts, raises ClaimError naming both claims for a live holder, and returns the UIDs of
    live holders whose overlap is allowed (admin access)."""

    def __call__(self, ref: ClaimRef, holders: Sequence[Holder], deadline: float) -> frozenset[str]: ...


@dataclass(frozen=True)
class PreparedClaim:
    """What a prepare answered: the devices, and the UUID of each device a step created for the claim (by
    the allocated device's name: a dynamic MIG device's), for the claim's status (`Step.device_uuids`)."""

    devices: list[PreparedDevice]
    device_uuids: dict[str, str]


class Recovery(Protocol):
    """Recovers the claims the checkpoint lost (`recovery.LostClaimsRecovery`) by `deadline`
    (time.monotonic()), through `DeviceState.recover_lost`; None when done, else why not yet."""

    def __call__(self, deadline: float) -> str | None: ...


#: The record types of the steps `default_steps` gives, by step name: what this plugin's checkpoint holds.
RECORD_TYPES: Final = record_types(
    (TakeoverStep, AllocationStep, PartitionStep, SharingStep, MetadataStep, CdiStep)
)


def checkpoint_store(plugin_data_dir: Path) -> CheckpointStore:
    """The checkpoint in `plugin_data_dir` as this plugin reads and writes it (its steps' records)."""
    return CheckpointStore(plugin_data_dir, records=RECORD_TYPES)


def default_steps(
    *,
    devices: Sequence[Device],
    cdi_root: Path,
    plugin_data_dir: Path,
    gates: FeatureGates,
    takeover: TakeoverStep | None = None,
    partitions: PartitionManager | None = None,
    sharing_manager: SharingManager | None = None,
    driver_edits: DriverEdits | None = None,
    dev_root: Path = Path("/"),
) -> list[Step]:
    """The steps of the claim lifecycle, in set-up order: takeover of NVIDIA's claims (when given),
    allocation with the held-devices guard, dynamic MIG, GPU sharing, device metadata, CDI. The one
    list `DeviceState` runs, and tests and the bench reuse."""
    adopting: list[Step] = [takeover] if takeover is not None else []
    mig = PartitionStep(partitions)
    base = [d for d in devices if partitions is None or not partitions.is_placement(d.name)]
    return [
        *adopting,
        AllocationStep(gates, guarded_by=[*adopting, mig]),
        mig,
        SharingStep(sharing_manager),
        MetadataStep(plugin_data_dir, cdi_root, enabled=gates.device_metadata),
        CdiStep(cdi_root, base_devices=base, driver_edits=driver_edits, dev_root=dev_root),
    ]


class DeviceState:
    """Devices of this node and the claims prepared on them."""

    def __init__(
        self,
        *,
        driver_name: str,
        pool_name: str,
        devices: Sequence[Device],
        cdi_root: Path,
        plugin_data_dir: Path,
        dev_root: Path = Path("/"),
        lock_wait: float = DEFAULT_LOCK_WAIT_SECONDS,
        driver_edits: DriverEdits | None = None,
        gates: FeatureGates | None = None,
        sharing_manager: SharingManager | None = None,
        takeover: Takeover | None = None,
        boot_id: str | None = None,
        restore_wait: float = RESTORE_SECONDS,
        partitions: PartitionManager | None = None,
    ) -> None:
        """`boot_id`: the node's current boot id (`checkpoint.read_boot_id`); None (tests, inspection)
        leaves reboots undetected. `restore_wait`: how long a restore after a reboot waits for MPS
        daemons."""
        names = [d.name for d in devices]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"device names must be unique, duplicated: {', '.join(duplicates)}")
        self._devices = tuple(devices)
        self._lock_wait = lock_wait
        self._cdi_root = cdi_root
        self._sharing = sharing_manager
        plugin_data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = NodeLock(plugin_data_dir / LOCK_FILE)
        self._takeover = TakeoverStep(takeover) if takeover is not None else None
        steps = default_steps(
            devices=devices,
            cdi_root=cdi_root,
            plugin_data_dir=plugin_data_dir,
            gates=gates or FeatureGates(),
            takeover=self._takeover,
            partitions=partitions,
            sharing_manager=sharing_manager,
            driver_edits=driver_edits,
            dev_root=dev_root,
        )
        self._store = checkpoint_store(plugin_data_dir)
        self._lifecycle = ClaimLifecycle(
            driver_name=driver_name,
            pool_name=pool_name,
            devices={d.name: d for d in devices},
            store=self._store,
            cdi_root=cdi_root,
            steps=steps,
        )
        self._runner = BatchRunner(self._lock, self._lifecycle, lambda: str(self._store.path))
        #: Checks the holders of a prepare's devices against the API server (the reconciler); None:
        #: a held device fails the prepare.
        self.holder_check: HolderCheck | None = None
        #: Recovers the claims a lost checkpoint dropped (`lost`) before a new claim is prepared; None:
        #: a new claim fails while they are not recovered.
        self.recover: Recovery | None = None
        with self._locked_or_fail("start"):
            started = reboot.start(
                self._lifecycle, plugin_data_dir, boot_id=boot_id, restore_wait=restore_wait
            )
        #: Temp files of interrupted writes removed at start.
        self.removed_leftovers: list[Path] = started.removed_leftovers
        #: What the start gave back after a reboot; None when the boot id was the one kept (or unknown).
        self.reboot: RebootRestore | None = started.reboot

    # ------------------------------------------------------------------------------------ public API

    @property
    def devices(self) -> Sequence[Device]:
        return self._devices

    @property
    def load_problem(self) -> str | None:
        """The one-line problem found while loading the checkpoint at start (None when it was fine)."""
        return self._lifecycle.load_problem

    def prepare(
        self, ref: ClaimRef, claim: Mapping[str, Any], *, deadline: float | None = None
    ) -> list[PreparedDevice]:
        """Prepare `claim` (API JSON fetched just now); idempotent; raises ClaimError.

        `deadline` (a `time.monotonic()` value) bounds the wait for the node lock and the check of
        the claims holding its devices (`holder_check`).
        """
        return self.prepare_claim(ref, claim, deadline=deadline).devices

    def prepare_claim(
        self, ref: ClaimRef, claim: Mapping[str, Any], *, deadline: float | None = None
    ) -> PreparedClaim:
        """`prepare`, with the UUIDs of the devices the steps created for the claim (dynamic MIG)."""
        at = self._deadline(deadline)
        tolerated: frozenset[str] = frozenset()
        recovery_tried = False
        for attempt in range(HOLDER_CHECKS + 1):
            try:
                op = self._runner.submit(Op("prepare", ref, claim, at, tolerated=tolerated))
            except DevicesHeld as held:
                if self.holder_check is None or attempt == HOLDER_CHECKS:
                    raise
                tolerated |= self.holder_check(ref, held.holders, at)
                continue
            except RecoveryPending as pending:
                if self.recover is None or recovery_tried:
                    raise
                recovery_tried = True
                why = self.recover(at)
                if why is not None:
                    raise ClaimError(f"{pending}; recovering them failed: {why}") from None
                continue
            assert op.result is not None
            uuids: dict[str, str] = {}
            if op.entry is not None:
                for step in self._lifecycle.steps:
                    uuids.update(step.device_uuids(op.entry))
            return PreparedClaim(op.result, uuids)
        raise AssertionError("unreachable")  # pragma: no cover

    def clean_ghost(
        self,
        entry: ClaimEntry,
        *,
        judged_at: float | None = None,
        deadline: float | None = None,
        step_claim: bool = False,
    ) -> bool:
        """Clean a ghost's entry exactly as an unprepare would (every step's clean: NVIDIA's leftovers of
        an adopted claim and the sharing undone, CDI spec and entry removed), only if the checkpoint still
        holds `entry` as it was judged and no prepare of the claim answered since `judged_at`
        (time.monotonic() of the read that judged it; None: now); True when it did.
        `step_claim`: `entry` is a claim only the steps know (`step_claims`: adopted from NVIDIA's plugin),
        cleaned only while it still is (no checkpoint entry of ours).
        Raises ClaimError when the undo fails (the entry stays, as for an unprepare)."""
        ref = ClaimRef(namespace=entry.namespace, name=entry.name, uid=entry.uid)
        at = time.monotonic() if judged_at is None else judged_at
        op = self._runner.submit(
            Op(
                "unprepare",
                ref,
                None,
                self._deadline(deadline),
                expect=entry,
                judged_at=at,
                step_claim=step_claim,
            )
        )
        return op.changed or op.step_claim_cleaned

    def step_claims(self) -> dict[str, ClaimEntry]:
        """The claims only the steps know, holding devices (`Step.holders`: adopted from NVIDIA's plugin,
        not released, not prepared here again), as entries, read under the node lock."""
        with self._locked_or_fail("reading the claims the steps know"):
            return self._lifecycle.known_only_to_steps(self._lifecycle.read())

    def name_step_claim(self, uid: str, namespace: str, name: str) -> None:
        """Give the steps the namespace/name reconciliation found for claim `uid`, which only they know
        (NVIDIA 25.8.1 records none; `reconcile` finds it through the pods of this node)."""
        with self._locked_or_fail("naming a claim the steps know"):
            for step in self._lifecycle.steps:
                step.name_claim(uid, namespace, name)

    @property
    def lost(self) -> str | None:
        """Why claims may be missing from the checkpoint until `recover_lost` (None: none are)."""
        return self._lifecycle.lost

    def recover_lost(
        self, claims: Sequence[ClaimEntry], *, deadline: float | None = None
    ) -> list[ClaimEntry]:
        """The claims prepared before the checkpoint lost them (`claims`: every claim allocated to this
        node by this driver that the pods of this node use) hold their devices from now on, as
        PrepareStarted entries; the loss ends. Returns the entries added or named."""
        with self._locked_or_fail("recovering the claims the checkpoint lost", deadline):
            node = self._lifecycle.node()
            return self._lifecycle.recovered(node, claims)

    def unprepare(self, ref: ClaimRef, *, deadline: float | None = None) -> None:
        """Undo the claim's preparation and remove its entry (either state); an unknown claim is a success."""
        self._runner.submit(Op("unprepare", ref, None, self._deadline(deadline)))

    def prepared(self) -> dict[str, list[PreparedDevice]]:
        """Claim UID -> prepared devices, for claims whose preparation completed (read from disk)."""
        return {
            uid: list(e.devices)
            for uid, e in self.entries().items()
            if e.state is ClaimState.PREPARE_COMPLETED
        }

    def close(self, wait: float = CLOSE_LOCK_SECONDS) -> None:
        """At a clean stop: fold the checkpoint's journal into its file (so a rollback to a release
        without the journal reads every claim), waiting at most `wait` s for the node lock. When it stays
        locked or the write fails, the next start folds it (a warning says which)."""
        try:
            with self._lock.held(time.monotonic() + wait):
                self._store.fold()
        except LockTimeout:
            log.warning(
                "the node lock stayed held at stop: the checkpoint's journal is folded at the next start"
            )
        except OSError as exc:
            log.warning("cannot fold the checkpoint's journal at stop (%s): the next start does", exc)
        finally:
            self._store.close()

    def entries(self) -> dict[str, ClaimEntry]:
        """All checkpoint entries (including PrepareStarted), read from disk under the node lock."""
        with self._locked_or_fail("reading the checkpoint"):
            return self._lifecycle.read()

    # ------------------------------------------------------------------------------------- internals

    def _deadline(self, deadline: float | None) -> float:
        return time.monotonic() + self._lock_wait if deadline is None else deadline

    @contextlib.contextmanager
    def _locked_or_fail(self, what: str, deadline: float | None = None) -> Iterator[None]:
        at = self._deadline(deadline)
        try:
            with self._lock.held(at):
                yield
        except LockTimeout as exc:
            until = f"for {self._lock_wait:g} s" if deadline is None else "until the call's deadline"
            raise StateLockTimeout(
                f"{what}: {self._lock.path} stayed locked {until} "
                "(another plugin process on this node holds it)"
            ) from exc
