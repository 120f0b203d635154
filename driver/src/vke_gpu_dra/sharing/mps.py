"""The MPS objects of a claim, as NVIDIA's 25.8.1 plugin shapes them (pure): the control daemon's ID,
its directories on the node, its Deployment, its readiness and the workload's CDI edits."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from vke_gpu_dra_core.featuregates import FeatureGates

MPS_DIR_NAME: Final = "mps"
MPS_DAEMON_NAME_FMT: Final = "mps-control-daemon-{}"
#: Where workloads see the MPS pipe directory (NVIDIA's value).
MPS_PIPE_IN_CONTAINER: Final = "/tmp/nvidia-mps"
#: Where the driver root is mounted in the plugin container and in the daemon pod (NVIDIA's value).
CONTAINER_DRIVER_ROOT: Final = "/driver-root"


def daemon_id(claim_uid: str, uuids: Sequence[str]) -> str:
    """NVIDIA's ID: `<claimUID>-<first 5 hex of sha256 of the comma-joined UUIDs>`."""
    return f"{claim_uid}-{hashlib.sha256(','.join(uuids).encode()).hexdigest()[:5]}"


def daemon_name(ident: str) -> str:
    """The name of the control daemon's Deployment."""
    return MPS_DAEMON_NAME_FMT.format(ident)


def mps_dirs(plugin_data_dir: Path, ident: str) -> dict[str, Path]:
    root = plugin_data_dir / MPS_DIR_NAME / ident
    return {"root": root, "pipe": root / "pipe", "shm": root / "shm", "log": root / "log"}


def mps_cdi_edits(plugin_data_dir: Path, ident: str) -> dict[str, Any]:
    """The workload's container edits for one MPS daemon (NVIDIA's GetCDIContainerEdits)."""
    return mps_container_edits(mps_dirs(plugin_data_dir, ident)["root"], MPS_PIPE_IN_CONTAINER)


def mps_container_edits(root: Path, pipe_in_container: str) -> dict[str, Any]:
    """A workload's container edits for the MPS daemon whose directories are under `root`: the pipe
    directory in the environment, `root`'s shm and pipe directories bound in (also for the daemons of
    claims adopted from NVIDIA's plugin)."""
    options = ["rw", "nosuid", "nodev", "bind"]
    return {
        "env": [f"CUDA_MPS_PIPE_DIRECTORY={pipe_in_container}"],
        "mounts": [
            {"hostPath": str(root / "shm"), "containerPath": "/dev/shm", "options": options},
            {"hostPath": str(root / "pipe"), "containerPath": pipe_in_container, "options": options},
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
    """The control-daemon Deployment, shaped as NVIDIA's templates/mps-control-daemon.tmpl.yaml, its
    container run as root (NVIDIA's image has no other user; ours defaults to 65532)."""
    name = daemon_name(ident)
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
                            # root, as NVIDIA's image runs: the plugin's image defaults to a non-root
                            # user, and chroot needs CAP_SYS_CHROOT, which privileged gives only to root
                            "securityContext": {"privileged": True, "runAsUser": 0, "runAsGroup": 0},
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
