"""Device objects for tests that need a full GPU or a MIG device without discovery."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device


def full_gpu(minor: int, uuid: str, attributes: Mapping[str, Any] | None = None) -> Device:
    """A full GPU `gpu-<minor>` on `/dev/nvidia<minor>`."""
    return Device(
        name=f"gpu-{minor}",
        device_type=facts.DEVICE_TYPE_GPU,
        uuid=uuid,
        attributes=dict(attributes or {}),
        capacity={},
        minor=minor,
        device_nodes=(f"/dev/nvidia{minor}",),
    )


def mig_device(
    parent_minor: int,
    uuid: str,
    attributes: Mapping[str, Any] | None = None,
    cap_nodes: Sequence[str] = (),
) -> Device:
    """MIG device `gpu-<parent>-mig-19-0-1` on its parent's node plus `cap_nodes`."""
    return Device(
        name=f"gpu-{parent_minor}-mig-19-0-1",
        device_type=facts.DEVICE_TYPE_MIG,
        uuid=uuid,
        attributes=dict(attributes or {}),
        capacity={},
        minor=parent_minor,
        device_nodes=(f"/dev/nvidia{parent_minor}", *cap_nodes),
    )
