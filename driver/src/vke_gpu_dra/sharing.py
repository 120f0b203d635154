"""GPU sharing as NVIDIA's 25.8.1 plugin applies it: time-slicing through `nvidia-smi`, MPS through a
control-daemon Deployment per claim.

`SharingManager.apply` runs what a prepared claim's configs ask (before its checkpoint entry is
completed) and returns the `SharingRecord` that the checkpoint keeps; `undo` reverses exactly a
record, also after a restart. Every `nvidia-smi` call names one GPU (`-i <uuid>`): without it
nvidia-smi would change every GPU of the node. Pure parts (the Deployment, the CDI edits, the
daemon ID) are functions; I/O goes through the injected runner and API.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from vke_gpu_dra_core.device_model import Device
from vke_gpu_dra_core.featuregates import FeatureGates

from .kubeapi import KubeError
from .opaque_config import MpsSettings, OpaqueConfigError, mps_limits
from .userspace import BINARY_DIRS, NVML_SONAME, SMI_BINARY, DriverRoot, find_binary, find_library

log = logging.getLogger(__name__)

NVIDIA_SMI_TIMEOUT: Final = 10.0
MPS_DIR_NAME: Final = "mps"
MPS_DAEMON_NAME_FMT: Final = "mps-control-daemon-{}"
#: Where workloads see the MPS pipe directory (NVIDIA's value).
MPS_PIPE_IN_CONTAINER: Final = "/tmp/nvidia-mps"
#: Where the driver root is mounted in the plugin container and in the daemon pod (NVIDIA's value).
CONTAINER_DRIVER_ROOT: Final = "/driver-root"
READY_POLL_SECONDS: Final = 0.5


class SharingError(Exception):
    """Applying or undoing a sharing setting failed; the message is for the claim's error."""


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class NvidiaSmi:
    """`nvidia-smi` of the driver root, one GPU per call, bounded by a timeout."""

    def __init__(self, driver_root: Path, *, runner: Runner = subprocess.run) -> None:
        self._root = driver_root
        self._runner = runner

    def run(self, args: Sequence[str], deadline: float) -> None:
        if "-i" not in args:
            raise ValueError("nvidia-smi must be called for one GPU (-i <uuid>)")
        root = DriverRoot(self._root)
        found = find_binary(root, SMI_BINARY)
        if found is None:
            raise SharingError(
                f"nvidia-smi not found under driver root {self._root} ({', '.join(BINARY_DIRS)})"
            )
        binary = root.local(found.resolved)
        env = dict(os.environ)
        library = find_library(root, NVML_SONAME)
        if library is not None:  # as NVIDIA's plugin: preload the driver root's NVML
            env["LD_PRELOAD"] = ":".join(
                p for p in (str(root.local(library)), env.get("LD_PRELOAD", "")) if p
            )
        timeout = min(NVIDIA_SMI_TIMEOUT, deadline - time.monotonic())
        command = [str(binary), *args]
        if timeout <= 0:
            raise SharingError(f"no time left for {' '.join(args)} (kubelet's deadline passed)")
        try:
            done = self._runner(
                command, env=env, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise SharingError(f"nvidia-smi {' '.join(args)} did not finish within {timeout:.1f}s") from None
        except OSError as exc:
            raise SharingError(f"cannot run nvidia-smi {' '.join(args)}: {exc}") from None
        if done.returncode != 0:
            output = " ".join((done.stdout + done.stderr).split())[:300]
            raise SharingError(f"nvidia-smi {' '.join(args)} failed (exit {done.returncode}): {output}")

    def set_compute_mode(self, uuid: str, mode: str, deadline: float) -> None:
        self.run(["-i", uuid, "-c", mode], deadline)

    def set_timeslice(self, uuid: str, value: int, deadline: float) -> None:
        self.run(["compute-policy", "-i", uuid, "--set-timeslice", str(value)], deadline)


def default_shm_size(meminfo: Path = Path("/proc/meminfo")) -> str:
    """Half the node's memory, as NVIDIA sizes the MPS shm tmpfs (fallback 65536k)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                parts = line.split(":", 1)[1].split()
                return f"{int(parts[0]) // 2}{parts[1][0] if len(parts) > 1 else ''}"
    except (OSError, ValueError, IndexError):
        pass
    return "65536k"


class Mounter:
    """`mount`/`umount` of the MPS shm tmpfs (NVIDIA's options), bounded by a timeout."""

    def __init__(
        self, *, runner: Runner = subprocess.run, shm_size: Callable[[], str] = default_shm_size
    ) -> None:
        self._runner = runner
        self._shm_size = shm_size

    def _run(self, command: list[str]) -> None:
        try:
            done = self._runner(
                command, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SharingError(f"{' '.join(command)} failed: {exc}") from None
        if done.returncode != 0:
            output = " ".join((done.stdout + done.stderr).split())[:300]
            raise SharingError(f"{' '.join(command)} failed (exit {done.returncode}): {output}")

    def mount_shm(self, path: Path) -> None:
        options = f"rw,nosuid,nodev,noexec,relatime,size={self._shm_size()}"
        self._run(["mount", "-t", "tmpfs", "-o", options, "shm", str(path)])

    def unmount(self, path: Path) -> None:
        if path.is_mount():
            self._run(["umount", str(path)])


class DeploymentAPI(Protocol):
    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def create_deployment(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]: ...
    def delete_deployment(self, namespace: str, name: str) -> None: ...


# ------------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class MpsRecord:
    daemon_id: str
    devices: tuple[str, ...]


@dataclass(frozen=True)
class SharingRecord:
    """What one claim changed on this node; kept in its checkpoint entry."""

    #: device name -> time-slice value set on that full GPU.
    timeslice: Mapping[str, int] = field(default_factory=dict)
    mps: tuple[MpsRecord, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.timeslice or self.mps)

    def to_json(self) -> dict[str, Any]:
        return {
            "timeslice": dict(sorted(self.timeslice.items())),
            "mps": [{"daemonId": m.daemon_id, "devices": list(m.devices)} for m in self.mps],
        }

    @classmethod
    def from_json(cls, data: Any) -> SharingRecord:
        if not isinstance(data, Mapping) or set(data) - {"timeslice", "mps"}:
            raise ValueError(f"sharing must be an object with timeslice and mps, got {data!r}")
        ts = data.get("timeslice", {})
        if not isinstance(ts, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in ts.items()
        ):
            raise ValueError(f"sharing.timeslice must map device names to integers, got {ts!r}")
        mps = []
        for raw in data.get("mps", []):
            if not (
                isinstance(raw, Mapping)
                and isinstance(raw.get("daemonId"), str)
                and isinstance(raw.get("devices"), list)
                and all(isinstance(d, str) for d in raw["devices"])
            ):
                raise ValueError(f"sharing.mps entries need daemonId and devices, got {raw!r}")
            mps.append(MpsRecord(raw["daemonId"], tuple(raw["devices"])))
        return cls(dict(ts), tuple(mps))


@dataclass(frozen=True)
class MpsGroup:
    """The devices one MPS config applies to in a claim, with its settings and the config's label."""

    devices: tuple[Device, ...]
    settings: MpsSettings
    label: str


@dataclass(frozen=True)
class Plan:
    """What a claim asks: time-slice value per full GPU, MPS groups."""

    timeslice: Mapping[str, int] = field(default_factory=dict)
    mps: tuple[MpsGroup, ...] = ()


# ---------------------------------------------------------------------------------- pure parts


def daemon_id(claim_uid: str, uuids: Sequence[str]) -> str:
    """NVIDIA's ID: `<claimUID>-<first 5 hex of sha256 of the comma-joined UUIDs>`."""
    return f"{claim_uid}-{hashlib.sha256(','.join(uuids).encode()).hexdigest()[:5]}"


def mps_dirs(plugin_data_dir: Path, ident: str) -> dict[str, Path]:
    root = plugin_data_dir / MPS_DIR_NAME / ident
    return {"root": root, "pipe": root / "pipe", "shm": root / "shm", "log": root / "log"}


def mps_cdi_edits(plugin_data_dir: Path, ident: str) -> dict[str, Any]:
    """The workload's container edits for one MPS daemon (NVIDIA's GetCDIContainerEdits)."""
    dirs = mps_dirs(plugin_data_dir, ident)
    options = ["rw", "nosuid", "nodev", "bind"]
    return {
        "env": [f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_IN_CONTAINER}"],
        "mounts": [
            {"hostPath": str(dirs["shm"]), "containerPath": "/dev/shm", "options": options},
            {"hostPath": str(dirs["pipe"]), "containerPath": MPS_PIPE_IN_CONTAINER, "options": options},
        ],
    }


def mps_deployment(
    *,
    ident: str,
    node_name: str,
    namespace: str,
    image: str,
    host_driver_root: Path,
    plugin_data_dir: Path,
    uuids: Sequence[str],
    active_thread_percentage: int | None,
    limits: Mapping[str, str],
    gates: FeatureGates,
) -> dict[str, Any]:
    """The control-daemon Deployment, shaped as NVIDIA's templates/mps-control-daemon.tmpl.yaml."""
    name = MPS_DAEMON_NAME_FMT.format(ident)
    dirs = mps_dirs(plugin_data_dir, ident)
    lines = ["set -e", "rm -f /var/log/nvidia-mps/startup.log", "", "nvidia-cuda-mps-control -d"]
    if active_thread_percentage:  # NVIDIA's template skips an empty (and so also a zero) value
        lines.append(
            f"echo set_default_active_thread_percentage {active_thread_percentage} | nvidia-cuda-mps-control"
        )
    for uuid, limit in sorted(limits.items()):
        lines.append(f"echo set_default_device_pinned_mem_limit {uuid} {limit} | nvidia-cuda-mps-control")
    lines += [
        "",
        'echo "startup complete" > /var/log/nvidia-mps/startup.log',
        "",
        "tail -n +1 -f /var/log/nvidia-mps/control.log",
    ]
    labels = {"app": name}
    env = [{"name": "CUDA_VISIBLE_DEVICES", "value": ",".join(uuids)}]
    env.append({"name": "FEATURE_GATES", "value": gates.render()})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeName": node_name,
                    "hostPID": True,
                    "containers": [
                        {
                            "name": "mps-control-daemon",
                            "image": image,
                            "securityContext": {"privileged": True},
                            "command": ["chroot", CONTAINER_DRIVER_ROOT, "sh", "-c"],
                            "args": ["\n".join(lines)],
                            "startupProbe": {
                                "exec": {
                                    "command": [
                                        "cat",
                                        f"{CONTAINER_DRIVER_ROOT}/var/log/nvidia-mps/startup.log",
                                    ]
                                },
                                "initialDelaySeconds": 1,
                                "periodSeconds": 1,
                            },
                            "env": env,
                            "volumeMounts": [
                                {"name": "driver-root", "mountPath": CONTAINER_DRIVER_ROOT},
                                {
                                    "name": "mps-shm-directory",
                                    "mountPath": f"{CONTAINER_DRIVER_ROOT}/dev/shm",
                                },
                                {
                                    "name": "mps-pipe-directory",
                                    "mountPath": f"{CONTAINER_DRIVER_ROOT}/tmp/nvidia-mps",
                                },
                                {
                                    "name": "mps-log-directory",
                                    "mountPath": f"{CONTAINER_DRIVER_ROOT}/var/log/nvidia-mps",
                                },
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "driver-root", "hostPath": {"path": str(host_driver_root)}},
                        {"name": "mps-shm-directory", "hostPath": {"path": str(dirs["shm"])}},
                        {"name": "mps-pipe-directory", "hostPath": {"path": str(dirs["pipe"])}},
                        {"name": "mps-log-directory", "hostPath": {"path": str(dirs["log"])}},
                    ],
                },
            },
        },
    }


