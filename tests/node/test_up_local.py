"""The README's first command where there is no Docker: `scripts/up local --yes` as a first-time user (empty
HOME, no Pulumi login) as root brings up a local node (containerd 2.1 and the kubelet 1.37 of the toolchain,
in namespaces of its own), builds the driver image without a daemon, imports it by digest and runs the
`local` stack on that cluster with the real Pulumi CLI and Kubernetes provider: the chart's DaemonSet runs
the image on the real kubelet, its slice is published, and the sample Deployment's pod runs with its GPU.
The sample's log is read through the API server and `vke-gpu-dra verify` passes. The tracked stack file
gets only its salt. `scripts/down local --yes` destroys the stack and stops the node,
leaving nothing behind.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engine.test_up_script import PASSPHRASE, script, user_env
from tests.engine.workspace import ROOT, Workspace, tool_dirs
from tools import local_node, toolchain, up

from .node import FIGURES

pytestmark = pytest.mark.node


def kubectl(kubeconfig: str, *args: str) -> Any:
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "kubectl"), "--kubeconfig", kubeconfig, *args, "-o", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def test_scripts_up_local_without_docker_runs_the_stack_on_a_local_node(tmp_path: Path) -> None:
    problem = up.setup_problem(ROOT)
    if problem:
        pytest.skip(f"the virtualenvs are not set up ({problem}): run scripts/setup")
    ws = Workspace.create(tmp_path / "ws", tool_dirs())
    served = tmp_path / "local-node"
    no_docker = tmp_path / "no-docker"
    no_docker.mkdir()
    (no_docker / "docker").write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    (no_docker / "docker").chmod(0o755)
    env = user_env(
        ws, doubles=(), PULUMI_CONFIG_PASSPHRASE=PASSPHRASE, VKE_GPU_DRA_LOCAL_NODE=str(served),
        VKE_GPU_DRA_TOOLCHAIN_CACHE=str(toolchain.cache_root()),
    )  # fmt: skip
    env["PATH"] = f"{no_docker}:{env['PATH']}"
    tracked = (ROOT / "Pulumi.local.yaml").read_text()
    begin = time.monotonic()
    try:
        done = script(ws, "up", "local", "--yes", env=env, timeout=900)
        assert done.returncode == 0, f"{done.stdout[-5000:]}\n{done.stderr[-3000:]}"
        took = time.monotonic() - begin
        assert "no Docker here: stack local runs on a local node" in done.stdout
        state = json.loads((served / "state.json").read_text())
        kubeconfig = state["kubeconfig"]
        # the chart's plugin pod on the real kubelet, from the image by digest; the node's GPUs published
        [plugin] = kubectl(kubeconfig, "get", "pods", "-n", "nvidia-dra-driver-gpu")["items"]
        assert plugin["status"]["phase"] == "Running"
        assert "@sha256:" in plugin["spec"]["containers"][0]["image"]
        slices = kubectl(kubeconfig, "get", "resourceslices")["items"]
        assert [s["spec"]["nodeName"] for s in slices] == [state["node"]]
        # the sample: Running, its claim allocated from that slice
        pods = [
            p
            for p in kubectl(kubeconfig, "get", "pods", "-A")["items"]
            if p["metadata"]["name"] != plugin["metadata"]["name"]
        ]
        assert pods and all(p["status"]["phase"] == "Running" for p in pods), pods
        claims = kubectl(kubeconfig, "get", "resourceclaims", "-A")["items"]
        assert claims and all(c["status"]["allocation"]["devices"]["results"] for c in claims)
        # what the README has a user run next: the sample's log through the API server, and verify
        [sample] = pods
        log = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "kubectl"), "--kubeconfig", kubeconfig, "logs", "-n",
             sample["metadata"]["namespace"], sample["metadata"]["name"]],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert log.returncode == 0 and "GPU_DEVICE_" in log.stdout, log.stdout + log.stderr
        verify = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "vke-gpu-dra"), "verify", "--kubeconfig", kubeconfig,
             "--timeout", "60", "-o", "json"],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        report = json.loads(verify.stdout or "{}")
        assert verify.returncode == 0 and report.get("result") == "pass", verify.stdout + verify.stderr
        # the repository's stack file: its salt, nothing of the node
        now = yaml.safe_load((ws.project / "Pulumi.local.yaml").read_text())
        assert {k: v for k, v in now.items() if k != "encryptionsalt"} == yaml.safe_load(tracked)
    finally:
        down = script(ws, "down", "local", "--yes", env=env, timeout=600)
        if local_node.LocalNode(served).state() is not None:  # the test's own clean-up, whatever down did
            local_node.LocalNode(served).stop()
    assert down.returncode == 0, f"{down.stdout[-3000:]}\n{down.stderr[-3000:]}"
    assert "the local node is stopped and gone" in down.stdout
    assert not (served / "state.json").exists()
    assert not Path(state["folder"]).exists(), "the node's folder is gone"
    FIGURES.append(f"scripts/up local without Docker: the stack Running on a local node in {took:.0f} s")
