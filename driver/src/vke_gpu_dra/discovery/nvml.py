"""Discovery through NVML (the real pynvml), with the NVML library looked up under a driver root.

Every GPU is named `gpu-<minor>`; a GPU with MIG enabled publishes only its existing MIG devices, or,
with `dynamic_mig` (feature gate DynamicMIG), itself whole: its MIG placements are added by
`partitions`, and its existing MIG devices are the claims' own.
NVML is initialised and shut down around each enumeration. A GPU whose NVML calls fail is left
out and reported in `problems` (naming the GPU and the call); a missing library or driver raises
`NvmlUnavailableError`.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pynvml
from vke_gpu_dra_core.device_model import Device, Version
from vke_gpu_dra_core.discovery import normalize as norm
from vke_gpu_dra_core.discovery.base import DiscoveryError, DiscoveryResult
from vke_gpu_dra_core.discovery.devices import GpuFacts, gpu_device, mig_device

from .. import userspace
from .migcaps import DEFAULT_PROC, mig_caps_nodes, read_mig_minors
from .numa import NumaNodeError, numa_node
from .pcie import DEFAULT_SYSFS, PcieRootError, pcie_root

log = logging.getLogger(__name__)

LIBRARY_NAME: Final = userspace.NVML_SONAME
#: Directories below the driver root searched for the library (NVIDIA's plugin uses the same list).
LIBRARY_DIRS: Final = tuple(d.lstrip("/") for d in userspace.LIBRARY_DIRS)

#: pynvml keeps the library in module globals: one enumeration at a time in this process.
_NVML_LOCK = threading.Lock()


class NvmlUnavailableError(DiscoveryError):
    """NVML cannot be used at all: library not found or not loadable, or the kernel driver is not loaded."""


class _GpuFailed(Exception):
    """One GPU (or MIG device) could not be read; the message names it and the failing call."""


def find_library(driver_root: Path) -> Path | None:
    """`libnvidia-ml.so.1` under `driver_root`, searched as the CDI user-space searches every library
    (`userspace.locate_library`: the root's ld.so.cache, then LIBRARY_DIRS; links resolved inside the
    root, so a directory or a dangling link named like the library is skipped)."""
    found = userspace.locate_library(userspace.DriverRoot(driver_root), LIBRARY_NAME)
    return None if found is None else driver_root / found[0].lstrip("/")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _call(label: str, name: str, *args: Any) -> Any:
    """`pynvml.<name>(*args)`, turning an NVML error into _GpuFailed naming the GPU and the call."""
    fn: Callable[..., Any] = getattr(pynvml, name)
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        raise _GpuFailed(f"GPU {label}: {name} failed: {exc}") from None


@dataclass(frozen=True)
class _Profile:
    index: int
    info: Any


def gpu_instance_profiles(handle: Any, fail: Callable[[str], Exception]) -> Iterator[tuple[int, Any]]:
    """(profile index, nvmlGpuInstanceProfileInfo) of each GPU-instance profile the GPU `handle` supports
    (NVML's not-supported and invalid-argument answers skip a profile); any other NVML error is raised as
    `fail(message)`, the message naming the call and the profile index."""
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
            continue
        except pynvml.NVMLError as exc:
            raise fail(f"nvmlDeviceGetGpuInstanceProfileInfo (profile {index}) failed: {exc}") from None
        yield index, info


class NvmlSource:
    """Devices of this node as NVML reports them."""

    def __init__(
        self,
        *,
        library_path: Path | None = None,
        driver_root: Path | None = None,
        sysfs_root: Path = DEFAULT_SYSFS,
        proc_root: Path = DEFAULT_PROC,
        dynamic_mig: bool = False,
    ) -> None:
        """`library_path` wins; else the library is looked up under `driver_root`; else the default loader.
        `dynamic_mig`: a GPU with MIG mode on is published whole (dynamic MIG adds its placements)."""
        self.library_path = library_path
        self.driver_root = driver_root
        self.sysfs_root = sysfs_root
        self.proc_root = proc_root
        self.dynamic_mig = dynamic_mig

    # -------------------------------------------------------------------------------- library/init

    def _resolve_library(self) -> Path | None:
        if self.library_path is not None:
            return self.library_path
        if self.driver_root is not None:
            found = find_library(self.driver_root)
            if found is None:
                log.warning(
                    "%s not found under %s (%s); trying the default loader",
                    LIBRARY_NAME,
                    self.driver_root,
                    ", ".join(LIBRARY_DIRS),
                )
            return found
        return None

    def _where(self) -> str:
        if self.library_path is not None:
            return str(self.library_path)
        if self.driver_root is not None:
            return f"{self.driver_root} ({', '.join(LIBRARY_DIRS)}) or the default library path"
        return "the default library path"

    def _load(self) -> None:
        path = self._resolve_library()
        with pynvml.libLoadLock:
            pynvml._nvmlGetFunctionPointer_cache.clear()
            if path is None:
                pynvml.nvmlLib = None  # pynvml loads libnvidia-ml.so.1 itself during init
                return
            try:
                pynvml.nvmlLib = ctypes.CDLL(str(path))
            except OSError as exc:
                pynvml.nvmlLib = None
                raise NvmlUnavailableError(f"cannot load NVML library {path}: {exc}") from None

    def _init(self) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            raise NvmlUnavailableError(
                f"NVML library {LIBRARY_NAME} not found in {self._where()}; is the NVIDIA driver installed "
                "and the driver root mounted?"
            ) from None
        except pynvml.NVMLError_DriverNotLoaded:
            raise NvmlUnavailableError(
                "NVIDIA kernel driver is not loaded (nvmlInit: Driver Not Loaded)"
            ) from None
        except pynvml.NVMLError as exc:
            raise NvmlUnavailableError(f"nvmlInit failed: {exc}") from None

    # ------------------------------------------------------------------------------------ discover

    @contextmanager
    def session(self) -> Iterator[None]:
        """NVML loaded and initialised for the block, shut down after it; one session at a time in this
        process (pynvml keeps the library in module globals). Raises NvmlUnavailableError."""
        with _NVML_LOCK:
            self._load()
            self._init()
            try:
                yield
            finally:
                try:
                    pynvml.nvmlShutdown()
                except pynvml.NVMLError as exc:
                    log.warning("nvmlShutdown failed: %s", exc)

    def discover(self) -> DiscoveryResult:
        with self.session():
            return self._enumerate()

    def open(self) -> None:
        """Load and initialise NVML for a long-lived user (the health watcher); `close()` undoes it.
        NVML counts initialisations, so an enumeration's shutdown does not end this one."""
        with _NVML_LOCK:
            self._load()
            self._init()

    @staticmethod
    def close() -> None:
        with _NVML_LOCK:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as exc:
                log.warning("nvmlShutdown failed: %s", exc)

    def _enumerate(self) -> DiscoveryResult:
        raw_version: str | None = None
        try:
            raw_version = _text(_call("-", "nvmlSystemGetDriverVersion"))
            driver_version = norm.normalize_version(raw_version)
            cuda_version = norm.cuda_driver_version(int(_call("-", "nvmlSystemGetCudaDriverVersion")))
            count = int(_call("-", "nvmlDeviceGetCount"))
        except (_GpuFailed, ValueError) as exc:
            problem = str(exc).replace("GPU -: ", "")
            return DiscoveryResult(
                devices=[], problems=[f"no GPUs published: {problem}"], driver_version=raw_version
            )
        minors = read_mig_minors(self.proc_root)
        devices: list[Device] = []
        problems: list[str] = []
        for index in range(count):
            try:
                devices.extend(self._gpu(index, driver_version, cuda_version, minors, problems))
            except (_GpuFailed, ValueError) as exc:
                problems.append(f"{exc}; GPU left out")
        return DiscoveryResult(devices=devices, problems=problems, driver_version=raw_version)

    def _gpu(
        self,
        index: int,
        driver_version: Version,
        cuda_version: Version,
        minors: dict[str, int] | None,
        problems: list[str],
    ) -> list[Device]:
        label = f"index {index}"
        handle = _call(label, "nvmlDeviceGetHandleByIndex", index)
        uuid = _text(_call(label, "nvmlDeviceGetUUID", handle))
        label = f"index {index} ({uuid})"
        cc_major, cc_minor = _call(label, "nvmlDeviceGetCudaComputeCapability", handle)
        bus_id = norm.pcie_bus_id(_text(_call(label, "nvmlDeviceGetPciInfo", handle).busId))
        norm.pci_bus_id_attribute(bus_id, label)
        arch = int(_call(label, "nvmlDeviceGetArchitecture", handle))
        gpu = GpuFacts(
            minor=int(_call(label, "nvmlDeviceGetMinorNumber", handle)),
            uuid=uuid,
            product_name=_text(_call(label, "nvmlDeviceGetName", handle)),
            brand=norm.brand_name(int(_call(label, "nvmlDeviceGetBrand", handle)), label),
            architecture=norm.architecture_name(arch, label),
            cuda_compute_capability=norm.compute_capability(cc_major, cc_minor),
            driver_version=driver_version,
            cuda_driver_version=cuda_version,
            pcie_bus_id=bus_id,
            pcie_root=self._pcie_root(label, bus_id),
            memory_bytes=int(_call(label, "nvmlDeviceGetMemoryInfo", handle).total),
            addressing_mode=_addressing_mode(label, handle),
            numa_node=self._numa_node(label, bus_id),
        )
        if not self._mig_enabled(label, handle) or self.dynamic_mig:
            return [gpu_device(gpu)]
        migs = self._mig_devices(label, handle, gpu, minors, problems)
        if not migs:
            problems.append(f"GPU {label}: MIG is enabled but there are no MIG devices; nothing published")
        return migs

    def _pcie_root(self, label: str, bus_id: str) -> str | None:
        try:
            return pcie_root(bus_id, self.sysfs_root)
        except PcieRootError as exc:
            log.warning("GPU %s: resource.kubernetes.io/pcieRoot omitted: %s", label, exc)
            return None

    def _numa_node(self, label: str, bus_id: str) -> int | None:
        """The GPU's NUMA node from sysfs; None (no attribute) where it has none or it cannot be read."""
        try:
            return numa_node(bus_id, self.sysfs_root)
        except NumaNodeError as exc:
            log.warning("GPU %s: resource.kubernetes.io/numaNode omitted: %s", label, exc)
            return None

    @staticmethod
    def _mig_enabled(label: str, handle: Any) -> bool:
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        except pynvml.NVMLError_NotSupported:
            return False
        except pynvml.NVMLError as exc:
            raise _GpuFailed(f"GPU {label}: nvmlDeviceGetMigMode failed: {exc}") from None
        return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)

    @staticmethod
    def _gi_profiles(label: str, handle: Any) -> dict[int, _Profile]:
        """GPU-instance profiles by profile ID (skipping profiles this GPU does not support)."""
        return {
            int(info.id): _Profile(index, info)
            for index, info in gpu_instance_profiles(handle, lambda msg: _GpuFailed(f"GPU {label}: {msg}"))
        }

    def _mig_devices(
        self, label: str, handle: Any, gpu: GpuFacts, minors: dict[str, int] | None, problems: list[str]
    ) -> list[Device]:
        profiles = self._gi_profiles(label, handle)
        context = _MigContext(parent=handle, gpu=gpu, profiles=profiles, minors=minors)
        devices = []
        for slot in range(int(_call(label, "nvmlDeviceGetMaxMigDeviceCount", handle))):
            try:
                mig_handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError_NotFound:
                continue  # an empty slot
            except pynvml.NVMLError as exc:
                problems.append(
                    f"GPU {label}: nvmlDeviceGetMigDeviceHandleByIndex({slot}) failed: {exc}; "
                    "MIG device left out"
                )
                continue
            try:
                devices.append(_mig(f"{label} MIG slot {slot}", mig_handle, context))
            except (_GpuFailed, ValueError) as exc:
                problems.append(f"{exc}; MIG device left out")
        return devices


