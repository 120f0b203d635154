"""Step: device metadata for containers (KEP-5304, feature gate DeviceMetadata; the package's own module
builds the files and paths).

* start: temp files of interrupted writes of metadata files are removed; once the checkpoint is read,
  the directories of claims it does not have;
* admit (gate on): the claim's request names and pod claim name are checked (each names a directory),
  and the claim gets a CDI spec of its own (the first device of each request carries the mount);
* set up, before the CDI step: one file per request, written atomically, and its read-only mount added
  to the CDI edits of the request's first device (after the edits earlier steps gave);
* clean: the claim's directory goes, whatever the gate says now;
* lost: a completed claim whose spec mounts a metadata file, or whose directory exists, misses a file;
* restore: the files are written again where missing or out of date (a MIG device created again after a
  reboot has a new uuid), and the mounts go back into the edits for the CDI step's spec. What a lost file
  held (the pod's name for the claim, the subrequest) is taken from the claim's other files or from the
  mounts of its CDI spec (the host path names the subrequest). A claim prepared while the gate was off
  gets no metadata later.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, PreparedDevice

from .. import cdi
from .. import metadata as dm
from ..claims.checkpoint import ClaimEntry
from ..claims.step import ClaimWork, Node, Step
from ..fsutil import atomic_write, fsync_dir, remove_temp_leftovers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Found:
    """What the disk says about a completed claim's metadata."""

    #: The claim has metadata (its directory or a mount in its CDI spec).
    present: bool
    #: The pod's name for the claim; None: a claim the pod names directly.
    pod_claim: str | None
    #: Base request -> the request as the files name it (subrequest included).
    requests: Mapping[str, str]
    #: Base request -> the generation of its file.
    generations: Mapping[str, int]


