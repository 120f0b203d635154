"""How a client reaches the fake: the bearer token it accepts, and a kubeconfig that names it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TOKEN = "fake-apiserver-token"


def write_kubeconfig(path: Path, server: str, *, insecure: bool = False) -> Path:
    """A kubeconfig at `path` for `server` with the fake's token (context, cluster and user `fake`)."""
    cluster: dict[str, Any] = {"server": server}
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": cluster}],
                "users": [{"name": "fake", "user": {"token": TOKEN}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            }
        )
    )
    return path
