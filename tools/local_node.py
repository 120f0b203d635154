"""The `local` stack's cluster where there is no Docker: a one-node cluster on this machine, as root (the node
tier's node in a box with the kubelet 1.37 on a control plane of the toolchain, `scripts/node --serve`), the
driver image built without a daemon (`tools.driver_image`) and imported into the node's containerd.

`scripts/up local` uses it when `docker info` does not answer (with Docker, kind stays the path):

* the cluster is started once and kept, in the background, until `scripts/down local`; its state is in
  `~/.cache/vke-gpu-dra/local-node/` (state.json, the kubeconfig, the log);
* the image is built (or reused while its inputs stay the same) and imported by digest;
* `pulumi up` runs with `--config-file` naming a copy of Pulumi.local.yaml in that folder, whose cluster
  and image keys point at this cluster (`kubeconfigPath`, `kubeconfigContext`, `driver.image` by digest,
  no `driver.image.build`, the sample on the node's own busybox image): the repository's file is not
  changed.

Standard library only (scripts/up imports it before .venv exists; the node itself runs under .venv).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import toolchain

#: How long the cluster may take to come up (a cold machine starts etcd, the API server and the kubelet).
START_TIMEOUT = 300.0
STOP_TIMEOUT = 90.0
#: What the node tier's node and its control plane need from the toolchain.
TOOLS = ("containerd", "runc", "cni-plugins", "crictl", "etcd", "kubernetes-1.37")
#: The stack keys the copy of the stack file sets (everything else is the stack's own).
PROJECT = "vke-gpu-dra"


class LocalNodeError(RuntimeError):
    """The local node cannot be had here, or did not come up; the message says why and what to do."""


def folder(environ: Mapping[str, str]) -> Path:
    """$VKE_GPU_DRA_LOCAL_NODE, else ~/.cache/vke-gpu-dra/local-node (beside the toolchain's cache)."""
    if environ.get("VKE_GPU_DRA_LOCAL_NODE"):
        return Path(environ["VKE_GPU_DRA_LOCAL_NODE"]).expanduser()

    return toolchain.cache_root(environ).parent / "local-node"


def docker_answers(environ: Mapping[str, str], timeout: float = 20.0) -> bool:
    """Whether a Docker daemon answers `docker info` (the kind path)."""
    try:
        done = subprocess.run(
            ["docker", "info"], capture_output=True, timeout=timeout, check=False, env=dict(environ)
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def why_not(environ: Mapping[str, str]) -> str | None:
    """Why this machine cannot run the local node, or None."""
    if sys.platform != "linux":
        return "the local node needs Linux (namespaces, cgroups, overlayfs); install Docker and kind instead"
    if os.geteuid() != 0:
        return (
            "the local node runs as root (namespaces, mounts, cgroups): "
            "run scripts/up local as root, or install Docker and kind"
        )
    return None


@dataclass(frozen=True)
class LocalNode:
    """The served cluster's folder and what its state file says."""

    path: Path

    @property
    def state_file(self) -> Path:
        return self.path / "state.json"

    @property
    def log(self) -> Path:
        return self.path / "node.log"

    def state(self) -> dict[str, Any] | None:
        """The running cluster's state, or None (no state file, or its process is gone)."""
        try:
            state = json.loads(self.state_file.read_text())
            running = _alive(int(state["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return dict(state) if running else None

    def start(self, root: Path) -> dict[str, Any]:
        """The running cluster's state; started first (in the background, its own session) when none runs."""
        state = self.state()
        if state is not None:
            return state
        self.path.mkdir(parents=True, exist_ok=True)
        self.state_file.unlink(missing_ok=True)
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                [str(root / "scripts" / "node"), "--serve", str(self.path)],
                cwd=root, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while (state := self.state()) is None:
            if process.poll() is not None:
                raise LocalNodeError(f"scripts/node --serve exited ({process.returncode}):\n{self._tail()}")
            if time.monotonic() > deadline:
                process.terminate()
                raise LocalNodeError(
                    f"the local node did not come up within {START_TIMEOUT:.0f} s:\n{self._tail()}"
                )
            time.sleep(0.5)
        return state

    def stop(self) -> bool:
        """SIGTERM to the serving process, then wait until it is gone (it stops the node and the control
        plane and checks that nothing is left). False when none was running."""
        state = self.state()
        if state is None:
            return False
        pid = int(state["pid"])
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while _alive(pid):
            if time.monotonic() > deadline:
                raise LocalNodeError(f"the local node (pid {pid}) did not stop within {STOP_TIMEOUT:.0f} s")
            time.sleep(0.2)
        if "stopped, left behind:" in self._tail(lines=3):
            raise LocalNodeError(f"the local node stopped but left something behind:\n{self._tail(lines=3)}")
        return True

    def import_image(self, root: Path, archive: Path) -> str:
        """`archive` imported into the node's containerd; its reference by digest."""
        done = subprocess.run(
            [str(root / "scripts" / "node"), "--serve", str(self.path), "--import-image", str(archive)],
            cwd=root, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise LocalNodeError(
                done.stderr.strip() or f"scripts/node --import-image exited {done.returncode}"
            )
        return str(json.loads(done.stdout)["reference"])

    def config_file(
        self, stack: str, stack_file: Mapping[str, Any], state: Mapping[str, Any], image: str
    ) -> Path:
        """A copy of the stack's file (its salt and secrets included) aimed at this cluster and image."""
        data = dict(stack_file)
        config = dict(data.get("config") or {})
        config.pop(f"{PROJECT}:driver.image.build", None)
        config.pop(f"{PROJECT}:kubeconfig", None)
        config |= {
            f"{PROJECT}:kubeconfigPath": state["kubeconfig"],
            f"{PROJECT}:kubeconfigContext": state["context"],
            f"{PROJECT}:driver.image": image,
            f"{PROJECT}:sample.image": state["sample_image"],
        }
        data["config"] = config
        path = self.path / f"Pulumi.{stack}.yaml"
        path.write_text(json.dumps(data, indent=2) + "\n")  # JSON is YAML
        path.chmod(0o600)
        return path

    def _tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a child of ours that exited stays a zombie until reaped
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False
