"""Helpers to run the plugin against the fake API server: configs, free ports, claims, polling, and the ways a
checkpoint file is found damaged."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vke_gpu_dra.claims import checkpoint
from vke_gpu_dra.config import Config, parse_config
from vke_gpu_dra.state import checkpoint_store
from vke_gpu_dra_core import facts

NODE = "node-a"


#: A claim added to a checkpoint without signing it again (its checksum no longer matches).
STRAY_CLAIM = b'{"uid":"x","namespace":"","name":"","state":"PrepareStarted","devices":[]}'
#: The ways a checkpoint file is found damaged: cut short, overwritten, changed without its checksum, empty.
CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda data: data[: len(data) // 2],
    "garbage": lambda data: os.urandom(len(data)),
    "checksum-mismatch": lambda data: data.replace(b'"claims":[', b'"claims":[' + STRAY_CLAIM + b",", 1),
    "empty": lambda data: b"",
}


def checkpoint_document(data_dir: Path) -> dict[str, Any]:
    """The plugin's checkpoint in `data_dir` as any reader sees it (the file with its journal's records
    applied), in the file's JSON shape."""
    return dict(json.loads(checkpoint.encode(checkpoint_store(data_dir).load().entries)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plugin_args(root: Path, *, gpus: int = 8, health_port: int = 0, metrics_port: int = 0) -> list[str]:
    return [
        "--node-name", NODE,
        "--kubeconfig", str(root / "kubeconfig"),
        "--plugin-data-dir", str(root / "plugins" / facts.DRIVER_NAME),
        "--registrar-dir", str(root / "registry"),
        "--cdi-root", str(root / "cdi"),
        "--device-source", "simulated",
        "--simulated-gpus", str(gpus),
        "--healthcheck-port", str(health_port),
        "--metrics-port", str(metrics_port),
        "--log-format", "json",
    ]  # fmt: skip


def plugin_config(root: Path, **kwargs: Any) -> Config:
    return parse_config(plugin_args(root, **kwargs), environ={})


def claim(
    name: str,
    uid: str,
    *devices: str,
    request: str = "gpu",
    namespace: str = "default",
    admin_access: bool = False,
) -> dict:
    """An allocated claim of `devices` on NODE; `admin_access`: allocated with admin access (it may share
    its devices with other claims, which the plugin otherwise refuses)."""
    results: list[dict[str, Any]] = [
        {"request": request, "driver": facts.DRIVER_NAME, "pool": NODE, "device": d} for d in devices
    ]
    if admin_access:
        for r in results:
            r["adminAccess"] = True
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {
            "devices": {
                "requests": [{"name": request, "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name}}]
            }
        },
        "status": {"allocation": {"devices": {"results": results}}},
    }


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
