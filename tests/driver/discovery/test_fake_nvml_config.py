"""Where the fake libnvidia-ml finds its configuration, and which GPUs it lists.

A process given no environment (the chart's plugin container) reads `fake-nvml.conf` beside the library
file; a container whose CDI spec mounts the library file alone reads the configuration compiled into it;
$FAKE_NVML_CONFIG wins over both. With `require_device_nodes`, as the real NVML in a container, only the
GPUs whose device node is present are listed. Each case runs the stub nvidia-smi, which dlopen()s
`libnvidia-ml.so.1` by SONAME as the real one does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.driver import fake_driver, fake_nvml

UUIDS = ("GPU-0a0b0c0d-0000-4000-8000-000000000000", "GPU-1a1b1c1d-1111-4111-8111-111111111111")


def two_gpus(**extra: object) -> dict[str, object]:
    settings: dict[str, object] = {"device_count": 2}
    for i, uuid in enumerate(UUIDS):
        settings |= {f"gpu.{i}.name": "NVIDIA A30", f"gpu.{i}.uuid": uuid, f"gpu.{i}.minor": i}
    return settings | extra


@pytest.fixture(scope="module")
def smi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake_driver.build_stub_smi(tmp_path_factory.mktemp("smi") / "nvidia-smi")


def listed(smi: Path, library: Path, config: Path | None = None) -> list[str]:
    """The UUIDs `nvidia-smi -L` lists with `library`'s folder on the loader's path."""
    env = {"LD_LIBRARY_PATH": str(library.parent), "PATH": os.environ.get("PATH", "")}
    if config is not None:
        env["FAKE_NVML_CONFIG"] = str(config)
    done = subprocess.run([str(smi), "-L"], env=env, capture_output=True, text=True, check=True, timeout=30)
    return [line.rsplit("UUID: ", 1)[1].rstrip(")") for line in done.stdout.splitlines()]


def test_without_any_configuration_no_gpu_is_listed(smi: Path, tmp_path: Path) -> None:
    assert listed(smi, fake_nvml.build(tmp_path)) == []


def test_the_compiled_in_configuration_is_read_without_the_environment(smi: Path, tmp_path: Path) -> None:
    library = fake_nvml.build(tmp_path / "lib", builtin=two_gpus())
    assert listed(smi, library) == list(UUIDS)
    # $FAKE_NVML_CONFIG first
    only = fake_nvml.write_config(tmp_path / "one.conf", {"device_count": 1, "gpu.0.uuid": "GPU-env"})
    assert listed(smi, library, only) == ["GPU-env"]


def test_the_file_beside_the_library_wins_over_the_compiled_in_one(smi: Path, tmp_path: Path) -> None:
    library = fake_nvml.build(tmp_path / "lib", builtin=two_gpus())
    fake_nvml.write_config(
        library.parent / fake_nvml.BESIDE_LIBRARY, {"device_count": 1, "gpu.0.uuid": "GPU-b"}
    )
    assert listed(smi, library) == ["GPU-b"]
    env = fake_nvml.write_config(tmp_path / "env.conf", {"device_count": 0})
    assert listed(smi, library, env) == [], "$FAKE_NVML_CONFIG first"


@pytest.mark.skipif(not fake_driver.can_mknod(), reason="device nodes need root (mknod)")
def test_require_device_nodes_lists_only_the_gpus_whose_node_is_present(smi: Path, tmp_path: Path) -> None:
    dev, other = tmp_path / "dev", tmp_path / "driver-root" / "dev"
    library = fake_nvml.build(tmp_path / "lib", builtin=two_gpus(require_device_nodes=f"{dev},{other}"))
    dev.mkdir()
    (dev / "nvidia0").write_text("not a device node")
    assert listed(smi, library) == [], "neither folder has a character device of either GPU"
    fake_driver.mknod(dev / "nvidia1", 195, 1)
    assert listed(smi, library) == [UUIDS[1]], "GPU 1 alone, at index 0"
    fake_driver.mknod(other / "nvidia0", 195, 0)
    assert listed(smi, library) == list(UUIDS), "a node in any of the folders counts"


@pytest.mark.skipif(not fake_driver.can_mknod(), reason="device nodes need root (mknod)")
def test_a_gpu_without_its_node_is_not_found_by_uuid(tmp_path: Path) -> None:
    fake_driver.mknod(tmp_path / "dev" / "nvidia1", 195, 1)
    library = fake_nvml.build(tmp_path / "lib", builtin=two_gpus(require_device_nodes=tmp_path / "dev"))
    probe = (
        "import ctypes, sys\n"
        f"lib = ctypes.CDLL({str(library)!r})\n"
        "assert lib.nvmlInitWithFlags(0) == 0\n"
        "handle = ctypes.c_void_p()\n"
        "print(*(lib.nvmlDeviceGetHandleByUUID(u.encode(), ctypes.byref(handle)) for u in sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *UUIDS], env={}, capture_output=True, text=True, check=True, timeout=30
    )
    assert done.stdout.split() == ["6", "0"], "NVML_ERROR_NOT_FOUND for GPU 0, whose node is missing"


def test_a_builtin_configuration_that_is_not_printable_ascii_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"printable ASCII lines only, got 'gpu.0.name=A\\x00B\\n'"):
        fake_nvml.build(tmp_path, builtin={"gpu.0.name": "A\0B"})
