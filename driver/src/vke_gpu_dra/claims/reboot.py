"""The lifecycle's start: restore what an interrupted run left, and what a reboot reset.

`start` runs once, under the node lock, before the plugin serves: it removes the temp files of
interrupted atomic writes of the checkpoint, the boot id and the CDI specs, runs every step's `start`
(NVIDIA's claims adopted, the base CDI spec written), reads the checkpoint recovering the
claims whose CDI spec has no entry, runs every step's `loaded` (MIG devices no entry owns destroyed),
then restores after a reboot.

When the node's boot id is not the one kept with the checkpoint, every completed claim gets back what
the reboot reset (`ClaimLifecycle.restore` with a deadline), claims in parallel, MPS daemons within
`restore_wait`. One that cannot be restored is logged and becomes PrepareStarted (devices and sharing
record kept, so unprepare still undoes it): its next prepare prepares it again and answers with what
still fails; the others are unaffected. The new boot id is kept after the restore, so a crash before
it restores again. No boot id kept (a checkpoint of an earlier release, a new node): the claims are
taken as prepared in this boot, as NVIDIA's plugin takes them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef

from .. import cdi
from ..fsutil import remove_temp_leftovers
from .checkpoint import (
    BACKUP_FILE,
    BOOT_ID_FILE,
    CHECKPOINT_FILE,
    JOURNAL_FILE,
    LOST_FILE,
    ClaimEntry,
    ClaimState,
)
from .lifecycle import ClaimLifecycle
from .step import Node

log = logging.getLogger(__name__)

#: The files of the checkpoint store, whose temp files an interrupted write may leave.
STORE_FILES: Final = frozenset({CHECKPOINT_FILE, BACKUP_FILE, JOURNAL_FILE, BOOT_ID_FILE, LOST_FILE})

#: Threads restoring claims after a reboot.
RESTORERS: Final = 8


@dataclass(frozen=True)
class RebootRestore:
    """What the start after a reboot gave back (`DeviceState.reboot`)."""

    previous_boot_id: str
    boot_id: str
    #: UIDs of the completed claims that got everything back.
    restored: tuple[str, ...] = ()
    #: UID -> why a claim could not be restored; it is PrepareStarted now, prepared again by its next prepare.
    failed: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Started:
    """What `start` found and did."""

    removed_leftovers: list[Path]
    reboot: RebootRestore | None = None


def start(
    lifecycle: ClaimLifecycle, plugin_data_dir: Path, *, boot_id: str | None, restore_wait: float
) -> Started:
    """See the module docstring (caller holds the node lock)."""
    removed = remove_temp_leftovers(plugin_data_dir, lambda name: name in STORE_FILES)
    removed += remove_temp_leftovers(lifecycle.cdi_root, cdi.is_spec_name)
    if removed:
        log.warning(
            "removed temp files of interrupted writes", extra={"fields": {"files": [str(p) for p in removed]}}
        )
    node = Node(lifecycle.driver_name, lifecycle.pool_name, lifecycle.devices)
    for step in lifecycle.steps:
        step.start(node)
    node.entries = lifecycle.read(recover_orphans=True, at_start=True)
    try:
        lifecycle.store.fold()  # the journal's records into the file: what another release reads
    except OSError as exc:  # best effort, as at a clean stop: a full disk does not keep the plugin down
        log.warning(
            "cannot fold the checkpoint's journal at start: its records stay in the journal, read as before",
            extra={"fields": {"error": str(exc)}},
        )
    for step in lifecycle.steps:
        step.loaded(node)
    return Started(removed, _restore_if_rebooted(lifecycle, node, boot_id, restore_wait))


def _restore_if_rebooted(
    lifecycle: ClaimLifecycle, node: Node, boot_id: str | None, restore_wait: float
) -> RebootRestore | None:
    if boot_id is None:
        return None
    kept = lifecycle.store.load_boot_id()
    if kept == boot_id:
        return None
    restored = None
    if kept is not None:
        try:
            restored = _restore_after_reboot(lifecycle, node, kept, boot_id, restore_wait)
        except OSError as exc:  # its entries could not be written (a full disk): the boot id is not kept
            log.warning(
                "cannot record the restore after the reboot: the next start restores again",
                extra={"fields": {"error": str(exc)}},
            )
            return None
    elif node.entries:
        log.info(
            "no boot id kept with the checkpoint (an earlier release wrote it): its claims are taken "
            "as prepared in this boot",
            extra={"fields": {"boot_id": boot_id}},
        )
    try:
        lifecycle.store.save_boot_id(boot_id)  # after the restore: a crash before it restores again
    except OSError as exc:  # a full disk: the next start restores again, which changes nothing restored
        log.warning("cannot keep the boot id after the restore", extra={"fields": {"error": str(exc)}})
    return restored


def _restore_after_reboot(
    lifecycle: ClaimLifecycle, node: Node, previous: str, boot_id: str, restore_wait: float
) -> RebootRestore:
    entries = node.entries
    completed = [e for e in entries.values() if e.state is ClaimState.PREPARE_COMPLETED]
    deadline = time.monotonic() + restore_wait

    def restore(entry: ClaimEntry) -> str | None:
        ref = ClaimRef(entry.namespace, entry.name, entry.uid)
        try:
            restored = lifecycle.restore(ref, entry, node, deadline)
            if restored != entry:  # re-created MIG devices have new ids
                entries[entry.uid] = restored
        except ClaimError as exc:
            return str(exc)
        except Exception as exc:  # a bug met by one claim leaves the others restored
            log.exception("restoring claim %s/%s failed", entry.namespace, entry.name)
            return f"claim {entry.namespace}/{entry.name}: restore failed: {exc!r}"
        return None

    if len(completed) > 1:
        with ThreadPoolExecutor(max_workers=RESTORERS, thread_name_prefix="restore") as pool:
            reasons = list(pool.map(restore, completed))
    else:
        reasons = [restore(e) for e in completed]
    failed: dict[str, str] = {}
    for entry, reason in zip(completed, reasons, strict=True):
        if reason is None:
            continue
        failed[entry.uid] = reason
        entries[entry.uid] = replace(entry, state=ClaimState.PREPARE_STARTED)
        log.error(
            "claim not restored after the node rebooted; its next prepare prepares it again",
            extra={
                "fields": {"claim": f"{entry.namespace}/{entry.name}", "uid": entry.uid, "reason": reason}
            },
        )
    if failed or any(entries[e.uid] != e for e in completed):
        lifecycle.store.save(entries)
    restored = tuple(e.uid for e, reason in zip(completed, reasons, strict=True) if reason is None)
    log.warning(
        "node rebooted since the checkpoint was written: prepared claims restored",
        extra={
            "fields": {
                "previous_boot_id": previous,
                "boot_id": boot_id,
                "restored": len(restored),
                "failed": len(failed),
            }
        },
    )
    return RebootRestore(previous, boot_id, restored, failed)
