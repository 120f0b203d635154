"""The tier's own machinery, without a control plane: when it runs, when it is skipped, how it stops."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from .controlplane import BINARIES, HOW_TO_GET, missing_assets, path_of, stop_processes, wait_until


def test_without_the_toolchain_the_tier_says_how_to_build_it() -> None:
    assert missing_assets("1.37", None) == (
        f"the toolchain's Kubernetes 1.37 and etcd 3.6 are not built: {HOW_TO_GET}"
    )
    assert "scripts/toolchain" in HOW_TO_GET


def test_a_folder_lacking_a_binary_is_named_with_what_is_missing(tmp_path: Path) -> None:
    for name in ("kube-apiserver", "etcd"):
        (tmp_path / name).write_text("")
        (tmp_path / name).chmod(0o755)
    reason = missing_assets("1.34", tmp_path)
    assert reason == f"{tmp_path} lacks kube-scheduler, kube-controller-manager: {HOW_TO_GET}"


def test_a_complete_folder_runs_the_tier(tmp_path: Path) -> None:
    for name in BINARIES:
        (tmp_path / name).write_text("")
        (tmp_path / name).chmod(0o755)
    assert missing_assets("1.37", tmp_path) is None


@pytest.mark.parametrize(
    ("obj", "path"),
    [
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}},
         "/api/v1/namespaces/n/pods/p"),
        ({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
          "metadata": {"name": "s", "namespace": "n"}},
         "/apis/resource.k8s.io/v1/resourceslices/s"),
        ({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d", "namespace": "n"}},
         "/apis/apps/v1/namespaces/n/daemonsets/d"),
    ],
)  # fmt: skip
def test_rest_paths_of_manifests(obj: dict, path: str) -> None:
    assert path_of(obj) == path


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period() -> None:
    stubborn = subprocess.Popen(
        ["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"],
        stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    polite = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
        began = time.monotonic()
        stop_processes([stubborn, polite], grace=0.5)
        assert polite.returncode == -15 and stubborn.returncode == -9
        assert time.monotonic() - began < 5
        assert wait_until(lambda: not group_alive(stubborn.pid), timeout=5), "the sleep in its group survived"
    finally:
        for proc in (stubborn, polite):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if stubborn.stdout:
            stubborn.stdout.close()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
