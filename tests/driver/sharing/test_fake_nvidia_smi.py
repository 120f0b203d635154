"""The fake driver root's nvidia-smi (tests/driver/fake_driver/nvidia_smi.c), which the node tier's sharing
tests read: it lists the GPUs its libnvidia-ml lists, sets compute mode and time-slice of one GPU of
them, records each setting, and refuses what the real tool refuses."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.driver import fake_driver

UUIDS = ("GPU-00000000-0000-4000-8000-00000000000a", "GPU-11111111-1111-4111-8111-11111111111b")


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, str], Path]:
    monkeypatch.delenv("FAKE_NVML_CONFIG", raising=False)
    settings: dict[str, object] = {"device_count": 2}
    for i, uuid in enumerate(UUIDS):
        settings |= {f"gpu.{i}.name": "NVIDIA A30", f"gpu.{i}.uuid": uuid, f"gpu.{i}.minor": i}
    root = fake_driver.build(tmp_path / "root", nodes=False, nvml_config=settings)
    log = tmp_path / "smi.log"
    env = {**os.environ, "LD_LIBRARY_PATH": str(root.local(root.libdir)), "FAKE_NVIDIA_SMI_LOG": str(log)}
    return root.local("/usr/bin/nvidia-smi"), env, log


def run(smi: tuple[Path, dict[str, str], Path], *args: str) -> subprocess.CompletedProcess[str]:
    binary, env, _ = smi
    return subprocess.run([str(binary), *args], env=env, capture_output=True, text=True, check=False)


def test_lists_and_sets_one_gpu_and_records_it(smi: tuple[Path, dict[str, str], Path]) -> None:
    assert run(smi, "-L").stdout.splitlines() == [
        f"GPU {i}: NVIDIA A30 (UUID: {uuid})" for i, uuid in enumerate(UUIDS)
    ]
    assert run(smi, "-i", UUIDS[1], "-c", "EXCLUSIVE_PROCESS").returncode == 0
    assert run(smi, "-i", "0", "-c", "0").returncode == 0  # an index, the mode's number
    assert run(smi, "compute-policy", "-i", UUIDS[0], "--set-timeslice", "3").returncode == 0
    assert smi[2].read_text().splitlines() == [
        f"{UUIDS[1]} compute-mode EXCLUSIVE_PROCESS",
        f"{UUIDS[0]} compute-mode DEFAULT",
        f"{UUIDS[0]} timeslice 3",
    ]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("-i", "GPU-not-here", "-c", "DEFAULT"), 6, "No devices were found"),
        (("-i", "2", "-c", "DEFAULT"), 6, "No devices were found"),
        (("-i", UUIDS[0], "-c", "SHARED"), 2, "Invalid compute mode value."),
        (("compute-policy", "-i", UUIDS[0], "--set-timeslice", "4"), 2, "Invalid timeslice value"),
        (("-c", "DEFAULT"), 2, "Invalid combination of input arguments."),
    ],
)
def test_refuses_what_the_real_tool_refuses_and_records_nothing(
    smi: tuple[Path, dict[str, str], Path], args: tuple[str, ...], code: int, message: str
) -> None:
    done = run(smi, *args)
    assert (done.returncode, done.stdout) == (code, "")
    assert message in done.stderr
    assert not smi[2].exists()
