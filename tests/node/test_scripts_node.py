"""scripts/node, the node in a box for a person: it starts, says how to reach the node, and stops leaving
nothing behind (on Ctrl-C, or at once with --once)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.node


def scripts_node(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "node"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_once_starts_and_stops_leaving_nothing() -> None:
    done = scripts_node("--once")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("node vke-node-") and "address 192.0.2.10" in lines[0]
    assert any(line.strip().startswith("enter it:  nsenter -t ") for line in lines)
    assert lines[-1].endswith("stopped, nothing left behind")
    folder = Path(lines[0].split("folder ")[1].split(",")[0])
    assert not folder.exists()


def test_ctrl_c_stops_it() -> None:
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "node")], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (lines and lines[-1] == "Ctrl-C stops it\n"):
        lines.append(proc.stdout.readline())
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # a failed stop: SIGTERM takes the same path, so no node outlives the test
            proc.terminate()
            proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.splitlines()[-1].endswith("stopped, nothing left behind")


def test_an_unknown_release_is_refused() -> None:
    done = scripts_node("--kubelet", "1.99")
    assert done.returncode == 2
    assert "invalid choice: '1.99'" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kubelet", "1.38"], "invalid choice: '1.38'"),  # no kubelet 1.38 is built (unavailable.toml)
        (["--control-plane", "1.38"], "--control-plane 1.38 needs --kubelet (or --serve)"),
        (["--kubelet", "1.37", "--control-plane", "1.34"], "up to three minors older than its control plane"),
    ],
    ids=["no-such-kubelet", "control-plane-alone", "kubelet-newer"],  # no release in an id: the 1.37 lane
)
def test_a_kubelet_that_cannot_join_the_control_plane_asked_for_is_refused(
    args: list[str], message: str
) -> None:
    done = scripts_node(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stdout == "", "nothing was started"


@pytest.mark.parametrize("control_plane", ["1.38"])  # its id puts it in the 1.38 lane
def test_a_kubelet_joins_a_newer_control_plane(control_plane: str) -> None:
    """kubelet 1.37 on a 1.38 control plane, as while a cluster's control plane is upgraded first."""
    done = scripts_node("--kubelet", "1.37", "--control-plane", control_plane, "--once", timeout=240)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.strip().startswith("kubelet:   registered with https://127.0.0.1:") for line in lines), (
        lines
    )
    assert lines[-1].endswith("stopped, nothing left behind")
