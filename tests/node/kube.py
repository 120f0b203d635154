"""What the node tier's tests ask of the control plane: the kubelet of a release, and small waits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.controlplane import ApiError, ControlPlane
from tools import toolchain

#: The image the tier's pods run (busybox), imported into the node's CRI namespace.
BUSYBOX = "vke-gpu-dra.local/node/busybox:1"
#: The kubelet releases the tier runs, by minor.
RELEASES = {"1.34": "v1.34.4", "1.37": "v1.37.2"}


def kubelet_of(minor: str) -> Path:
    """The toolchain's kubelet of `minor`; the test is skipped (one line) when it is not built."""
    name = toolchain.KUBERNETES[minor]
    folder = toolchain.locate(name)
    if folder is None or not (folder / "kubelet").exists():
        pytest.skip(f"the toolchain's kubelet {minor} is not built: scripts/toolchain --only etcd,{name}")
    return folder / "kubelet"


def ready(node_object: dict[str, Any]) -> bool:
    conditions = node_object.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def is_running(pod: dict[str, Any]) -> bool:
    return bool(pod["status"].get("phase") == "Running")


def when(predicate: Callable[[dict[str, Any]], bool], value: dict[str, Any]) -> dict[str, Any] | None:
    return value if predicate(value) else None


def get_or_none(plane: ControlPlane, path: str) -> Any:
    try:
        return plane.admin().get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
