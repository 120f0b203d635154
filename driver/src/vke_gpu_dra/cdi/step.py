"""Step: the CDI specs containers get their devices from (`cdi` builds and writes them), with the driver's
user-space (`userspace.DriverEdits`: libraries, binaries, hooks, device nodes) in every spec.

* start: write the node's base spec (one CDI device per device; rewritten only when its content changed);
* admit, last: the claim's answer, one device (or share) each, with the requests it serves; a claim
  without edits of its own answers CDI ids of the base spec and writes nothing (a
  control or DRM node that appeared since the base spec was written has it written again first); one
  with edits of its own (MPS, MIG devices created for it, consumable shares, adopted from NVIDIA's
  plugin: `work.own_spec`) answers ids of its claim spec;
* set up, last: the claim spec, after the steps whose edits it carries;
* clean: the claim spec goes (a claim answered from the base spec has none: nothing is written);
* lost / restore: a vanished spec (a reboot empties /var/run/cdi) is written again, the claim spec
  also when the claim's MIG devices were created again with new ids.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, PreparedDevice

from .. import cdi
from ..claims.checkpoint import ClaimEntry, ClaimState
from ..claims.step import ClaimWork, Node, Step

if TYPE_CHECKING:
    from ..userspace import DriverEdits

log = logging.getLogger(__name__)


class CdiStep(Step):
    name = "CDI"

    def __init__(
        self,
        cdi_root: Path,
        *,
        base_devices: Sequence[Device],
        driver_edits: DriverEdits | None = None,
        dev_root: Path = Path("/"),
    ) -> None:
        """`base_devices`: the devices the base spec has (not dynamic MIG placements: their MIG devices
        exist only for the claim they are created for)."""
        self.cdi_root = cdi_root
        self.driver_edits = driver_edits
        self.dev_root = dev_root
        self._base: dict[str, Device] = {}
        self._candidates = tuple(base_devices)
        #: The nodes present when the base spec was written: "" -> control nodes, device name -> its
        #: nodes; None: not written yet.
        self._written_for: dict[str, tuple[str, ...]] | None = None
        # Checked at every prepare answered from the base spec: paths as strings, joined once.
        self._base_path = str(cdi.base_spec_path(cdi_root))
        self._optional = tuple((p, str(dev_root / p.lstrip("/"))) for p in cdi.OPTIONAL_CONTROL_NODES)

    # ------------------------------------------------------------------------------------ start

    def start(self, node: Node) -> None:
        try:
            self._write_base()
        except (OSError, cdi.CdiSpecError) as exc:  # each prepare of a claim it answers tries again
            log.error("cannot write the base CDI spec %s: %s", cdi.base_spec_path(self.cdi_root), exc)

    # ---------------------------------------------------------------------------------- prepare

    def admit(self, work: ClaimWork, node: Node) -> None:
        if any(a.share_id for a in work.allocated) or any(d.name not in self._base for d in work.devices):
            work.own_spec = True  # one CDI device per share; a device the base spec cannot describe
        if not work.own_spec:
            self._ensure_base(work, work.devices)
        uid = work.ref.uid
        # One answer per device (or share): results of several requests on it name it once, with all
        # their request names, so no container, nor a retried prepare, gets one CDI id twice.
        requests: dict[tuple[str, str | None], list[str]] = {}
        for a in work.allocated:
            names = requests.setdefault((a.device.name, a.share_id), [])
            if a.request_name not in names:
                names.append(a.request_name)
        work.prepared = [
            PreparedDevice(
                request_names=tuple(names),
                pool_name=node.pool_name,
                device_name=device,
                cdi_device_ids=(
                    cdi.claim_device_id(uid, device, share) if work.own_spec else cdi.base_device_id(device),
                ),
                share_id=share,
            )
            for (device, share), names in requests.items()
        ]

    def set_up(self, work: ClaimWork, node: Node) -> None:
        if not work.own_spec:
            if work.edits:  # a step gave edits without asking for a spec of the claim's own
                raise RuntimeError(f"claim {work.label}: edits for {sorted(work.edits)} without a claim spec")
            return
        self._write_claim_spec(work.ref, work.devices, work.edits, work.prepared)

    def clean(self, ref: ClaimRef, entry: ClaimEntry | None, node: Node, deadline: float) -> None:
        if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED and not _has_claim_spec(entry):
            return  # answered from the base spec: no spec of its own was ever written
        try:
            cdi.delete_claim_spec(self.cdi_root, ref.uid)
        except OSError as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: cannot delete its CDI spec: {exc}") from None

    # ---------------------------------------------------------------------------------- restore

    def lost(self, entry: ClaimEntry, node: Node) -> bool:
        if _has_claim_spec(entry):
            return not cdi.claim_spec_path(self.cdi_root, entry.uid).exists()
        return not cdi.base_spec_path(self.cdi_root).exists()

    def restore(self, work: ClaimWork, node: Node, deadline: float | None) -> None:
        entry = work.restoring
        assert entry is not None
        if not _has_claim_spec(entry):
            if not cdi.base_spec_path(self.cdi_root).exists():
                log.warning("the base CDI spec was missing; writing it again")
                self._written_for = None
            self._ensure_base(work, work.devices)
            return
        missing = not cdi.claim_spec_path(self.cdi_root, entry.uid).exists()
        if missing or work.records_changed:  # a step's record changed (new MIG UUIDs): a new spec
            if missing:
                log.warning("CDI spec of prepared claim %s was missing; writing it again", work.ref)
            self._write_claim_spec(work.ref, work.devices, work.edits, entry.devices)

    # ------------------------------------------------------------------------------------ specs

    def _control_nodes(self) -> tuple[str, ...]:
        """The control nodes present now (what of the spec-level edits depends on the node's /dev)."""
        if self.driver_edits is None:
            return tuple(self._optional_nodes())
        return tuple(n["path"] for n in self.driver_edits.control_nodes())

    def _device_nodes(self, device: Device) -> tuple[str, ...]:
        """The device's nodes present now (a full GPU's DRM nodes may appear after start)."""
        if self.driver_edits is None:
            return ()
        return tuple(n["path"] for n in self.driver_edits.device_nodes(device))

    def _ensure_base(self, work: ClaimWork, devices: Sequence[Device]) -> None:
        """The base spec, written again when a node that it or the claim's devices need appeared since."""
        seen = self._written_for
        if (
            seen is not None
            and os.path.exists(self._base_path)
            and seen.get("") == self._control_nodes()
            and all(seen.get(d.name) == self._device_nodes(d) for d in devices)
        ):
            return
        try:
            self._write_base()
        except (OSError, cdi.CdiSpecError) as exc:
            raise ClaimError(f"claim {work.label}: cannot write the base CDI spec: {exc}") from None

    def _write_base(self) -> None:
        usable: dict[str, Device] = {}
        for device in self._candidates:
            try:
                cdi.device_edits(device, self.driver_edits)
            except cdi.CdiSpecError as exc:
                log.warning("device %s is left out of the base CDI spec: %s", device.name, exc)
                continue
            usable[device.name] = device
        self._base = usable
        if not usable:
            return
        written_for = {"": self._control_nodes(), **{n: self._device_nodes(d) for n, d in usable.items()}}
        devices = list(usable.values())
        spec = cdi.build_base_spec(devices, optional_nodes=self._optional_nodes(), driver=self.driver_edits)
        if cdi.write_base_spec(self.cdi_root, spec):
            log.info("base CDI spec written", extra={"fields": {"devices": len(devices)}})
        self._written_for = written_for

    def _optional_nodes(self) -> list[str]:
        return [p for p, on_disk in self._optional if os.path.exists(on_disk)]

    def _write_claim_spec(
        self,
        ref: ClaimRef,
        devices: Sequence[Device],
        extra: dict[str, dict[str, Any]],
        prepared: Sequence[PreparedDevice],
    ) -> None:
        """The claim's spec: one CDI device per device, or per share of a device allocated as consumable
        shares (keyed by device and share, as the prepared devices name them)."""
        shares: dict[str, list[str]] = {}
        for d in prepared:
            if d.share_id is not None and d.share_id not in shares.get(d.device_name, []):
                shares.setdefault(d.device_name, []).append(d.share_id)
        try:
            spec = cdi.build_claim_spec(
                ref.uid,
                devices,
                optional_nodes=self._optional_nodes(),
                driver=self.driver_edits,
                extra_device_edits=extra,
                shares=shares,
            )
            cdi.write_claim_spec(self.cdi_root, ref.uid, spec)
        except (OSError, cdi.CdiSpecError) as exc:
            raise ClaimError(f"claim {ref.namespace}/{ref.name}: cannot write its CDI spec: {exc}") from None


def _has_claim_spec(entry: ClaimEntry) -> bool:
    """The entry's CDI ids name its claim spec (an earlier release's claims all do)."""
    return any(cdi.names_claim_spec(d.cdi_device_ids) for d in entry.devices)
