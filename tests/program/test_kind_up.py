"""scripts/kind-up against fake docker, kind and kubectl on PATH (each records its arguments)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.program import harness

SCRIPT = harness.ROOT / "scripts" / "kind-up"

FAKE = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$FAKE_LOG"
case "$(basename "$0") $1 $2" in
  "kind version "*) echo "${FAKE_KIND_VERSION:-v0.30.0}" ;;
  "kind get clusters") [ -f "$FAKE_DIR/created" ] && echo vke-gpu-dra ;;
  "kind get nodes") echo vke-gpu-dra-control-plane; echo vke-gpu-dra-worker ;;
  "kind create cluster") cat > "$FAKE_DIR/kind-config.yaml"; touch "$FAKE_DIR/created" ;;
  "kubectl --context kind-vke-gpu-dra") case "$*" in
      *" version "*) echo '{"serverVersion": {"major": "1", "minor": "'"${FAKE_MINOR:-34}"'"}}' ;;
      *api-resources*) echo deviceclasses.resource.k8s.io ;;
    esac ;;
  "docker exec "*) echo "      enable_cdi = ${FAKE_CDI:-true}" ;;
esac
exit 0
"""


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("docker", "kind", "kubectl"):
        (bin_dir / tool).write_text(FAKE)
        (bin_dir / tool).chmod(0o755)
    environ = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_LOG": str(tmp_path / "log"),
        "FAKE_DIR": str(tmp_path),
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT)], env=environ, capture_output=True, text=True, timeout=60, check=False
    )


def test_creates_a_134_cluster_with_cdi_on_and_checks_it(tmp_path: Path) -> None:
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "log").read_text()
    assert "kind create cluster --name vke-gpu-dra --image kindest/node:v1.34.0" in log
    config = (tmp_path / "kind-config.yaml").read_text()
    assert '[plugins."io.containerd.cri.v1.runtime"]' in config
    assert "enable_cdi = true" in config and '"/var/run/cdi"' in config
    assert "docker exec vke-gpu-dra-worker containerd config dump" in log
    assert "ready (Kubernetes 1.34, CDI on)" in proc.stdout
    # A second run reuses the cluster and checks it again.
    assert run(tmp_path).returncode == 0
    assert (tmp_path / "log").read_text().count("kind create cluster") == 1


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"FAKE_KIND_VERSION": "v0.29.0"}, "0.30 or later"),
        ({"KIND_NODE_IMAGE": "kindest/node:v1.33.1"}, "1.34 or later"),
        ({"FAKE_MINOR": "33"}, "serves Kubernetes 1.33"),
        ({"FAKE_CDI": "false"}, "CDI off"),
    ],
)
def test_refuses_what_cannot_run_the_driver(tmp_path: Path, env: dict[str, str], message: str) -> None:
    proc = run(tmp_path, **env)
    assert proc.returncode == 1
    assert message in proc.stderr, proc.stderr


def test_needs_docker_kind_and_kubectl(tmp_path: Path) -> None:
    env = {"PATH": "/nonexistent", "HOME": str(tmp_path)}
    proc = subprocess.run(
        ["/bin/bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 1 and "docker is not installed" in proc.stderr
    assert os.access(SCRIPT, os.X_OK)
