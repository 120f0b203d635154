"""Build the fake libnvidia-ml.so.1 (fake_nvml.c) for tests, and write its configuration files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBRARY_NAME = "libnvidia-ml.so.1"


def build(out_dir: Path) -> Path:
    """Compile the fake into `out_dir/libnvidia-ml.so.1` (gcc; well under a second)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc is needed to build the fake NVML library")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY_NAME
    subprocess.run(
        [
            gcc,
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pthread",
            f"-Wl,-soname,{LIBRARY_NAME}",
            "-o",
            str(target),
            str(SOURCE),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


def write_config(path: Path, settings: dict[str, object]) -> Path:
    """One `key=value` line per setting (see the comment at the top of fake_nvml.c)."""
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path