def _addressing_mode(label: str, handle: Any) -> str | None:
    """`HMM`/`ATS`/`None`, or None (no attribute) where the library or the platform lacks the query.

    As go-nvlib's GetAddressingModeAsString: a library without `nvmlDeviceGetAddressingMode` or
    NOT_SUPPORTED (a non-coherent platform) means no attribute; any other failure fails the GPU.
    """
    try:
        value = pynvml.nvmlDeviceGetAddressingMode(handle)
    except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NotSupported):
        return None
    except pynvml.NVMLError as exc:
        raise _GpuFailed(f"GPU {label}: nvmlDeviceGetAddressingMode failed: {exc}") from None
    return norm.addressing_mode_name(int(value), label)


@dataclass(frozen=True)
class _MigContext:
    parent: Any
    gpu: GpuFacts
    profiles: dict[int, _Profile]
    minors: dict[str, int] | None


def _mig(label: str, handle: Any, ctx: _MigContext) -> Device:
    """One MIG device: GI/CI ids, GI profile (capacities, name) and placement."""
    uuid = _text(_call(label, "nvmlDeviceGetUUID", handle))
    label = f"{label} ({uuid})"
    gi_id = int(_call(label, "nvmlDeviceGetGpuInstanceId", handle))
    ci_id = int(_call(label, "nvmlDeviceGetComputeInstanceId", handle))
    gi = _call(label, "nvmlDeviceGetGpuInstanceById", ctx.parent, gi_id)
    gi_info = _call(label, "nvmlGpuInstanceGetInfo", gi)
    ci_info = _call(
        label, "nvmlComputeInstanceGetInfo", _call(label, "nvmlGpuInstanceGetComputeInstanceById", gi, ci_id)
    )
    profile = ctx.profiles.get(int(gi_info.profileId))
    if profile is None:
        raise _GpuFailed(f"GPU {label}: GPU-instance profile {gi_info.profileId} is not a profile of the GPU")
    info, gpu = profile.info, ctx.gpu
    start, size = int(gi_info.placement.start), int(gi_info.placement.size)
    caps = mig_caps_nodes(ctx.minors, gpu.minor, gi_id, ci_id) if ctx.minors is not None else None
    if caps is None:
        log.warning(
            "GPU %s: MIG capability nodes for gi %d / ci %d not found; publishing without them",
            label,
            gi_id,
            ci_id,
        )
    return mig_device(
        gpu,
        name=norm.mig_device_name(gpu.minor, int(gi_info.profileId), start, size),
        uuid=uuid,
        profile=norm.mig_profile_name(
            gi_slices=int(info.sliceCount),
            ci_slices=int(ci_info.placement.size),
            mig_memory_mib=int(info.memorySizeMB),
            total_memory_bytes=gpu.memory_bytes,
            profile_index=profile.index,
        ),
        capacity=norm.mig_capacity(
            multiprocessors=int(info.multiprocessorCount),
            copy_engines=int(info.copyEngineCount),
            decoders=int(info.decoderCount),
            encoders=int(info.encoderCount),
            jpeg_engines=int(info.jpegCount),
            ofa_engines=int(info.ofaCount),
            memory_mib=int(info.memorySizeMB),
            placement_start=start,
            placement_size=size,
        ),
        caps_nodes=caps or (),
    )