class MetadataStep(Step):
    """`enabled`: the gate DeviceMetadata; off, new claims get no metadata, while the files of claims
    prepared with it on are still restored and cleaned."""

    name = "device metadata"

    def __init__(self, plugin_data_dir: Path, cdi_root: Path, *, enabled: bool) -> None:
        self.plugin_data_dir = plugin_data_dir
        self.cdi_root = cdi_root
        self.enabled = enabled
        #: Temp files of interrupted writes removed by `start`.
        self.removed_leftovers: list[Path] = []

    # ------------------------------------------------------------------------------------ start

    def start(self, node: Node) -> None:
        root = dm.host_root(self.plugin_data_dir)
        removed: list[Path] = []
        for request_dir in sorted(root.glob("*/*")):
            if request_dir.is_dir() and not request_dir.is_symlink():
                removed += remove_temp_leftovers(request_dir, lambda name: name == dm.HOST_FILE)
        if removed:
            log.warning(
                "removed temp files of interrupted device metadata writes",
                extra={"fields": {"files": [str(p) for p in removed]}},
            )
        self.removed_leftovers = removed

    def loaded(self, node: Node) -> None:
        """The directories of claims the checkpoint does not have go (a claim's entry is on disk before
        its files are written, so these are left by a lost checkpoint). Names with '_' are left alone:
        NVIDIA's plugin (Kubernetes' helper) keeps its files in `<namespace>_<claim name>` here, still
        mounted for the claims taken over from it; a claim UID has no '_'."""
        root = dm.host_root(self.plugin_data_dir)
        known = {dm.host_dir(self.plugin_data_dir, uid).name for uid in node.entries}
        for directory in sorted(root.glob("*")):
            if directory.name in known or "_" in directory.name:
                continue
            if not directory.is_dir() or directory.is_symlink():
                continue
            log.warning("removing device metadata of a claim without a checkpoint entry: %s", directory)
            try:
                shutil.rmtree(directory)
            except OSError as exc:
                log.error("cannot remove %s: %s", directory, exc)

    # ---------------------------------------------------------------------------------- prepare

    def admit(self, work: ClaimWork, node: Node) -> None:
        if not self._applies(work):
            return
        dm.pod_claim_name(work.ref, work.claim)
        dm.requests_of(work.ref, [(a.request, a.device.name) for a in work.allocated])
        work.own_spec = True  # the first device of each request carries its file's mount

    def set_up(self, work: ClaimWork, node: Node) -> None:
        if not self._applies(work):
            return
        pod_claim = dm.pod_claim_name(work.ref, work.claim)
        requests = dm.requests_of(work.ref, [(a.request, a.device.name) for a in work.allocated])
        devices = {d.name: d for d in work.devices}
        for request in requests:
            data = self._encoded(work.ref, pod_claim, request, node=node, devices=devices, generation=1)
            self._write(work.ref, request, data)
            self._add_mount(work, pod_claim, request, node.driver_name)

    def _applies(self, work: ClaimWork) -> bool:
        """A new claim gets metadata: the gate is on and no earlier step answered it (NVIDIA's)."""
        return self.enabled and not work.decided

    # ---------------------------------------------------------------------------------- unprepare

    def clean(self, ref: ClaimRef, entry: ClaimEntry | None, node: Node, deadline: float) -> None:
        if entry is None:
            return  # nothing recorded: a claim's entry is on disk before its files (start removes strays)
        directory = dm.host_dir(self.plugin_data_dir, ref.uid)
        if not os.path.lexists(directory):
            return  # the usual case: the claim got no metadata (or it is gone already)
        try:
            shutil.rmtree(directory)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name}: cannot remove its device metadata {directory}: {exc}"
            ) from None
        fsync_dir(directory.parent)

    # ---------------------------------------------------------------------------------- restore

    def lost(self, entry: ClaimEntry, node: Node) -> bool:
        requests = _requests(entry.devices)
        directory = dm.host_dir(self.plugin_data_dir, entry.uid)
        if directory.is_dir():
            return any(not dm.host_files(self.plugin_data_dir, entry.uid, r) for r in requests)
        return bool(self._spec_mounts(entry, node.driver_name))

    def restore(self, work: ClaimWork, node: Node, deadline: float | None) -> None:
        entry = work.restoring
        assert entry is not None
        found = self._found(work, entry, node.driver_name)
        if not found.present:
            return
        devices = {d.name: d for d in work.devices}
        for base, names in _requests(entry.devices).items():
            request = dm.RequestDevices(found.requests.get(base, base), names)
            generation = found.generations.get(base)
            encoded = functools.partial(
                self._encoded, work.ref, found.pod_claim, request, node=node, devices=devices
            )
            path = dm.host_path(self.plugin_data_dir, work.ref.uid, request.request)
            if generation is None or _content(path) != encoded(generation=generation):  # missing or stale
                if generation is None:
                    log.warning(
                        "device metadata of prepared claim %s was missing; writing it again", work.ref
                    )
                self._write(
                    work.ref, request, encoded(generation=1 if generation is None else generation + 1)
                )
            self._add_mount(work, found.pod_claim, request, node.driver_name)

    def _found(self, work: ClaimWork, entry: ClaimEntry, driver_name: str) -> _Found:
        """The claim's metadata as its files, then its CDI spec's mounts, then the claim, tell it."""
        requests: dict[str, str] = {}
        generations: dict[str, int] = {}
        pod_claims: list[str | None] = []
        mounted = self._spec_mounts(entry, driver_name)
        for _, request in mounted:
            requests[dm.base_request(request)] = request
        for base in _requests(entry.devices):
            files = dm.host_files(self.plugin_data_dir, entry.uid, base)
            doc = _read(files[0]) if files else None
            if doc is None:
                continue
            named = dm.request_of_host_path(self.plugin_data_dir, entry.uid, files[0])
            requests[base] = named or base
            generation = (doc.get("metadata") or {}).get("generation")
            generations[base] = generation if isinstance(generation, int) and generation > 0 else 1
            pod_claim = doc.get("podClaimName")
            pod_claims.append(pod_claim if isinstance(pod_claim, str) and pod_claim else None)
        pod_claims += [pod_claim for pod_claim, _ in mounted]
        if work.claim:
            pod_claims.insert(0, dm.pod_claim_name(work.ref, work.claim))
        present = bool(mounted) or dm.host_dir(self.plugin_data_dir, entry.uid).is_dir()
        return _Found(present, pod_claims[0] if pod_claims else None, requests, generations)

    def _spec_mounts(self, entry: ClaimEntry, driver_name: str) -> list[tuple[str | None, str]]:
        """(pod claim name, request with its subrequest) of each metadata file the claim's CDI spec
        mounts."""
        if not cdi.names_claim_spec(i for d in entry.devices for i in d.cdi_device_ids):
            return []
        path = cdi.claim_spec_path(self.cdi_root, entry.uid)
        try:
            if dm.CONTAINER_DIR not in path.read_text():
                return []
            spec = cdi.load_spec(path)
        except (OSError, UnicodeDecodeError, cdi.CdiSpecError):
            return []  # a missing or broken spec is the CDI step's to restore
        found = []
        for device in spec.get("devices") or []:
            for m in (device.get("containerEdits") or {}).get("mounts") or []:
                parsed = dm.parse_container_path(driver_name, str(m.get("containerPath", "")))
                request = dm.request_of_host_path(self.plugin_data_dir, entry.uid, str(m.get("hostPath", "")))
                if parsed is None or request is None or dm.base_request(request) != parsed[1]:
                    continue
                if (parsed[0], request) not in found:
                    found.append((parsed[0], request))
        return found

    # ------------------------------------------------------------------------------------ files

    def _encoded(
        self,
        ref: ClaimRef,
        pod_claim: str | None,
        request: dm.RequestDevices,
        *,
        node: Node,
        devices: Mapping[str, Device],
        generation: int,
    ) -> bytes:
        """The request's file as it is written now: the claim's own devices (a created MIG device) over
        the node's."""
        document = dm.document(
            ref,
            pod_claim,
            request,
            driver_name=node.driver_name,
            pool_name=node.pool_name,
            devices={**node.devices, **devices},
            generation=generation,
        )
        return dm.encode(document)

    def _write(self, ref: ClaimRef, request: dm.RequestDevices, data: bytes) -> None:
        path = dm.host_path(self.plugin_data_dir, ref.uid, request.request)
        try:
            atomic_write(path, data)
        except OSError as exc:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name}: cannot write device metadata {path}: {exc}"
            ) from None

    def _add_mount(
        self, work: ClaimWork, pod_claim: str | None, request: dm.RequestDevices, driver: str
    ) -> None:
        """The file's mount on the request's first device, after the edits earlier steps gave it."""
        mount = dm.mount(
            dm.host_path(self.plugin_data_dir, work.ref.uid, request.request),
            dm.container_path(driver, work.ref.name, pod_claim, request.base),
        )
        edits = work.edits.setdefault(request.devices[0], {})
        mounts = list(edits.get("mounts", []))
        if mount not in mounts:
            edits["mounts"] = [*mounts, mount]


def _requests(prepared: Sequence[PreparedDevice]) -> dict[str, tuple[str, ...]]:
    """Base request -> its device names, in the order the claim's prepared devices list them."""
    found: dict[str, list[str]] = {}
    for device in prepared:
        for request in device.request_names:
            found.setdefault(request, []).append(device.device_name)
    return {r: tuple(names) for r, names in found.items()}


def _content(path: Path) -> bytes | None:
    """The file's bytes; None when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError:
        return None


def _read(path: Path) -> Mapping[str, Any] | None:
    """The first object of a metadata file in a version this driver writes; None if unreadable."""
    try:
        return dm.first_known(dm.decode(path.read_bytes()))
    except (OSError, ValueError):
        return None
