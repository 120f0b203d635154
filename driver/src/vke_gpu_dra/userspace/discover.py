"""The NVIDIA driver's user-space under a driver root: what NVIDIA's nvcdi mounts into containers.

Pure logic apart from file-system reads (lstat, readlink, listdir, the root's `etc/ld.so.cache`
and ELF headers). Paths are container paths: absolute paths as seen inside the driver root, which
are also the paths a container gets. `DriverRoot` maps them to where this process reads them
(`path`, e.g. the chart's `/driver-root` mount) and to host paths for CDI `hostPath`s (`host_path`,
e.g. `/` or `/run/nvidia/driver`).

Found like nvcdi (nvidia-container-toolkit 1.18, `pkg/nvcdi/driver-nvml.go`):

* `libcuda.so.<version>` through the root's ld.so.cache (64-bit entries of this machine), then the
  standard library directories; then every regular file `*.so.<version>` in that directory and its
  `vdpau/` (directories and dangling links named like libraries are skipped: NVIDIA #1272);
* the soname and development links of each library as `create-symlinks` recreates them;
* driver binaries in the root's PATH directories, GSP firmware `nvidia/<version>/gsp*.bin` in the
  firmware search paths, the persistenced and fabric-manager IPC sockets under `/run`, `/var/run`;
* control device nodes and per-GPU DRM nodes (`device_nodes.py`).
"""

from __future__ import annotations

import logging
import os
import platform
import stat
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Final

from . import elf, ldcache

log = logging.getLogger(__name__)

LD_CACHE: Final = "/etc/ld.so.cache"
#: Standard library directories (searched after the ld.so.cache; NVIDIA's plugin uses this list).
LIBRARY_DIRS: Final = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
)
#: Where binaries are looked up (the default PATH of NVIDIA's executable locator).
BINARY_DIRS: Final = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
#: Driver binaries nvcdi mounts when present.
BINARIES: Final = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
NVML_SONAME: Final = "libnvidia-ml.so.1"
SMI_BINARY: Final = "nvidia-smi"
HOOK_BINARY: Final = "nvidia-cdi-hook"
#: IPC sockets: the first of /run, /var/run that has each.
IPC_SOCKETS: Final = ("nvidia-persistenced/socket", "nvidia-fabricmanager/socket")
IPC_DIRS: Final = ("/run", "/var/run")
_MAX_LINKS: Final = 40


class UserSpaceError(Exception):
    """The driver's user-space cannot be found under the root; the message names root and what."""


# ------------------------------------------------------------------------------------------- the root


@dataclass(frozen=True)
class DriverRoot:
    """A driver root as this process reads it (`path`) and as the host names it (`host_path`)."""

    path: Path
    host_path: str = "/"

    def local(self, container_path: str) -> Path:
        """Where this process reads `container_path` (no symlink resolution)."""
        return self.path / container_path.lstrip("/")

    def host(self, container_path: str) -> str:
        """The host path of `container_path`: the host root plus the container path."""
        root = self.host_path.rstrip("/")
        return f"{root}{container_path}" if root else container_path

    def resolve(self, container_path: str) -> str | None:
        """`container_path` with every symlink resolved inside the root (absolute links stay in it);
        None when a component is missing, a link dangles, or links loop."""
        pending = [p for p in container_path.split("/") if p]
        done: list[str] = []
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            candidate = "/" + "/".join([*done, part])
            try:
                info = os.lstat(self.local(candidate))
            except OSError:
                return None
            if not stat.S_ISLNK(info.st_mode):
                done.append(part)
                continue
            hops += 1
            if hops > _MAX_LINKS:
                return None
            target = os.readlink(self.local(candidate))
            if target.startswith("/"):
                done = []
            pending = [p for p in target.split("/") if p] + pending
        return "/" + "/".join(done)

    def regular_file(self, container_path: str) -> str | None:
        """The resolved path when `container_path` is (a link to) a regular file, else None."""
        resolved = self.resolve(container_path)
        if resolved is None:
            return None
        try:
            return resolved if stat.S_ISREG(os.stat(self.local(resolved)).st_mode) else None
        except OSError:
            return None

    def is_link(self, container_path: str) -> bool:
        try:
            return stat.S_ISLNK(os.lstat(self.local(container_path)).st_mode)
        except OSError:
            return False


# ---------------------------------------------------------------------------------------- the result


@dataclass(frozen=True)
class Library:
    """One driver library: `path` (resolved container path), its SONAME, and the links to create."""

    path: str
    soname: str | None
    #: (target, link) pairs as `create-symlinks --link target::link` takes them.
    links: tuple[tuple[str, str], ...] = ()

    @property
    def directory(self) -> str:
        return str(PurePosixPath(self.path).parent)

    @property
    def name(self) -> str:
        return PurePosixPath(self.path).name


