"""MIG lifecycle over NVML: read MIG capability and mode, list profiles and placements, create and destroy
GPU instances (GI) with their full compute instance (CI), enumerate what exists.

I/O only: which placement to create, and when, is decided elsewhere (the partitionable devices of
`vke_gpu_dra_core.mig_partitions`). Everything happens inside one NVML session:

    with MigLifecycle(library_path=...).session() as mig:
        gpu = mig.gpus()[0]
        created = mig.create(gpu.uuid, profile_id=19, start=3)
        mig.destroy(gpu.uuid, created.gi_id, created.ci_id)

NVML's answers become typed errors that name the GPU, the call and NVML's message:
`MigPlacementTakenError` (NVML_ERROR_INSUFFICIENT_RESOURCES: the placement overlaps an existing GPU
instance), `MigInUseError` (NVML_ERROR_IN_USE), `MigNotEnabledError` (MIG unsupported or off), and
`MigLifecycleError` for the rest. A create that fails after the GI exists destroys that GI again.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pynvml
from vke_gpu_dra_core.discovery import normalize as norm
from vke_gpu_dra_core.mig_partitions import MigPlacement, MigProfile

from .nvml import NvmlSource, gpu_instance_profiles

log = logging.getLogger(__name__)

#: The compute-instance profile that spans a GPU instance of `slices` compute slices (NVML_COMPUTE_INSTANCE_
#: PROFILE_<n>_SLICE), the only compute instance this module creates (as NVIDIA's DynamicMIG does).
FULL_CI_PROFILE: Final[dict[int, int]] = {
    1: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    2: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
    3: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    4: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
    6: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
    7: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    8: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE,
}


class MigLifecycleError(Exception):
    """An NVML MIG call failed; the message names the GPU, the call and NVML's error."""


class MigNotEnabledError(MigLifecycleError):
    """The GPU does not support MIG, or its MIG mode is off."""


class MigPlacementTakenError(MigLifecycleError):
    """The placement overlaps a GPU instance that exists (NVML_ERROR_INSUFFICIENT_RESOURCES)."""


class MigInUseError(MigLifecycleError):
    """NVML_ERROR_IN_USE: a GPU instance still has compute instances, or the GPU is busy."""


class MigNotFoundError(MigLifecycleError):
    """No GPU, GPU instance or compute instance with the given id."""


_ERRORS: Final[dict[int, type[MigLifecycleError]]] = {
    pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES: MigPlacementTakenError,
    pynvml.NVML_ERROR_IN_USE: MigInUseError,
    pynvml.NVML_ERROR_NOT_SUPPORTED: MigNotEnabledError,
    pynvml.NVML_ERROR_NOT_FOUND: MigNotFoundError,
}


@dataclass(frozen=True)
class GpuMig:
    """A GPU's MIG capability and mode."""

    index: int
    uuid: str
    minor: int
    product_name: str
    memory_bytes: int
    #: False when NVML answers NOT_SUPPORTED to nvmlDeviceGetMigMode.
    mig_capable: bool
    mig_enabled: bool
    #: The mode after the next GPU reset (nvmlDeviceGetMigMode's pending mode).
    mig_pending: bool


@dataclass(frozen=True)
class MigInstance:
    """A GPU instance with its compute instance: one MIG device."""

    parent_uuid: str
    parent_minor: int
    gi_id: int
    ci_id: int
    #: NVML GPU-instance profile id.
    profile_id: int
    placement: MigPlacement
    #: The MIG device's UUID (`MIG-...`).
    uuid: str


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class MigLifecycle:
    """Opens NVML sessions for MIG work (the library found as `NvmlSource` finds it)."""

    def __init__(self, *, library_path: Path | None = None, driver_root: Path | None = None) -> None:
        self._source = NvmlSource(library_path=library_path, driver_root=driver_root)

    @contextmanager
    def session(self) -> Iterator[MigSession]:
        """NVML initialised for the block (and shut down after it); one session at a time per process."""
        with self._source.session():
            yield MigSession()


