"""What the node tier's tests ask of the control plane: the kubelet of a release, and small waits."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.controlplane import CONTROLLERS, ApiError, ControlPlane, wait_until
from tools import toolchain

from .egress import EgressProxy, selector_config
from .node import KUBELET_NODES, Node

#: The image the tier's pods run (busybox), imported into the node's CRI namespace.
BUSYBOX = "vke-gpu-dra.local/node/busybox:1"
#: The kubelet releases the tier runs, by minor.
RELEASES = {"1.34": "v1.34.4", "1.37": "v1.37.2"}
#: The control planes the tier runs, by minor, each with the minor of the kubelet its nodes run: their own,
#: but for 1.38, whose kubelet needs a module the Go module proxy does not serve (toolchain/unavailable.toml):
#: its nodes run kubelet 1.37, one minor older, as a cluster's do while its control plane is upgraded first
#: (a kubelet may be up to three minors older than its API server).
PLANES = {"1.34": "1.34", "1.37": "1.37", "1.38": "1.37"}


#: Node identities a NodePlane knows in advance: the first nodes of the process that started it.
NODE_IDENTITIES = 64
#: The `kubernetes` Service's ClusterIP (the first address of the API server's --service-cluster-ip-range,
#: 10.0.0.0/24): pods reach the API server there, on port 443, as in-cluster clients do.
SERVICE_ADDRESS = "10.0.0.1"
SERVICE_PORT = 443
#: A real node's control plane also runs the node lifecycle controller (it lifts the
#: node.kubernetes.io/not-ready:NoSchedule taint a kubelet registers its Node with once the Node is
#: Ready; a DaemonSet's pods and the sample do not tolerate it), the DaemonSet controller (the chart's
#: plugin pods), and publishes the API server's CA as ConfigMap kube-root-ca.crt in every namespace
#: (what a service-account token volume mounts as ca.crt).
NODE_CONTROLLERS = ",".join(
    [
        CONTROLLERS,
        "node-lifecycle-controller",
        "daemonset-controller",
        "root-ca-certificate-publisher-controller",
    ]
)


@dataclass
class NodePlane(ControlPlane):
    """The control-plane tier's control plane, whose token file also names the kubelets of this process's
    first nodes (`<name>-<pid>-<n>`, n up to NODE_IDENTITIES) as the Node authorizer knows a kubelet:
    user `system:node:<node name>` in group `system:nodes`. A kubelet with its node's token is held to
    what the Node authorizer and the NodeRestriction admission plugin allow it, as on a real cluster.

    Its kube-controller-manager runs the DaemonSet controller and the root CA publisher besides the
    control-plane tier's controllers, and its API server's certificate also names the `kubernetes`
    Service's address, so a pod's in-cluster client (its projected service-account token and CA)
    verifies it there.

    The API server reaches the kubelets (logs, exec) through its egress selector: an HTTP CONNECT proxy of
    this process (`egress.py`) carries each connection into the named node's network namespace, and the
    API server authenticates there with a client certificate whose CA a kubelet started with
    `client_ca=plane.kubelet_client_ca` trusts."""

    SERVING_NAMES = f"IP:127.0.0.1,IP:{SERVICE_ADDRESS},DNS:localhost,DNS:kubernetes.default.svc"

    controllers: str = NODE_CONTROLLERS
    node_prefix: str = "vke-node"
    egress: EgressProxy | None = field(default=None, repr=False)

    @property
    def kubelet(self) -> str:
        """The minor of the kubelet this control plane's nodes run (PLANES)."""
        return PLANES[self.version]

    @property
    def label(self) -> str:
        """The node's releases as the tier's figures name them: its kubelet, and the control plane where
        that is another release."""
        skew = f" on control plane {self.version}" if self.kubelet != self.version else ""
        return f"kubelet {RELEASES[self.kubelet]}{skew}"

    @property
    def kubelet_client_ca(self) -> Path:
        """The CA of the API server's client certificate for kubelets (a kubelet's x509 clientCAFile)."""
        return self.root / "pki" / "kubelet-client-ca.crt"

    def _manager_flags(self) -> list[str]:
        return [f"--root-ca-file={self.ca_file}"]

    def _apiserver_flags(self) -> list[str]:
        pki = self.root / "pki"
        return [
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--egress-selector-config-file={self.root / 'egress-selector.json'}",
        ]

    def _kubelet_client_pki(self) -> None:
        """A CA, and the API server's client certificate for kubelets signed by it."""
        pki = self.root / "pki"
        ca_key, key, request = (
            pki / "kubelet-client-ca.key",
            pki / "apiserver-kubelet-client.key",
            pki / "req.csr",
        )
        for argv in (
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", str(ca_key),
             "-out", str(self.kubelet_client_ca), "-subj", "/CN=kubelet-client-ca"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(request),
             "-subj", "/O=system:masters/CN=kube-apiserver-kubelet-client"],
            ["x509", "-req", "-in", str(request), "-CA", str(self.kubelet_client_ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-days", "2", "-out", str(pki / "apiserver-kubelet-client.crt")],
        ):  # fmt: skip
            subprocess.run(["openssl", *argv], check=True, capture_output=True, timeout=60)

    def _pki(self) -> None:
        super()._pki()
        self._kubelet_client_pki()
        socket_path = self.root / "egress.sock"
        (self.root / "egress-selector.json").write_text(json.dumps(selector_config(socket_path)))
        self.egress = EgressProxy(socket_path)
        with (self.root / "tokens.csv").open("a") as tokens:
            for n in range(1, NODE_IDENTITIES + 1):
                name = f"{self.node_prefix}-{os.getpid()}-{n}"
                tokens.write(f'{self._token(name)},system:node:{name},node-{n},"system:nodes"\n')

    def stop(self, keep: bool = False) -> None:
        super().stop(keep)
        if self.egress is not None:
            self.egress.close()
            self.egress = None

    @staticmethod
    def _token(name: str) -> str:
        return f"kubelet-token-{name}"

    def node_token(self, name: str) -> str:
        """The kubelet's token of node `name` (one of this process's first nodes)."""
        match = re.fullmatch(rf"{re.escape(self.node_prefix)}-{os.getpid()}-(\d+)", name)
        if not match or not 1 <= int(match.group(1)) <= NODE_IDENTITIES:
            raise ValueError(
                f"node {name!r}: not one of the {NODE_IDENTITIES} nodes this control plane knows"
            )
        return self._token(name)


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


def forget_stopped_nodes(plane: ControlPlane) -> list[str]:
    """Delete the Nodes of `plane` whose kubelet no longer runs in this process (earlier tests' nodes, which
    a session's control plane keeps), as an operator removes the Node of a machine that is gone: the
    DaemonSet controller then wants no pod there, verify checks no node that is gone, and the garbage
    collector deletes the ResourceSlices the Node owns. The names deleted."""
    api = plane.admin()
    gone = [n["metadata"]["name"] for n in api.items("/api/v1/nodes")]
    gone = [name for name in gone if name not in KUBELET_NODES]
    for name in gone:
        api.request("DELETE", f"/api/v1/nodes/{name}")
    return gone


def join(node: Node, plane: NodePlane) -> None:
    """The node's kubelet, of the release `plane.kubelet` names, joins it as the chart's pods need it: pods
    reach the API server at the `kubernetes` Service's address, and the API server reaches the kubelet
    (logs, exec) through its egress proxy. Once the Node is Ready, the Nodes of kubelets that stopped are
    forgotten."""
    node.start_kubelet(
        kubelet_of(plane.kubelet), plane.server, plane.ca_file, plane.node_token(node.name),
        service=(SERVICE_ADDRESS, SERVICE_PORT), client_ca=plane.kubelet_client_ca,
    )  # fmt: skip
    path = f"/api/v1/nodes/{node.name}"
    assert wait_until(lambda: (n := get_or_none(plane, path)) and ready(n), timeout=90), node.logs()
    forget_stopped_nodes(plane)