def daemon_ready(deployment: Mapping[str, Any]) -> str | None:
    """None when the daemon is ready, else why not.

    NVIDIA's AssertReady wants one ready replica and then lists the pods; a Deployment of one
    single-container pod has one ready replica exactly when that container is ready (its startup
    probe passed), so the Deployment's status alone answers and the plugin needs no access to pods.
    """
    ready = (deployment.get("status") or {}).get("readyReplicas") or 0
    if ready != 1:
        return f"waiting for MPS control daemon to come online (ready replicas: {ready})"
    return None


# -------------------------------------------------------------------------------------- manager


@dataclass
class SharingManager:
    """Applies and undoes sharing for claims of this node."""

    gates: FeatureGates
    smi: NvidiaSmi
    plugin_data_dir: Path
    node_name: str = ""
    namespace: str = "default"
    image: str | None = None
    host_driver_root: Path = Path("/")
    api: DeploymentAPI | None = None
    sleep: Callable[[float], None] = time.sleep
    mounter: Mounter = field(default_factory=Mounter)

    def check_conflicts(self, plan: Plan, others: Sequence[SharingRecord], label: str) -> None:
        """A GPU shared with another prepared claim keeps one setting: refuse a different one."""
        for other in others:
            for name, value in plan.timeslice.items():
                theirs = other.timeslice.get(name)
                if theirs is not None and theirs != value:
                    raise SharingError(
                        f"claim {label}: device {name} is shared with another prepared claim that set "
                        f"time-slice {theirs}; this claim asks for {value} (one setting per GPU)"
                    )
                if any(name in m.devices for m in other.mps):
                    raise SharingError(
                        f"claim {label}: device {name} is in use by another claim's MPS daemon"
                    )
            for group in plan.mps:
                for device in group.devices:
                    if device.name in other.timeslice or any(device.name in m.devices for m in other.mps):
                        raise SharingError(
                            f"claim {label}: device {device.name} is shared with another prepared claim; "
                            "MPS needs it alone (compute mode EXCLUSIVE_PROCESS)"
                        )

    def record_for(self, claim_uid: str, plan: Plan) -> SharingRecord:
        """The record of `plan`, written before anything is changed (so a crash can still undo it)."""
        return SharingRecord(
            dict(plan.timeslice),
            tuple(
                MpsRecord(daemon_id(claim_uid, [d.uuid for d in g.devices]), tuple(d.name for d in g.devices))
                for g in plan.mps
            ),
        )

    def apply(self, claim_uid: str, plan: Plan, devices: Mapping[str, Device], deadline: float) -> None:
        for name, value in sorted(plan.timeslice.items()):
            uuid = devices[name].uuid
            self.smi.set_compute_mode(uuid, "DEFAULT", deadline)
            self.smi.set_timeslice(uuid, value, deadline)
        for group in plan.mps:
            self._start_mps(claim_uid, group, deadline)

    def _start_mps(self, claim_uid: str, group: MpsGroup, deadline: float) -> None:
        try:
            self._start_mps_api(claim_uid, group, deadline)
        except KubeError as exc:
            raise SharingError(f"MPS control daemon: API request failed: {exc}") from None

    def _start_mps_api(self, claim_uid: str, group: MpsGroup, deadline: float) -> None:
        if self.api is None or self.image is None:
            raise SharingError("MPS needs API access and --image-name")
        uuids = [d.uuid for d in group.devices]
        ident = daemon_id(claim_uid, uuids)
        try:
            limits = mps_limits(group.settings, uuids, group.label)
        except OpaqueConfigError as exc:
            raise SharingError(str(exc)) from None
        name = MPS_DAEMON_NAME_FMT.format(ident)
        if self.api.get_deployment(self.namespace, name) is None:
            dirs = mps_dirs(self.plugin_data_dir, ident)
            for d in dirs.values():
                d.mkdir(parents=True, exist_ok=True, mode=0o755)
            if not dirs["shm"].is_mount():
                self.mounter.mount_shm(dirs["shm"])
            for uuid in uuids:
                self.smi.set_compute_mode(uuid, "EXCLUSIVE_PROCESS", deadline)
            obj = mps_deployment(
                ident=ident,
                node_name=self.node_name,
                namespace=self.namespace,
                image=self.image,
                host_driver_root=self.host_driver_root,
                plugin_data_dir=self.plugin_data_dir,
                uuids=uuids,
                active_thread_percentage=group.settings.active_thread_percentage,
                limits=limits,
                gates=self.gates,
            )
            self.api.create_deployment(self.namespace, obj)
            log.info("started MPS control daemon", extra={"fields": {"daemon": name}})
        self._wait_ready(name, deadline)

    def _wait_ready(self, name: str, deadline: float) -> None:
        assert self.api is not None
        why = "not checked"
        while True:
            deployment = self.api.get_deployment(self.namespace, name)
            if deployment is None:
                why = "its Deployment is gone"
            else:
                why = daemon_ready(deployment) or ""
                if not why:
                    return
            if time.monotonic() + READY_POLL_SECONDS >= deadline:
                raise SharingError(f"MPS control daemon {self.namespace}/{name} is not yet ready: {why}")
            self.sleep(READY_POLL_SECONDS)

    def undo(
        self, record: SharingRecord, devices: Mapping[str, Device], in_use: set[str], deadline: float
    ) -> None:
        """Reverse `record`; GPUs in `in_use` (other prepared claims) keep their setting."""
        for mps in record.mps:
            name = MPS_DAEMON_NAME_FMT.format(mps.daemon_id)
            if self.api is None:
                raise SharingError(f"cannot stop MPS control daemon {name}: no API access")
            try:
                self.api.delete_deployment(self.namespace, name)
            except KubeError as exc:
                raise SharingError(
                    f"cannot delete MPS control daemon {self.namespace}/{name}: {exc}"
                ) from None
            dirs = mps_dirs(self.plugin_data_dir, mps.daemon_id)
            if dirs["shm"].exists():
                self.mounter.unmount(dirs["shm"])
            shutil.rmtree(dirs["root"], ignore_errors=True)
            for dev in mps.devices:
                if dev in devices and dev not in in_use:
                    self.smi.set_compute_mode(devices[dev].uuid, "DEFAULT", deadline)
        for dev in sorted(record.timeslice):
            if dev in devices and dev not in in_use:
                self.smi.set_compute_mode(devices[dev].uuid, "DEFAULT", deadline)
                self.smi.set_timeslice(devices[dev].uuid, 0, deadline)


def plan_for(allocated: Sequence[Any]) -> Plan:
    """The Plan of a claim's AllocatedDevices (simulated devices have nothing to set)."""
    timeslice: dict[str, int] = {}
    groups: dict[int, tuple[list[Device], MpsSettings, str]] = {}
    for a in allocated:
        if a.device.simulated or a.sharing.strategy is None:
            continue
        if a.sharing.timeslice is not None:
            timeslice[a.device.name] = a.sharing.timeslice
        if a.sharing.mps is not None:
            key = id(a.config)
            label = a.config.label if a.config is not None else "default config"
            devices, _, _ = groups.setdefault(key, ([], a.sharing.mps, label))
            if a.device not in devices:
                devices.append(a.device)
    return Plan(timeslice, tuple(MpsGroup(tuple(d), s, lbl) for d, s, lbl in groups.values()))
