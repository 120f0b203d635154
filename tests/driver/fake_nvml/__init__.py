"""Build the fake libnvidia-ml.so.1 (fake_nvml.c, which includes fake_nvml_mig.c) for tests, and write
its configuration files."""

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


def mig_settings(gpu: int, product: str) -> dict[str, object]:
    """Settings giving GPU `gpu` the MIG profiles and placements of `product` from the core MIG catalog.

    The catalog (vke_gpu_dra_core/mig_catalog.yaml, NVIDIA's published tables) is the one source: the fake
    reports what the driver's slices and the planner read from it.
    """
    from vke_gpu_dra_core.mig_partitions import mig_product
    from vke_gpu_dra_core.profiles import get_profile

    settings: dict[str, object] = {
        f"gpu.{gpu}.name": product,
        f"gpu.{gpu}.memory": get_profile(product).memory_bytes,
        f"gpu.{gpu}.mig_max": max(len(p.placements) for p in mig_product(product).profiles),
    }
    for p in mig_product(product).profiles:
        settings[f"gpu.{gpu}.profile.{p.index}"] = (
            f"{p.profile_id},{p.slices},{p.multiprocessors},{p.copy_engines},{p.decoders},{p.encoders},"
            f"{p.jpeg_engines},{p.ofa_engines},{p.memory_mib}"
        )
        settings[f"gpu.{gpu}.profile_name.{p.index}"] = p.name
        starts = ",".join(str(pl.start) for pl in p.placements)
        settings[f"gpu.{gpu}.placements.{p.index}"] = f"{p.placements[0].size}:{starts}"
    return settings
