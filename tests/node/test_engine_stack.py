"""The mission on the real node, through the real engine: `pulumi up` of a stack aimed at the node tier's
cluster (the `local` stack's settings with the driver image by digest, NVML as the device source and the
node's fake driver root), with the real Pulumi CLI, language host and Kubernetes provider as the engine
tier runs them (`tests/engine/workspace.py`), on the real kubelet 1.34.4 (VKE's release).

The provider installs the chart's Helm release and waits for its DaemonSet (whose pod the real kubelet
runs from the driver image), the DeviceClasses, and the sample, waiting for its Deployment: Running, and
inside its container `nvidia-smi -L` lists exactly the GPU of its claim. `vke-gpu-dra verify` passes every
check of the procedure against the cluster, the sample's log included (read through the API server, which
reaches the kubelet through the node plane's egress proxy). `pulumi destroy` removes the stack's objects,
the kubelet has the sample's claim unprepared (its DRA checkpoint holds none) and no claim is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.objects import lookup

from tests.engine.test_stack_lifecycle import _server_objects
from tests.engine.workspace import ROOT, SAMPLE_NAMESPACE, Workspace, tool_dirs
from tests.integration.cluster import Cluster
from tests.integration.controlplane import wait_until

from .chart import GPUS, driver_image, driver_root, drop_unowned_device_classes, kubelet_claims
from .kube import (
    NodePlane,
    join,
    kubelet_of,
)
from .node import FIGURES, Node
from .test_chart_daemonset import PROBE, plugin_pod, sample_pods, sees_exactly
from .test_containerd_cdi import IMAGE, probe_image

STACK = "node"
VKE_GPU_DRA = Path(sys.executable).with_name("vke-gpu-dra")


@pytest.fixture
def workspace() -> Iterator[Workspace]:
    """The engine tier's workspace: a copy of the project with its own file backend."""
    tools = tool_dirs()
    with tempfile.TemporaryDirectory(prefix="engine-") as root:
        yield Workspace.create(Path(root), tools)


def stack_config(ws: Workspace, plane: NodePlane, image: str, driver_root: Path) -> dict[str, Any]:
    """The `local` stack's settings aimed at `plane`: the image by digest, NVML and the fake driver root,
    the sample's image and arguments the probe's, the chart's own GPU-pool affinity."""
    kubeconfig = plane.write_kubeconfig(ws.root / "kubeconfig", plane.admin().token, "node-admin")
    local = yaml.safe_load((ROOT / "Pulumi.local.yaml").read_text())["config"]
    dropped = ("vke-gpu-dra:kubeconfig", "vke-gpu-dra:driver.image.build", "vke-gpu-dra:driver.simulated")
    config = {k: v for k, v in local.items() if not k.startswith(dropped)}
    config |= {
        "vke-gpu-dra:kubeconfigPath": str(kubeconfig),
        "vke-gpu-dra:driver.image": image,
        "vke-gpu-dra:driver.deviceSource": "nvml",
        "vke-gpu-dra:driver.nvidiaDriverRoot": str(driver_root),
        "vke-gpu-dra:driver.kubeletPluginOnAllNodes": "false",
        "vke-gpu-dra:driver.timeoutSeconds": "180",
        "vke-gpu-dra:sample.namespace": SAMPLE_NAMESPACE,
        "vke-gpu-dra:sample.image": IMAGE,
        "vke-gpu-dra:sample.args": ["-c", PROBE],
    }
    return config


def verify(kubeconfig: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [str(VKE_GPU_DRA), "verify", "--kubeconfig", str(kubeconfig), "-n", facts.DRIVER_NAMESPACE,
         "--workload-namespace", SAMPLE_NAMESPACE, "--expected-devices-per-node", str(GPUS), "-o", "json",
         *extra],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout) if done.stdout else {}, done.stderr


@pytest.mark.parametrize("plane", ["1.34"], indirect=True)
def test_pulumi_up_runs_the_mission_on_the_real_node_and_destroy_gives_every_gpu_back(
    node: Node, plane: NodePlane, workspace: Workspace
) -> None:
    kubelet_of(plane.kubelet)  # skips (one line) before anything is built where it is not there
    image = driver_image()
    node.import_image(image)
    root = driver_root(node)
    node.import_image(probe_image(node.base / "images" / "probe.tar", root.local("/usr/bin/nvidia-smi")))
    join(node, plane)
    drop_unowned_device_classes(plane)  # the program's chart release owns them
    workspace.stack_file(STACK).write_text(
        yaml.safe_dump({"config": stack_config(workspace, plane, image.by_digest, root.path)})
    )
    workspace.stack_init(STACK)

    run, events = workspace.up(STACK, check=False)
    assert run.returncode == 0, f"{events.errors()}\n{run.stderr[-3000:]}\n{node.logs()}"
    api = plane.admin()
    objects = _server_objects(api)
    assert objects["deviceclasses"] == sorted(spec.name for spec in facts.DEVICE_CLASSES)
    assert objects["claim templates"] == ["single-gpu"] and objects["deployments"] == ["gpu-test"]
    driver = Cluster(plane, facts.DRIVER_NAMESPACE, api, node.base)
    pod = plugin_pod(driver, node)
    assert pod["spec"]["containers"][0]["image"] == image.by_digest
    published = [d for s in driver.slices_of(node.name) for d in s["spec"].get("devices", [])]
    slices = {d["name"]: d["attributes"][facts.ATTR_UUID]["string"] for d in published}
    assert len(slices) == GPUS
    workload = Cluster(plane, SAMPLE_NAMESPACE, api, node.base)
    [sample] = sample_pods(workload, node, 1)
    sees_exactly(workload, node, sample, slices)
    claim = workload.claim_of(sample)["metadata"]["uid"]
    assert kubelet_claims(node) == [claim], "the kubelet holds the sample's claim prepared"

    code, doc, stderr = verify(workspace.root / "kubeconfig", "--timeout", "60")
    steps = {s["id"]: s for s in doc.get("steps", [])}
    assert code == 0 and doc["result"] == "pass", (stderr, json.dumps(steps, indent=1))
    passed = {k for k, s in steps.items() if s["status"] == "pass"}
    assert passed == set(steps) and "sample-log" in passed, steps
    assert steps["resource-slices"]["found"] == f"{node.name}: {GPUS} (gpu-0; gpu-1)"

    destroy = workspace.pulumi("destroy", "--stack", STACK, "--yes", "--json", timeout=600)
    assert destroy.events().result == "succeeded", destroy.output[-3000:]
    left = {kind: names for kind, names in _server_objects(api).items() if names}
    assert left == {}, left
    assert wait_until(lambda: not kubelet_claims(node), timeout=60), "the kubelet unprepared the claim"
    # no claim allocated from this node is left (earlier tests' claims on nodes that are gone are theirs)
    on_node = [
        c["metadata"]["name"]
        for c in api.items("/apis/resource.k8s.io/v1/resourceclaims")
        if any(
            r.get("pool") == node.name for r in lookup(c, "status", "allocation", "devices", "results") or []
        )
    ]
    assert on_node == []
    FIGURES.append(
        f"{plane.label}: pulumi up {run.seconds:.0f}s (chart, classes, sample Running "
        f"with its GPU), verify passed {len(passed)} steps, destroy {destroy.seconds:.0f}s"
    )
