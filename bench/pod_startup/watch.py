"""The bench's clock: a watch on the namespace's pods, when each was bound, Running and gone."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Sequence

from tests.integration.cluster import Cluster

#: How long a pod may take to run or go before the bench stops with the reason.
POD_TIMEOUT = 120.0


class PodWatch:
    """A watch on one namespace's pods: when each was first seen bound to a node, Running, and deleted."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.changed = threading.Condition()
        self.error: BaseException | None = None
        url = urllib.parse.urlsplit(cluster.api.server)
        context = ssl.create_default_context(cafile=str(cluster.api.ca_file))
        self.connection = http.client.HTTPSConnection(url.hostname or "", url.port, context=context)
        self.connection.request(
            "GET", f"/api/v1/namespaces/{cluster.namespace}/pods?watch=1&timeoutSeconds=3600",
            headers={"Authorization": f"Bearer {cluster.api.token}", "Accept": "application/json"},
        )  # fmt: skip
        self.response = self.connection.getresponse()
        if self.response.status != 200:
            raise RuntimeError(f"pod watch: {self.response.status} {self.response.read()!r}")
        self.thread = threading.Thread(target=self._read, name="pod-watch", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for line in self.response:
                event = json.loads(line)
                now = time.monotonic()
                pod = event["object"]
                name = pod.get("metadata", {}).get("name", "")
                with self.changed:
                    if event["type"] == "DELETED":
                        self.gone.setdefault(name, now)
                    elif pod.get("spec", {}).get("nodeName"):
                        self.bound.setdefault(name, now)
                        if pod.get("status", {}).get("phase") == "Running":
                            self.running.setdefault(name, now)
                    self.changed.notify_all()
        except (OSError, ValueError, http.client.HTTPException) as exc:
            self.error = exc
        with self.changed:
            self.changed.notify_all()

    def wait(self, seen: dict[str, float], names: Sequence[str], what: str) -> None:
        deadline = time.monotonic() + POD_TIMEOUT
        with self.changed:
            while not all(n in seen for n in names):
                left = deadline - time.monotonic()
                if self.error is not None or not self.thread.is_alive() or left <= 0:
                    late = [n for n in names if n not in seen]
                    why = "; ".join(self._why(n) for n in late[:3])
                    raise RuntimeError(
                        f"pods {late} not {what} within {POD_TIMEOUT:.0f} s ({self.error}): {why}"
                    )
                self.changed.wait(min(left, 1.0))

    def _why(self, name: str) -> str:
        try:
            return f"{name}: {self.cluster.why_pending(self.cluster.namespace, name)}"
        except Exception as exc:  # only for the message
            return f"{name}: {exc}"

    def close(self) -> None:
        if self.connection.sock is not None:
            self.connection.sock.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=10)
        self.connection.close()
