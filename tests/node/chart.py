"""The chart's driver DaemonSet on a node: the driver image, the fake driver root it is given as
`nvidiaDriverRoot`, `helm install` of driver/chart, and reading a container's output.

The fake driver root (`tests/driver/fake_driver`: the fake libnvidia-ml, the stub nvidia-smi, device nodes
made with mknod) carries the fake NVML's configuration compiled into its library, so the plugin's container
(which sees the root at the chart's /driver-root, with no environment of ours) and a GPU container (given
the library file alone by the claim's CDI spec) read the same GPUs. As the real NVML in a container, the
fake lists only the GPUs whose device node is present: in /dev (a GPU container: the nodes of its claim)
or in the driver root's dev/ (the plugin, which reads the device nodes there as from a driver container's
root).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from vke_gpu_dra_core import facts

from tests.chart.chartlib import find_helm
from tests.driver import fake_driver
from tests.driver.fake_driver import FakeRoot
from tests.integration.controlplane import ControlPlane, wait_until
from tools import driver_image as driver_image_tool

from .images import Image
from .kube import get_or_none
from .node import Node
from .test_containerd_cdi import PRODUCT, UUIDS

CHART = Path(__file__).resolve().parents[2] / "driver" / "chart"
#: Where the chart mounts the driver root in the plugin's container (its driverRootCtrPath).
DRIVER_ROOT_IN_PLUGIN = "/driver-root"
GPUS = len(UUIDS)


def nvml_settings(gpus: int = GPUS) -> dict[str, object]:
    """The fake NVML's GPUs (one A30 per minor), listed where their device node is present."""
    settings: dict[str, object] = {
        "device_count": gpus,
        "require_device_nodes": f"/dev,{DRIVER_ROOT_IN_PLUGIN}/dev",
    }
    for i in range(gpus):
        settings |= {f"gpu.{i}.name": PRODUCT, f"gpu.{i}.uuid": UUIDS[i], f"gpu.{i}.minor": i}
    return settings


def driver_root(node: Node, gpus: int = GPUS) -> FakeRoot:
    """The node's fake NVIDIA driver root (its folder `driver/root`), for the chart's nvidiaDriverRoot."""
    return fake_driver.build(node.base / "driver" / "root", gpus=gpus, nvml_config=nvml_settings(gpus))


def driver_image() -> Image:
    """The driver image built from driver/Dockerfile's recipe with no daemon (`tools.driver_image`; cached
    under a key of every input, so a changed driver source is a new image)."""
    return driver_image_tool.build()


def helm(plane: ControlPlane, home: Path, *args: str, timeout: float = 180.0) -> str:
    """The project's helm against `plane` (its admin kubeconfig), its state under `home`."""
    binary = find_helm()
    if binary is None:
        pytest.skip("helm not found: run scripts/setup (it links the toolchain's helm into .venv/bin)")
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    env |= {f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")}
    done = subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def drop_unowned_device_classes(plane: ControlPlane) -> None:
    """Delete the DeviceClasses of the chart that no helm release owns (earlier tests of the control plane
    apply them as shared objects, `Cluster.install_chart`): a helm release, or the program's, installs only
    what it owns."""
    for spec in facts.DEVICE_CLASSES:
        path = f"/apis/resource.k8s.io/v1/deviceclasses/{spec.name}"
        found = get_or_none(plane, path)
        if found and "meta.helm.sh/release-name" not in (found["metadata"].get("annotations") or {}):
            plane.admin().delete(path)


@contextmanager
def release(plane: ControlPlane, node: Node, namespace: str, values: dict[str, Any]) -> Iterator[str]:
    """`helm install` of driver/chart as release `driver` into `namespace` with `values` (after
    `drop_unowned_device_classes`); uninstalled afterwards (waiting for its objects to go)."""
    drop_unowned_device_classes(plane)
    home = node.base / "helm"
    home.mkdir(exist_ok=True)
    values_file = home / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    helm(plane, home, "install", "driver", str(CHART), "--namespace", namespace, "--values", str(values_file))
    try:
        yield "driver"
    finally:
        helm(plane, home, "uninstall", "driver", "--namespace", namespace, "--wait", "--timeout", "120s")


def container_id(node: Node, namespace: str, pod: str, container: str) -> str:
    """The running container's id, through the CRI."""
    labels = [
        "--label",
        f"io.kubernetes.pod.namespace={namespace}",
        "--label",
        f"io.kubernetes.pod.name={pod}",
    ]
    ids = node.crictl("ps", "--name", f"^{container}$", *labels, "-q").stdout.split()
    assert len(ids) == 1, f"{namespace}/{pod}: containers {ids}"
    return ids[0]


def output_until(node: Node, cid: str, last: str, timeout: float = 60.0) -> list[str]:
    """The container's output once a line starts with `last`."""

    def lines() -> list[str]:
        logs = node.crictl("logs", cid, check=False)
        out = (logs.stdout + logs.stderr).splitlines()
        return out if any(line.startswith(last) for line in out) else []

    found: list[str] = wait_until(lines, timeout=timeout)
    assert found, f"container {cid} printed no {last!r}:\n{node.crictl('logs', cid, check=False).stderr}"
    return found


def kubelet_claims(node: Node) -> list[str]:
    """The UIDs of the claims the kubelet holds prepared (its DRA checkpoint, `dra_manager_state` in its
    root folder: what it would unprepare)."""
    checkpoint = node.base / "kubelet" / "dra_manager_state"
    if not checkpoint.exists():
        return []
    data = json.loads(json.loads(checkpoint.read_text())["Data"])
    return [str(claim["ClaimUID"]) for claim in data.get("ClaimInfoStateList") or []]
