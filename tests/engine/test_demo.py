"""`vke-gpu-dra demo` through the real Pulumi CLI (the Automation API runs it) and a file backend: a demo
stack made from a base stack aimed at the engine tier's Kubernetes 1.34 cluster, brought up with the
policy pack and verified (`vke-gpu-dra verify`, the procedure's checks), listed with its expiry, and, once
expired, destroyed and removed by `demo reap`."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from vke_gpu_dra_core import facts

from tests.integration.controlplane import ControlPlane

from .conftest import timed
from .kubelet import NodeAgent
from .workspace import BIN, Workspace, run_group

BASE = "engine"
TAG_EXPIRES_AT = "vke-gpu-dra:expires-at"


def demo(ws: Workspace, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`vke-gpu-dra demo ARGS` in the project copy, against the workspace's second backend."""
    backend = f"file://{ws.root / 'demo-state'}"
    argv = [
        str(BIN / "vke-gpu-dra"),
        "demo",
        *args,
        "--project-dir",
        str(ws.project),
        "--backend-url",
        backend,
    ]
    env = {k: v for k, v in ws.env().items() if k != "PULUMI_BACKEND_URL"}
    stdout, stderr, returncode = run_group(argv, cwd=ws.project, env=env, timeout=timeout)
    return subprocess.CompletedProcess(argv, returncode, stdout, stderr)


def listed(ws: Workspace) -> list[dict[str, Any]]:
    result = demo(ws, "list", "-o", "json")
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


def test_demo_up_list_expire_and_reap(
    workspace: Workspace, plane: ControlPlane, gpu_node: tuple[str, NodeAgent]
) -> None:
    _, agent = gpu_node
    api = plane.admin()
    workspace.aim_at(plane, BASE)

    begin = time.monotonic()
    up = demo(workspace, "up", "--base-stack", BASE, "--ttl", "2h", "--user", "ci")
    timed("demo up (pulumi up with the pack, then verify)", time.monotonic() - begin)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr[-4000:]}\n{agent.report()}"
    [entry] = listed(workspace)
    name = entry["name"]
    assert name.startswith("demo-ci-") and (entry["baseStack"], entry["owner"], entry["expired"]) == (
        BASE,
        "ci",
        False,
    )
    expires = datetime.strptime(entry["expiresAt"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert timedelta(hours=1, minutes=55) < expires - datetime.now(UTC) <= timedelta(hours=2)
    assert f"demo stack {name} is up" in up.stdout
    assert api.exists(f"/api/v1/namespaces/{facts.DRIVER_NAMESPACE}")

    # Two hours later, as far as the stack's tag says.
    past = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    workspace.pulumi("stack", "tag", "set", TAG_EXPIRES_AT, past, "--stack", name,
                     env={"PULUMI_BACKEND_URL": f"file://{workspace.root / 'demo-state'}"})  # fmt: skip
    [entry] = listed(workspace)
    assert entry["expired"] is True

    begin = time.monotonic()
    reap = demo(workspace, "reap")
    timed("demo reap (pulumi destroy, stack removed)", time.monotonic() - begin)
    assert reap.returncode == 0, reap.stderr[-4000:]
    assert f"destroyed and removed {name}" in reap.stdout
    # The real CLI's closing advice to run `pulumi stack rm` is not passed on: the stack is removed.
    assert "Destroying" in reap.stderr and "pulumi stack rm" not in reap.stderr + reap.stdout
    assert listed(workspace) == []
    assert not (workspace.project / f"Pulumi.{name}.yaml").exists()
    assert not api.exists(f"/api/v1/namespaces/{facts.DRIVER_NAMESPACE}")
    assert [c["metadata"]["name"] for c in api.items("/apis/resource.k8s.io/v1/deviceclasses")] == []