@dataclass(frozen=True)
class File:
    """A file to mount: `path` in the container, `resolved` its target inside the root."""

    path: str
    resolved: str


@dataclass(frozen=True)
class UserSpace:
    """Everything of the driver's user-space found under `root` for driver `version` (raw string)."""

    root: DriverRoot
    version: str
    libcuda_dir: str | None = None
    libraries: tuple[Library, ...] = ()
    binaries: tuple[File, ...] = ()
    firmware: tuple[File, ...] = ()
    ipc_sockets: tuple[File, ...] = ()

    def missing(self) -> list[str]:
        """What containers need and the root lacks: `libnvidia-ml.so.1` and `nvidia-smi`."""
        lacking = []
        if not any(
            lib.soname == NVML_SONAME or lib.name.startswith("libnvidia-ml.so.") for lib in self.libraries
        ):
            lacking.append(NVML_SONAME)
        if not any(PurePosixPath(b.path).name == SMI_BINARY for b in self.binaries):
            lacking.append(SMI_BINARY)
        return lacking


# --------------------------------------------------------------------------------------- discovery


def read_ld_cache(root: DriverRoot) -> list[ldcache.CacheEntry]:
    """The root's ld.so.cache entries; [] (logged) when it is missing or unreadable."""
    resolved = root.regular_file(LD_CACHE)
    if resolved is None:
        log.info("no %s under driver root %s; using the standard library directories", LD_CACHE, root.path)
        return []
    try:
        return ldcache.parse(root.local(resolved).read_bytes())
    except (OSError, ldcache.LdCacheError) as exc:
        log.warning(
            "cannot read %s under driver root %s: %s; using the standard library directories",
            LD_CACHE,
            root.path,
            exc,
        )
        return []


def find_libcuda_dir(root: DriverRoot, version: str, machine: str | None = None) -> str | None:
    """The directory holding the regular file `libcuda.so.<version>`: ld.so.cache first, then LIBRARY_DIRS."""
    candidates = [
        str(PurePosixPath(e.value).parent)
        for e in read_ld_cache(root)
        if e.key.startswith("libcuda.so") and e.is_native_64bit(machine)
    ]
    for directory in dict.fromkeys([*candidates, *LIBRARY_DIRS]):
        if root.regular_file(f"{directory}/libcuda.so.{version}") is not None:
            return directory
    return None


def library_candidates(root: DriverRoot, soname: str, machine: str | None = None) -> list[str]:
    """Container paths where `soname` may be, in search order: the root's ld.so.cache (64-bit entries
    of this machine) first, then LIBRARY_DIRS (NVIDIA's library locator order)."""
    cached = [e.value for e in read_ld_cache(root) if e.key == soname and e.is_native_64bit(machine)]
    return list(dict.fromkeys([*cached, *(f"{d}/{soname}" for d in LIBRARY_DIRS)]))


def locate_library(root: DriverRoot, soname: str, machine: str | None = None) -> tuple[str, str] | None:
    """The first candidate path of `soname` that resolves (inside the root) to a regular file, and
    that file; None when none does."""
    for path in library_candidates(root, soname, machine):
        resolved = root.regular_file(path)
        if resolved is not None:
            return path, resolved
    return None


def find_library(root: DriverRoot, soname: str, machine: str | None = None) -> str | None:
    """The resolved container path of the regular file `soname` (e.g. `libnvidia-ml.so.1`), searched
    as `library_candidates` orders it; else None."""
    found = locate_library(root, soname, machine)
    return None if found is None else found[1]


def _so_link(name: str) -> str:
    """`libfoo.so.1.2` -> `libfoo.so` (the development link name)."""
    while True:
        stem, dot, ext = name.rpartition(".")
        if not dot or not stem:
            return ""
        if ext == "so":
            return name
        name = stem


def _links(
    root: DriverRoot, directory: str, name: str, soname: str | None, version: str
) -> list[tuple[str, str]]:
    """The links nvcdi's create-symlinks hook makes for one library (toolkit `discover/symlinks.go`)."""
    links: list[tuple[str, str]] = []
    if fnmatch(name, f"libcuda.so.{version}"):
        links.append(("libcuda.so.1", f"{directory}/libcuda.so"))
    elif fnmatch(name, f"libGLX_nvidia.so.{version}"):
        links.append((name, f"{directory}/libGLX_indirect.so.0"))
    elif fnmatch(name, f"libnvidia-opticalflow.so.{version}"):
        links.append(("libnvidia-opticalflow.so.1", f"{directory}/libnvidia-opticalflow.so"))
    if soname and soname != name and root.is_link(f"{directory}/{soname}"):
        links.append((name, f"{directory}/{soname}"))
    target = soname or name
    dev = _so_link(target)
    if dev and dev != target and root.is_link(f"{directory}/{dev}"):
        links.append((target, f"{directory}/{dev}"))
    return list(dict.fromkeys(links))


