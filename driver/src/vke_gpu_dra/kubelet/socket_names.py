"""Socket names of the plugin on the node: the DRA socket and the registration socket (pure, no gRPC).

With a rolling-update id (the pod UID of a seamless upgrade) both names carry it, so two plugin pods
run on one node; the registration socket takes the first of upstream's names (Kubernetes 1.37,
k8s.io/dynamic-resource-allocation `kubeletplugin`) whose path fits an AF_UNIX address.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

#: The DRA socket's name in the plugin data directory without a rolling-update id.
DRA_SOCKET_NAME: Final = "dra.sock"
#: kubelet's PodResources socket under its default root directory (/var/lib/kubelet).
POD_RESOURCES_SOCKET: Final = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
#: The longest socket path gRPC binds: sun_path is 108 bytes with the terminating NUL.
MAX_SOCKET_PATH_BYTES: Final = 107

#: SHA-256 bytes of the pod UID in the second rolling-update name.
_UID_HASH_BYTES = 8
#: SHA-256 bytes of the driver name, a NUL and the pod UID in the last rolling-update name.
_DRIVER_UID_HASH_BYTES = 16


def registration_socket_name(driver_name: str) -> str:
    """`<driver>-reg.sock`, the name without a rolling-update id."""
    return f"{driver_name}-reg.sock"


def _hash(text: str, size: int) -> str:
    """The first `size` bytes of SHA-256(text) in unpadded URL-safe base64."""
    import base64  # noqa: PLC0415  (only a path too long for the plain name needs it: not at start)
    import hashlib  # noqa: PLC0415

    digest = hashlib.sha256(text.encode()).digest()[:size]
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def rolling_update_registration_names(driver_name: str, rolling_update_id: str) -> tuple[str, str, str]:
    """The registration socket names for a rolling-update id, in order of preference:
    `<driver>-<id>-reg.sock`, `<driver>-<hash of id>-reg.sock`, `dra-<hash of driver and id>-reg.sock`."""
    driver_and_id = f"{driver_name}\x00{rolling_update_id}"
    return (
        f"{driver_name}-{rolling_update_id}-reg.sock",
        f"{driver_name}-{_hash(rolling_update_id, _UID_HASH_BYTES)}-reg.sock",
        f"dra-{_hash(driver_and_id, _DRIVER_UID_HASH_BYTES)}-reg.sock",
    )


def registration_socket(registrar_dir: Path, driver_name: str, rolling_update_id: str | None = None) -> Path:
    """Where the registration socket goes: the fixed name, or with a rolling-update id the first of
    its names whose path fits `MAX_SOCKET_PATH_BYTES` (else the last, the shortest)."""
    if rolling_update_id is None:
        return registrar_dir / registration_socket_name(driver_name)
    paths = [
        registrar_dir / name for name in rolling_update_registration_names(driver_name, rolling_update_id)
    ]
    return next((p for p in paths if len(os.fsencode(p)) <= MAX_SOCKET_PATH_BYTES), paths[-1])


def dra_socket_name(rolling_update_id: str | None = None) -> str:
    """`dra.sock`, or `dra-<id>.sock` with a rolling-update id (the registration's endpoint names it)."""
    if rolling_update_id is None:
        return DRA_SOCKET_NAME
    stem, dot, suffix = DRA_SOCKET_NAME.rpartition(".")
    return f"{stem}-{rolling_update_id}{dot}{suffix}"
