"""The API server's way to the kubelets: an HTTP CONNECT proxy on a unix socket (kube-apiserver's egress
selector for its `cluster` traffic), which carries each connection into the network namespace of the node
it names.

A kubelet's address exists only inside its node's network namespace, so the API server, on the test's
loopback, cannot dial it (without the selector it looks the node's name up in the machine's DNS). With the
selector it asks the proxy `CONNECT <node name>:<port>`; the proxy finds the node of that name whose kubelet
runs in this process (`node.KUBELET_NODES`) and connects to the node's address and that port from inside
the node's namespace. Anything else is answered 502. So logs, exec and port-forward through the API server
(kubectl, `vke-gpu-dra verify`) reach the node's kubelet, and nothing else is reachable.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path
from typing import Any

from .node import KUBELET_NODES, NodeError, _pump

#: The most a CONNECT request's head may hold.
HEAD_LIMIT = 16384


def selector_config(socket_path: Path) -> dict[str, Any]:
    """kube-apiserver's EgressSelectorConfiguration: `cluster` traffic (to kubelets) through the proxy."""
    connection = {"proxyProtocol": "HTTPConnect", "transport": {"uds": {"udsName": str(socket_path)}}}
    return {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [{"name": "cluster", "connection": connection}],
    }


class EgressProxy:
    """The proxy listening on `path` (a unix socket) until `close()`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.refused: list[str] = []
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(path))
        self.listener.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            self._sockets.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        head = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in head and len(head) < HEAD_LIMIT:
                data = conn.recv(4096)
                if not data:
                    break
                head += data
        request, _, rest = head.partition(b"\r\n\r\n")
        words = request.split(b"\r\n", 1)[0].decode(errors="replace").split()
        target = self._target(words)
        if target is None:
            self.refused.append(" ".join(words))
            with contextlib.suppress(OSError):
                conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            conn.close()
            return
        try:
            upstream = target[0].connect(target[1])
        except (NodeError, OSError) as exc:
            self.refused.append(f"{' '.join(words)}: {exc}")
            conn.close()
            return
        self._sockets.append(upstream)
        with contextlib.suppress(OSError):
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                upstream.sendall(rest)
        for source, sink in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _target(words: list[str]) -> tuple[Any, int] | None:
        """(the node, the port) a `CONNECT <node name>:<port> HTTP/1.1` line names, if that node runs."""
        if len(words) != 3 or words[0] != "CONNECT" or ":" not in words[1]:
            return None
        name, port = words[1].rsplit(":", 1)
        node = KUBELET_NODES.get(name)
        if node is None or not port.isdigit():
            return None
        return node, int(port)

    def close(self) -> None:
        self._closed.set()
        for sock in [self.listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self.path.unlink(missing_ok=True)