def _library(root: DriverRoot, resolved: str, version: str) -> Library:
    directory, name = str(PurePosixPath(resolved).parent), PurePosixPath(resolved).name
    try:
        soname = elf.file_soname(root.local(resolved))
    except (OSError, elf.ElfError) as exc:
        log.warning("cannot read the SONAME of %s under driver root %s: %s", resolved, root.path, exc)
        soname = None
    return Library(resolved, soname, tuple(_links(root, directory, name, soname, version)))


def _listdir(root: DriverRoot, directory: str) -> list[str]:
    try:
        return sorted(os.listdir(root.local(directory)))
    except OSError:
        return []


def find_libraries(root: DriverRoot, libdir: str, version: str) -> list[Library]:
    """Every regular file `*.so.<version>` (and legacy `libnvidia-nvvm70.so.*`) in `libdir` and its vdpau/."""
    found: dict[str, Library] = {}
    for directory in (libdir, f"{libdir}/vdpau"):
        resolved_dir = root.resolve(directory)
        if resolved_dir is None:
            continue
        for name in _listdir(root, resolved_dir):
            if not (fnmatch(name, f"*.so.{version}") or fnmatch(name, "libnvidia-nvvm70.so.*")):
                continue
            resolved = root.regular_file(f"{directory}/{name}")
            if resolved is None:
                log.info(
                    "skipping %s/%s under driver root %s: not a regular file", directory, name, root.path
                )
                continue
            if resolved not in found:
                found[resolved] = _library(root, resolved, version)
    return list(found.values())


def find_binary(root: DriverRoot, name: str) -> File | None:
    """The executable `name` in the root's PATH directories, or None.

    The API for other parts of the driver (e.g. MPS needs `nvidia-cuda-mps-control`):
    `root.local(found.resolved)` is where this process can run it, `root.host(found.resolved)` its host path.
    """
    for directory in BINARY_DIRS:
        path = f"{directory}/{name}"
        resolved = root.regular_file(path)
        if resolved is not None and os.access(root.local(resolved), os.X_OK):
            return File(path, resolved)
    return None


def firmware_dirs(release: str) -> tuple[str, ...]:
    """The kernel's firmware search paths for kernel `release` (nvcdi's order)."""
    return (
        f"/lib/firmware/updates/{release}",
        "/lib/firmware/updates",
        f"/lib/firmware/{release}",
        "/lib/firmware",
    )


def find_firmware(root: DriverRoot, version: str, release: str | None = None) -> list[File]:
    """GSP firmware `nvidia/<version>/gsp*.bin` in the firmware search paths."""
    found: dict[str, File] = {}
    for base in firmware_dirs(release or platform.release()):
        directory = f"{base}/nvidia/{version}"
        for name in _listdir(root, root.resolve(directory) or directory):
            if fnmatch(name, "gsp*.bin"):
                resolved = root.regular_file(f"{directory}/{name}")
                if resolved is not None and resolved not in found:
                    found[resolved] = File(f"{directory}/{name}", resolved)
    return list(found.values())


def find_ipc_sockets(root: DriverRoot) -> list[File]:
    """The persistenced and fabric-manager sockets that exist (first of /run, /var/run)."""
    found = []
    for socket in IPC_SOCKETS:
        for base in IPC_DIRS:
            path = f"{base}/{socket}"
            resolved = root.resolve(path)
            try:
                if resolved is not None and stat.S_ISSOCK(os.stat(root.local(resolved)).st_mode):
                    found.append(File(path, resolved))
                    break
            except OSError:
                continue
    return found


def discover(
    root: DriverRoot, version: str, *, machine: str | None = None, release: str | None = None
) -> UserSpace:
    """The driver user-space of driver `version` (NVML's raw string, e.g. `535.104.05`) under `root`.

    Raises UserSpaceError when the root is not a directory or has no `libcuda.so.<version>`.
    """
    if not version:
        raise UserSpaceError("the driver version is unknown, so the driver libraries cannot be found")
    if not root.path.is_dir():
        raise UserSpaceError(f"driver root {root.path} is not a directory")
    libdir = find_libcuda_dir(root, version, machine)
    if libdir is None:
        where = ", ".join([f"{LD_CACHE} entries", *LIBRARY_DIRS])
        raise UserSpaceError(
            f"driver root {root.path} has no regular file libcuda.so.{version} (searched {where})"
        )
    libraries = find_libraries(root, libdir, version)
    binaries = [b for b in (find_binary(root, name) for name in BINARIES) if b is not None]
    return UserSpace(
        root=root,
        version=version,
        libcuda_dir=libdir,
        libraries=tuple(libraries),
        binaries=tuple(binaries),
        firmware=tuple(find_firmware(root, version, release)),
        ipc_sockets=tuple(find_ipc_sockets(root)),
    )