class MigSession:
    """MIG calls inside one NVML session; GPUs are named by UUID."""

    def _call(self, gpu: str, name: str, *args: Any) -> Any:
        fn: Callable[..., Any] = getattr(pynvml, name)
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            error = _ERRORS.get(exc.value, MigLifecycleError)
            raise error(f"GPU {gpu}: {name} failed: {exc}") from None

    @staticmethod
    def _failure(gpu: str) -> Callable[[str], MigLifecycleError]:
        """How `gpu_instance_profiles` names a failed NVML call of `gpu`."""
        return lambda msg: MigLifecycleError(f"GPU {gpu}: {msg}")

    def _handle(self, uuid: str) -> Any:
        for index in range(int(self._call(uuid, "nvmlDeviceGetCount"))):
            handle = self._call(f"index {index}", "nvmlDeviceGetHandleByIndex", index)
            if _text(self._call(f"index {index}", "nvmlDeviceGetUUID", handle)) == uuid:
                return handle
        raise MigNotFoundError(f"GPU {uuid}: no such GPU on this node")

    # ------------------------------------------------------------------------------------- reading

    def gpus(self) -> list[GpuMig]:
        """Every GPU with its MIG capability and mode."""
        gpus = []
        for index in range(int(self._call("-", "nvmlDeviceGetCount"))):
            label = f"index {index}"
            handle = self._call(label, "nvmlDeviceGetHandleByIndex", index)
            uuid = _text(self._call(label, "nvmlDeviceGetUUID", handle))
            try:
                current, pending = pynvml.nvmlDeviceGetMigMode(handle)
                capable = True
            except pynvml.NVMLError_NotSupported:
                current = pending = pynvml.NVML_DEVICE_MIG_DISABLE
                capable = False
            except pynvml.NVMLError as exc:
                raise MigLifecycleError(f"GPU {uuid}: nvmlDeviceGetMigMode failed: {exc}") from None
            gpus.append(
                GpuMig(
                    index=index,
                    uuid=uuid,
                    minor=int(self._call(uuid, "nvmlDeviceGetMinorNumber", handle)),
                    product_name=_text(self._call(uuid, "nvmlDeviceGetName", handle)),
                    memory_bytes=int(self._call(uuid, "nvmlDeviceGetMemoryInfo", handle).total),
                    mig_capable=capable,
                    mig_enabled=current == pynvml.NVML_DEVICE_MIG_ENABLE,
                    mig_pending=pending == pynvml.NVML_DEVICE_MIG_ENABLE,
                )
            )
        return gpus

    def profiles(self, gpu: str) -> list[MigProfile]:
        """The GPU-instance profiles of `gpu` with their possible placements, as NVML reports them.

        Names are computed as go-nvlib does (`normalize.mig_profile_name`), so they match static MIG devices.
        """
        handle = self._handle(gpu)
        total = int(self._call(gpu, "nvmlDeviceGetMemoryInfo", handle).total)
        profiles = []
        for index, info in gpu_instance_profiles(handle, self._failure(gpu)):
            profiles.append(
                MigProfile(
                    name=norm.mig_profile_name(
                        gi_slices=int(info.sliceCount),
                        ci_slices=int(info.sliceCount),
                        mig_memory_mib=int(info.memorySizeMB),
                        total_memory_bytes=total,
                        profile_index=index,
                    ),
                    profile_id=int(info.id),
                    index=index,
                    slices=int(info.sliceCount),
                    multiprocessors=int(info.multiprocessorCount),
                    copy_engines=int(info.copyEngineCount),
                    decoders=int(info.decoderCount),
                    encoders=int(info.encoderCount),
                    jpeg_engines=int(info.jpegCount),
                    ofa_engines=int(info.ofaCount),
                    memory_mib=int(info.memorySizeMB),
                    placements=self._placements(gpu, handle, int(info.id), int(info.instanceCount)),
                )
            )
        return profiles

    def _placements(self, gpu: str, handle: Any, profile_id: int, most: int) -> tuple[MigPlacement, ...]:
        array = (pynvml.c_nvmlGpuInstancePlacement_t * max(most, 1))()
        count = ctypes.c_uint(len(array))
        self._call(
            gpu, "nvmlDeviceGetGpuInstancePossiblePlacements", handle, profile_id, array, ctypes.byref(count)
        )
        return tuple(MigPlacement(int(p.start), int(p.size)) for p in array[: count.value])

    def instances(self, gpu: str) -> list[MigInstance]:
        """Every GPU instance of `gpu` with each of its compute instances, by GI id then CI id."""
        handle = self._handle(gpu)
        minor = int(self._call(gpu, "nvmlDeviceGetMinorNumber", handle))
        found = []
        for gi in self._gpu_instances(gpu, handle):
            gi_info = self._call(gpu, "nvmlGpuInstanceGetInfo", gi)
            for ci in self._compute_instances(gpu, gi):
                ci_info = self._call(gpu, "nvmlComputeInstanceGetInfo", ci)
                found.append(self._instance(gpu, minor, handle, gi_info, int(ci_info.id)))
        return sorted(found, key=lambda i: (i.gi_id, i.ci_id))

    def gpu_instances_without_compute(self, gpu: str) -> list[tuple[int, MigPlacement]]:
        """GPU instances of `gpu` without a compute instance (an interrupted create): (GI id, placement)."""
        handle = self._handle(gpu)
        empty = []
        for gi in self._gpu_instances(gpu, handle):
            if not self._compute_instances(gpu, gi):
                info = self._call(gpu, "nvmlGpuInstanceGetInfo", gi)
                empty.append(
                    (int(info.id), MigPlacement(int(info.placement.start), int(info.placement.size)))
                )
        return sorted(empty, key=lambda e: e[0])

    def _gpu_instances(self, gpu: str, handle: Any) -> list[Any]:
        handles = []
        for _, info in gpu_instance_profiles(handle, self._failure(gpu)):
            array = (pynvml.c_nvmlGpuInstance_t * max(int(info.instanceCount), 1))()
            count = ctypes.c_uint(len(array))
            self._call(gpu, "nvmlDeviceGetGpuInstances", handle, int(info.id), array, ctypes.byref(count))
            handles.extend(array[: count.value])
        return handles

    def _compute_instances(self, gpu: str, gi: Any) -> list[Any]:
        handles = []
        for profile in sorted(set(FULL_CI_PROFILE.values())):
            array = (pynvml.c_nvmlComputeInstance_t * 8)()
            count = ctypes.c_uint(len(array))
            try:
                pynvml.nvmlGpuInstanceGetComputeInstances(gi, profile, array, ctypes.byref(count))
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                continue  # a compute-instance profile this GPU instance cannot hold
            except pynvml.NVMLError as exc:
                raise MigLifecycleError(
                    f"GPU {gpu}: nvmlGpuInstanceGetComputeInstances (profile {profile}) failed: {exc}"
                ) from None
            handles.extend(array[: count.value])
        return handles

    def _instance(self, gpu: str, minor: int, handle: Any, gi_info: Any, ci_id: int) -> MigInstance:
        gi_id = int(gi_info.id)
        uuid = ""
        for slot in range(int(self._call(gpu, "nvmlDeviceGetMaxMigDeviceCount", handle))):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError_NotFound:
                continue
            except pynvml.NVMLError as exc:
                raise MigLifecycleError(
                    f"GPU {gpu}: nvmlDeviceGetMigDeviceHandleByIndex({slot}) failed: {exc}"
                ) from None
            if (
                int(self._call(gpu, "nvmlDeviceGetGpuInstanceId", mig)) == gi_id
                and int(self._call(gpu, "nvmlDeviceGetComputeInstanceId", mig)) == ci_id
            ):
                uuid = _text(self._call(gpu, "nvmlDeviceGetUUID", mig))
                break
        if not uuid:
            raise MigNotFoundError(
                f"GPU {gpu}: no MIG device for GPU instance {gi_id} / compute instance {ci_id}"
            )
        return MigInstance(
            parent_uuid=gpu,
            parent_minor=minor,
            gi_id=gi_id,
            ci_id=ci_id,
            profile_id=int(gi_info.profileId),
            placement=MigPlacement(int(gi_info.placement.start), int(gi_info.placement.size)),
            uuid=uuid,
        )

    # ------------------------------------------------------------------------------------- changing

    def create(self, gpu: str, profile_id: int, start: int) -> MigInstance:
        """Create the GPU instance of `profile_id` at placement `start` and its full compute instance.

        MigNotEnabledError when MIG is off, MigPlacementTakenError when the placement overlaps an existing
        GPU instance, MigLifecycleError for a placement the profile does not have.
        """
        handle = self._handle(gpu)
        profile = self._profile_by_id(gpu, handle, profile_id)
        placements = self._placements(gpu, handle, profile_id, int(profile.instanceCount))
        chosen = next((p for p in placements if p.start == start), None)
        if chosen is None:
            allowed = ", ".join(str(p.start) for p in placements)
            raise MigLifecycleError(
                f"GPU {gpu}: profile {profile_id} has no placement starting at {start}; allowed: {allowed}"
            )
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = chosen.start, chosen.size
        gi = self._call(
            gpu, "nvmlDeviceCreateGpuInstanceWithPlacement", handle, profile_id, ctypes.byref(placement)
        )
        try:
            ci_profile = FULL_CI_PROFILE.get(int(profile.sliceCount))
            if ci_profile is None:
                raise MigLifecycleError(
                    f"GPU {gpu}: no compute-instance profile spans {profile.sliceCount} slices"
                )
            ci = self._call(gpu, "nvmlGpuInstanceCreateComputeInstance", gi, ci_profile)
            gi_info = self._call(gpu, "nvmlGpuInstanceGetInfo", gi)
            ci_info = self._call(gpu, "nvmlComputeInstanceGetInfo", ci)
            minor = int(self._call(gpu, "nvmlDeviceGetMinorNumber", handle))
            return self._instance(gpu, minor, handle, gi_info, int(ci_info.id))
        except MigLifecycleError:
            self._undo(gpu, gi)
            raise

    def _undo(self, gpu: str, gi: Any) -> None:
        """Destroy a GPU instance whose create failed half-way (its compute instance first, if any)."""
        try:
            for ci in self._compute_instances(gpu, gi):
                self._call(gpu, "nvmlComputeInstanceDestroy", ci)
            self._call(gpu, "nvmlGpuInstanceDestroy", gi)
        except MigLifecycleError as exc:
            log.warning("GPU %s: could not undo a half-created MIG device: %s", gpu, exc)

    def _profile_by_id(self, gpu: str, handle: Any, profile_id: int) -> Any:
        known = []
        for _, info in gpu_instance_profiles(handle, self._failure(gpu)):
            if int(info.id) == profile_id:
                return info
            known.append(str(info.id))
        if not known:
            raise MigNotEnabledError(f"GPU {gpu}: no GPU-instance profiles (MIG not supported)")
        raise MigLifecycleError(
            f"GPU {gpu}: no GPU-instance profile {profile_id}; allowed: {', '.join(known)}"
        )

    def destroy(self, gpu: str, gi_id: int, ci_id: int | None) -> None:
        """Destroy compute instance `ci_id` (None: every one) of GPU instance `gi_id`, then the GI itself.

        Destroying what is already gone is not an error (a retried unprepare, a restart after a crash).
        """
        handle = self._handle(gpu)
        try:
            gi = self._call(gpu, "nvmlDeviceGetGpuInstanceById", handle, gi_id)
        except MigNotFoundError:
            log.info("GPU %s: GPU instance %d is already gone", gpu, gi_id)
            return
        for ci in self._compute_instances(gpu, gi):
            if ci_id is None or int(self._call(gpu, "nvmlComputeInstanceGetInfo", ci).id) == ci_id:
                self._call(gpu, "nvmlComputeInstanceDestroy", ci)
        self._call(gpu, "nvmlGpuInstanceDestroy", gi)

    def destroy_compute_instance_only(self, gpu: str, gi_id: int, ci_id: int) -> None:
        """Destroy one compute instance and keep its GPU instance (NVML refuses the GI while CIs remain)."""
        handle = self._handle(gpu)
        gi = self._call(gpu, "nvmlDeviceGetGpuInstanceById", handle, gi_id)
        for ci in self._compute_instances(gpu, gi):
            if int(self._call(gpu, "nvmlComputeInstanceGetInfo", ci).id) == ci_id:
                self._call(gpu, "nvmlComputeInstanceDestroy", ci)
                return
        raise MigNotFoundError(f"GPU {gpu}: GPU instance {gi_id} has no compute instance {ci_id}")

    def destroy_gpu_instance(self, gpu: str, gi_id: int) -> None:
        """Destroy GPU instance `gi_id` alone; MigInUseError while it has compute instances."""
        handle = self._handle(gpu)
        gi = self._call(gpu, "nvmlDeviceGetGpuInstanceById", handle, gi_id)
        self._call(gpu, "nvmlGpuInstanceDestroy", gi)
