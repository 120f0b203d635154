"""The driver image built here from driver/Dockerfile's recipe (`tools.driver_image`: Debian's packages and
PyPI's wheels, no daemon), imported into the node's containerd and run by runc as the image says.

The build needs root and the machine's Debian mirror and PyPI the first time; it is cached by its inputs.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools import driver_image
from tools.oci_image import Image, ImageError

from .node import CRI_NAMESPACE, Node

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    try:
        yield driver_image.build()
    except ImageError as exc:  # no mirror, no PyPI: the one line says which
        pytest.fail(f"the driver image could not be built: {exc}")


def _layers(image: Image) -> list[set[str]]:
    with tarfile.open(image.archive) as archive:

        def blob(digest: str) -> bytes:
            member = archive.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
            assert member is not None
            return member.read()

        manifest = json.loads(blob(image.digest))
        names = []
        for layer in manifest["layers"]:
            member = archive.extractfile(f"blobs/sha256/{layer['digest'].removeprefix('sha256:')}")
            assert member is not None
            with tarfile.open(fileobj=member, mode="r|") as tar:
                names.append({info.name for info in tar})
        return names


def test_the_image_follows_the_dockerfile(image: Image) -> None:
    recipe = driver_image.read_recipe()
    config = image.config["config"]
    assert config["Entrypoint"] == ["dra-gpu-kubelet-plugin"] == list(recipe.entrypoint)
    assert config["User"] == "65532:65532" == recipe.user
    assert "Cmd" not in config  # an ENTRYPOINT of the Dockerfile resets the base image's CMD
    assert set(config["Labels"]) == set(recipe.labels)
    assert config["Labels"]["org.opencontainers.image.version"] == recipe.args["VERSION"]
    assert config["Labels"]["org.opencontainers.image.title"] == "dra-gpu-kubelet-plugin"
    assert {"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "LANG=C.UTF-8"} <= set(config["Env"])
    base, install = _layers(image)
    # the base: Debian's Python of the Dockerfile's line, merged /usr, the package list scanners read
    assert f"usr/bin/python{recipe.python}" in base and "var/lib/dpkg/status" in base
    assert {"usr/bin/mount", "usr/bin/sh", "usr/sbin/chroot", "usr/bin/cat"} <= base  # the MPS daemon, probes
    assert not any(name.startswith(("usr/share/man/", "usr/share/locale/")) for name in base)
    # the install layer: what pip wrote under /usr/local, pip itself not among it
    assert "usr/local/bin/dra-gpu-kubelet-plugin" in install
    assert all(name in ("usr", "usr/local") or name.startswith("usr/local/") for name in install)
    assert not any("/pip/" in name or name.endswith("/pip") for name in install)


def test_the_same_inputs_give_the_same_digest(image: Image, tmp_path: Path) -> None:
    """A second build in an empty cache (its own apt state, downloads and virtualenv) gives the same bytes."""
    again = driver_image.build(cache=tmp_path / "cache")
    assert again.digest == image.digest
    assert again.archive.read_bytes() == image.archive.read_bytes()


def test_containerd_runs_it_as_the_image_says(image: Image, node: Node) -> None:
    node.import_image(image)
    listed = node.ctr("-n", CRI_NAMESPACE, "images", "ls", "-q").stdout.split()
    assert image.name in listed
    assert image.digest in node.ctr("-n", CRI_NAMESPACE, "images", "ls").stdout
    runs = ["-n", CRI_NAMESPACE, "run", "--rm", "--cgroup", node.cgroup("plugin-help"), image.name]
    helped = node.ctr(*runs, "plugin-help", "dra-gpu-kubelet-plugin", "--help", timeout=120)
    assert helped.stdout.startswith("usage: dra-gpu-kubelet-plugin")
    who = node.ctr(*runs, "plugin-id", "python3.11", "-c", "import os; print(os.getuid(), os.getgid())")
    assert who.stdout.split() == ["65532", "65532"]
    imports = "import grpc, pynvml, vke_gpu_dra.__main__; print(grpc.__version__)"
    loaded = node.ctr(*runs, "plugin-imports", "python3.11", "-c", imports, timeout=120)
    assert loaded.stdout.strip()
