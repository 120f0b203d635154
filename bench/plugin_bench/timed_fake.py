"""The fake API server of the bench: it remembers when each watch event was emitted, and puts and drops
the claims the bench prepares."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.plugin_env import claim

from .settings import Ref


class TimedFake(FakeAPIServer):
    """The fake API server, remembering when (monotonic clock) each watch event was emitted."""

    def __init__(self) -> None:
        super().__init__()
        self.emitted: list[tuple[float, str, str]] = []  # (time, ADDED/MODIFIED/DELETED, name)

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        self.emitted.append((time.monotonic(), kind, obj["metadata"]["name"]))
        super()._emit(kind, obj)

    def first_added_after(self, since: float) -> float | None:
        with self.cond:
            return next((t for t, kind, _ in self.emitted if kind == "ADDED" and t >= since), None)

    def put_claims(self, refs: list[Ref], gpus: int, *, first: int = 0) -> None:
        """Allocated claims of one device each, `gpu-<first + i>` (modulo `gpus`): exclusive when they
        fit on distinct GPUs, else all with admin access (which lets claims share a device)."""
        shared = len(refs) > gpus
        for i, (_, name, uid) in enumerate(refs):
            self.add_claim(claim(name, uid, f"gpu-{(first + i) % gpus}", admin_access=shared))

    def claim_reads(self, name: str) -> list[str]:
        """The paths (with query) of the GETs of claim `name` since the last `drop_claims`."""
        with self.cond:
            paths = [p for m, p in self.requests if m == "GET"]
        return [p for p in paths if urlsplit(p).path.endswith(f"/resourceclaims/{name}")]

    def drop_claims(self, refs: list[Ref]) -> None:
        with self.cond:
            for namespace, name, _ in refs:
                self.claims.pop((namespace, name), None)
            self.requests.clear()
