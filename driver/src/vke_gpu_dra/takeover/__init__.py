"""Taking a node over from NVIDIA's plugin (k8s-dra-driver-gpu 25.8.1) without a drain.

At start (under the node lock) `Takeover.start` reads NVIDIA's `checkpoint.json` in the plugin data
directory, read only (`nvidia_checkpoint`), and adds the claims it lists to this plugin's takeover
ledger (`adoption`). An unreadable, malformed or checksum-failing file is one log line and nothing is
adopted. An adopted claim that NVIDIA completed answers kubelet's next prepare with this plugin's CDI
ids for the same devices (`answer`); its unprepare first undoes what NVIDIA left for it (`release`:
its claim CDI spec, MPS daemon, compute mode and time-slice, see `cleanup`) and marks it released. An
adopted `PrepareStarted` claim is released before it is prepared anew. Nothing is kept in memory
between calls: the ledger is read from disk each time, so two plugin processes agree.

Used by `state.DeviceState` through one hook per phase: `start()` in restore, `adopted(uid)`/`answer(...)`
(and `name(...)`: the namespace/name kubelet gives an adopted claim, which NVIDIA 25.8.1 does not record)
in prepare and `release(...)` in unprepare; `unreleased()` gives reconciliation and the held-devices
guard the adopted claims that still hold their devices. The plugin builds it with its tools (`Tools`: the API,
`nvidia-smi`, the mounter) in a start-up step of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from vke_gpu_dra_core.device_model import Device

from ..cdi import claim_device_id
from ..fsutil import atomic_write
from . import adoption, cleanup, nvidia_checkpoint
from .adoption import LEDGER_FILE, AdoptedAnswer, AdoptionError, LedgerEntry, LedgerError
from .cleanup import DEFAULT_NVIDIA_NAMESPACE, CleanupError, Tools
from .nvidia_checkpoint import NVIDIA_CHECKPOINT_FILE, NvidiaCheckpointError, NvidiaClaim, NvidiaClaimState

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_NVIDIA_NAMESPACE",
    "LEDGER_FILE",
    "NVIDIA_CHECKPOINT_FILE",
    "AdoptedAnswer",
    "AdoptionError",
    "CleanupError",
    "NvidiaClaim",
    "NvidiaClaimState",
    "Takeover",
    "Tools",
]


class Takeover:
    """NVIDIA's claims on this node, adopted; `tools` says where NVIDIA's things are and how to undo them."""

    def __init__(self, tools: Tools) -> None:
        self.tools = tools
        self.ledger_path = tools.plugin_data_dir / LEDGER_FILE
        self.nvidia_path = tools.plugin_data_dir / NVIDIA_CHECKPOINT_FILE
        #: The one-line problem met at start (NVIDIA's file or the ledger unusable), None when fine.
        self.problem: str | None = None

    # ------------------------------------------------------------------------------------ start

    def start(self) -> list[str]:
        """Adopt the claims of NVIDIA's checkpoint not known yet (caller holds the node lock); their UIDs."""
        try:
            nvidia = nvidia_checkpoint.read(self.nvidia_path)
        except NvidiaCheckpointError as exc:
            self.problem = (
                f"NVIDIA's checkpoint {self.nvidia_path} is not usable ({exc}); adopting none of its claims"
            )
            log.error("%s", self.problem)
            return []
        ledger = self._ledger()
        if nvidia is None:
            self._remove_base_spec_if_unused(ledger)
            return []
        merged = adoption.merge(ledger, nvidia)
        new = sorted(set(merged) - set(ledger))
        if merged != ledger:
            self._save(merged)
        if new:
            log.info(
                "adopted %d claim(s) prepared by NVIDIA's plugin: %s",
                len(new),
                ", ".join(new),
                extra={"fields": {"nvidia_checkpoint_version": nvidia.version}},
            )
        self._remove_base_spec_if_unused(merged)
        return new

    # ---------------------------------------------------------------------------- prepare hooks

    def adopted(self, uid: str) -> NvidiaClaim | None:
        """The adopted claim `uid` whose NVIDIA leftovers are not released yet, else None."""
        if not self.ledger_path.exists():
            return None
        entry = self._ledger().get(uid)
        return None if entry is None or entry.released else entry.claim

    def unreleased(self) -> dict[str, NvidiaClaim]:
        """The adopted claims whose NVIDIA leftovers are not released yet, by UID (caller holds the
        node lock): they still hold their devices, and reconciliation checks them."""
        if not self.ledger_path.exists():
            return {}
        return {uid: e.claim for uid, e in self._ledger().items() if not e.released}

    def name(self, uid: str, namespace: str, name: str) -> None:
        """Record the namespace/name kubelet gave adopted claim `uid` (NVIDIA 25.8.1 records none), so
        reconciliation can read it from the API server (caller holds the node lock)."""
        if not (namespace and name) or not self.ledger_path.exists():
            return
        ledger = self._ledger()
        entry = ledger.get(uid)
        if entry is None or entry.released or (entry.claim.namespace, entry.claim.name) == (namespace, name):
            return
        ledger[uid] = LedgerEntry(replace(entry.claim, namespace=namespace, name=name))
        self._save(ledger)

    def answer(self, claim: NvidiaClaim, *, pool_name: str, devices: Mapping[str, Device]) -> AdoptedAnswer:
        return adoption.answer(
            claim,
            pool_name=pool_name,
            devices=devices,
            plugin_data_dir=self.tools.plugin_data_dir,
            claim_device_id=claim_device_id,
        )

    # -------------------------------------------------------------------------- unprepare hook

    def release(
        self, uid: str, *, devices: Mapping[str, Device], in_use: set[str], deadline: float
    ) -> list[str]:
        """Undo NVIDIA's leftovers of adopted claim `uid` and mark it released (caller holds the node lock).

        `in_use` names devices this plugin's other claims hold; adopted claims not yet released are
        added. Not adopted or already released: nothing to do. Raises CleanupError (the claim stays
        adopted, so the retry tries again).
        """
        if not self.ledger_path.exists():
            return []
        ledger = self._ledger()
        entry = ledger.get(uid)
        if entry is None or entry.released:
            return []
        others = in_use | adoption.in_use_by_others(uid, ledger, self.tools.driver_name)
        found = cleanup.leftovers(entry.claim, tools=self.tools, devices=devices, in_use=others)
        done = cleanup.undo(found, tools=self.tools, deadline=deadline)
        ledger[uid] = LedgerEntry(entry.claim, released=True)
        self._save(ledger)
        done += self._remove_base_spec_if_unused(ledger)
        log.info(
            "released claim %s adopted from NVIDIA's plugin",
            uid,
            extra={"fields": {"uid": uid, "done": done}},
        )
        return done

    def _remove_base_spec_if_unused(self, ledger: Mapping[str, LedgerEntry]) -> list[str]:
        """NVIDIA's base spec (`k8s.gpu.nvidia.com/device=gpu-N`) goes once no adopted claim is left.

        Containers of pods NVIDIA prepared name its devices; while one of its claims is adopted and
        not released, a restarted container still needs them.
        """
        if any(not e.released for e in ledger.values()):
            return []
        try:
            return cleanup.remove_files(cleanup.nvidia_base_spec_paths(self.tools.cdi_root))
        except CleanupError as exc:
            log.warning("%s", exc)
            return []

    # ---------------------------------------------------------------------------------- ledger

    def _ledger(self) -> dict[str, LedgerEntry]:
        try:
            return adoption.read_ledger(self.ledger_path)
        except (OSError, LedgerError) as exc:
            # Start again from NVIDIA's file: a claim released before may be adopted again, and its
            # release then finds nothing left to remove.
            self.problem = f"takeover ledger {self.ledger_path} is not usable ({exc}); reading it as empty"
            log.error("%s", self.problem)
            return {}

    def _save(self, entries: Mapping[str, LedgerEntry]) -> None:
        atomic_write(self.ledger_path, adoption.encode(entries), mode=0o600)
