"""Build the fake libnvidia-ml.so.1 (fake_nvml.c, which includes fake_nvml_mig.c) for tests, and write
its configuration files."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBRARY_NAME = "libnvidia-ml.so.1"
#: The configuration file the fake reads beside its own library file (when $FAKE_NVML_CONFIG is unset).
BESIDE_LIBRARY = "fake-nvml.conf"


def config_text(settings: Mapping[str, object]) -> str:
    """One `key=value` line per setting (see the comment at the top of fake_nvml.c)."""
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def build(out_dir: Path, builtin: Mapping[str, object] | None = None) -> Path:
    """Compile the fake into `out_dir/libnvidia-ml.so.1` (gcc; well under a second). `builtin`: settings
    compiled into the library, read when neither $FAKE_NVML_CONFIG nor a `fake-nvml.conf` beside the
    library file is there (a container given the library file alone by a CDI spec)."""
    defines = []
    if builtin is not None:
        text = config_text(builtin)
        if not all(c == "\n" or " " <= c <= "~" for c in text):
            raise ValueError(f"fake NVML builtin configuration: printable ASCII lines only, got {text!r}")
        defines.append(f"-DFAKE_NVML_BUILTIN_CONFIG={json.dumps(text)}")
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
            *defines,
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
    path.write_text(config_text(settings))
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
