"""A real Kubernetes control plane for tests, the envtest way: etcd, kube-apiserver, kube-scheduler and
kube-controller-manager from one folder of binaries (envtest's `$KUBEBUILDER_ASSETS`: here the
toolchain's, `tools.toolchain.kube_assets`), on free ports of 127.0.0.1, in one temporary folder.

No kubelet runs: tests create Nodes themselves and play kubelet's part (pod status, the plugin's sockets).
Everything started here is stopped by PID, and the folder (certificates, tokens, etcd's data, the logs) is
removed; the logs are printed when the control plane does not come up or a test asks for them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from vke_gpu_dra_core import dra_gates

#: The binaries a control plane needs in its folder.
BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
#: The releases the tiers run: the newest, VKE's and the next.
NEWEST, VKE, NEXT = "1.37", "1.34", "1.38"
#: What to do when they are missing (one line: the tier's skip reason).
HOW_TO_GET = (
    "build them with scripts/toolchain (Go 1.26, and Go 1.27.3 for 1.38, from the Go module proxy; "
    "docs/testing.md)"
)
#: Start-up to /readyz ok takes 3-8 s on a 2-core machine; a loaded one gets this long.
READY_TIMEOUT = 90.0
ADMIN_TOKEN = "envtest-admin-token"  # the test cluster's own credential (--token-auth-file)
#: Controllers a cluster without kubelets can run: no node lifecycle controller (it would taint the
#: test's Nodes unreachable), no daemonset controller (tests create the plugin pods themselves). The
#: device-taint-eviction controller (NoExecute device taints, DeviceTaintRules' status) runs where
#: DRADeviceTaints is on (1.37); 1.34 skips it.
CONTROLLERS = ",".join(
    f"{name}-controller"
    for name in (
        "serviceaccount",
        "resourceclaim",
        "deployment",
        "replicaset",
        "namespace",
        "garbage-collector",
        "validatingadmissionpolicy-status",
        "device-taint-eviction",
    )
)


def missing_assets(minor: str, folder: Path | None) -> str | None:
    """Why a Kubernetes `minor` control plane cannot run here (one line), or None when `folder` holds
    every binary."""
    if folder is None:
        return f"the toolchain's Kubernetes {minor} and etcd 3.6 are not built: {HOW_TO_GET}"
    missing = [b for b in BINARIES if not os.access(folder / b, os.X_OK)]
    if missing:
        return f"{folder} lacks {', '.join(missing)}: {HOW_TO_GET}"
    if not shutil.which("openssl"):
        return "openssl is not on PATH (it makes the test cluster's certificates): apt-get install openssl"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ApiError(Exception):
    """An HTTP error from the API server: its status and the Status object's message."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body
        self.message = str(body.get("message", body))
        super().__init__(f"{status}: {self.message}")


@dataclass
class Client:
    """A minimal JSON client of one API server with one bearer token (no client library in between)."""

    server: str
    token: str
    ca_file: Path

    def __post_init__(self) -> None:
        self._ssl = ssl.create_default_context(cafile=str(self.ca_file))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        compact: bool = False,
    ) -> Any:
        """`compact`: the body without whitespace, as kubectl and Go clients send it (the API server keeps
        the bytes of an opaque field, such as a claim's device config parameters, as they came)."""
        separators = (",", ":") if compact else None
        data = None if body is None else json.dumps(body, separators=separators).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = {"message": raw.decode(errors="replace")}
            raise ApiError(exc.code, parsed) from None
        return json.loads(raw) if raw else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def text(self, path: str) -> str:
        """GET `path` as text (the API server's /metrics)."""
        req = urllib.request.Request(self.server + path, method="GET")
        req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, context=self._ssl, timeout=30) as resp:
            return str(resp.read().decode())

    def create(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def replace(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def items(self, path: str, **query: str) -> list[dict[str, Any]]:
        suffix = "?" + urllib.parse.urlencode(query) if query else ""
        return list(self.get(path + suffix).get("items") or [])

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True


def path_of(obj: dict[str, Any], *, name: bool = True) -> str:
    """The REST path of a manifest (collection path with name=False), for the kinds the tests create."""
    group_version = obj["apiVersion"]
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    plural = PLURALS[obj["kind"]]
    namespace = obj.get("metadata", {}).get("namespace")
    prefix = f"{base}/namespaces/{namespace}" if namespace and plural not in CLUSTER_SCOPED else base
    return f"{prefix}/{plural}" + (f"/{obj['metadata']['name']}" if name else "")


PLURALS = {
    "Namespace": "namespaces",
    "Node": "nodes",
    "Pod": "pods",
    "Service": "services",
    "ServiceAccount": "serviceaccounts",
    "DaemonSet": "daemonsets",
    "Deployment": "deployments",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "DeviceClass": "deviceclasses",
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "ResourceSlice": "resourceslices",
    "DeviceTaintRule": "devicetaintrules",
}
CLUSTER_SCOPED = frozenset(
    {
        "namespaces",
        "nodes",
        "clusterroles",
        "clusterrolebindings",
        "validatingadmissionpolicies",
        "validatingadmissionpolicybindings",
        "deviceclasses",
        "resourceslices",
        "devicetaintrules",
    }
)


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2) -> Any:
    """The first truthy value of `predicate` within `timeout` seconds, else its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


@dataclass
class ControlPlane:
    """etcd, kube-apiserver, kube-scheduler and kube-controller-manager; `start()`, then `stop()`.

    `version` is the Kubernetes minor the binaries are ("1.34", "1.37", "1.38"); `controllers` the
    kube-controller-manager's (CONTROLLERS by default). Every component gets `--feature-gates` as core
    renders it for the release (`dra_gates.feature_gates_flag`): `feature_gates`, by default every DRA gate
    the release has and does not lock, at its default (`dra_gates.settable_defaults`), so the release's own
    defaults hold and a gate the release refuses stops the component.
    """

    #: The API server certificate's subjectAltName (a subclass adds the names its clients dial).
    SERVING_NAMES: ClassVar[str] = "IP:127.0.0.1,DNS:localhost"

    assets: Path
    version: str
    controllers: str = ""
    feature_gates: dict[str, bool] | None = None
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="envtest-")))
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    server: str = ""
    started_in: float = 0.0

    # ------------------------------------------------------------------ files

    @property
    def ca_file(self) -> Path:
        return self.root / "pki" / "serving.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    def admin(self) -> Client:
        return Client(self.server, ADMIN_TOKEN, self.ca_file)

    def client(self, token: str) -> Client:
        return Client(self.server, token, self.ca_file)

    def write_kubeconfig(self, path: Path, token: str, user: str = "envtest") -> Path:
        """A kubeconfig (JSON, which is YAML) for `token` against this API server."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": user}}],
            "current-context": "envtest",
        }
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        return path

    def _pki(self) -> None:
        pki = self.root / "pki"
        pki.mkdir()
        openssl = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
        subprocess.run(
            [*openssl, "-keyout", str(pki / "serving.key"), "-out", str(self.ca_file),
             "-subj", "/CN=127.0.0.1", "-addext", f"subjectAltName={self.SERVING_NAMES}"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        subprocess.run(
            ["openssl", "genrsa", "-out", str(pki / "sa.key"), "2048"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        (self.root / "tokens.csv").write_text(f'{ADMIN_TOKEN},envtest-admin,envtest-admin,"system:masters"\n')

    # ------------------------------------------------------------------ processes

    @property
    def release(self) -> tuple[int, int]:
        """`version` as (major, minor)."""
        major, minor = self.version.split(".")
        return int(major), int(minor)

    def gates_flag(self) -> list[str]:
        """The `--feature-gates` argument every component gets (none when core renders nothing)."""
        gates = (
            dra_gates.settable_defaults(self.release) if self.feature_gates is None else self.feature_gates
        )
        flag = dra_gates.feature_gates_flag(self.release, gates)
        return [f"--feature-gates={flag}"] if flag else []

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.root / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.close()

    def start(self) -> ControlPlane:
        begin = time.monotonic()
        gates = self.gates_flag()
        try:
            self._pki()
            etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
            self._spawn(
                "etcd",
                [str(self.assets / "etcd"), "--name", "envtest", "--data-dir", str(self.root / "etcd"),
                 "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                 "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                 "--initial-cluster", f"envtest=http://127.0.0.1:{peer_port}",
                 "--log-level", "warn"],
            )  # fmt: skip
            pki = self.root / "pki"
            self._spawn(
                "kube-apiserver",
                [str(self.assets / "kube-apiserver"),
                 f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                 "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
                 f"--tls-cert-file={self.ca_file}", f"--tls-private-key-file={pki / 'serving.key'}",
                 f"--token-auth-file={self.root / 'tokens.csv'}",
                 "--authorization-mode=Node,RBAC",
                 "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                 f"--service-account-key-file={pki / 'sa.key'}",
                 f"--service-account-signing-key-file={pki / 'sa.key'}",
                 "--service-cluster-ip-range=10.0.0.0/24",
                 "--allow-privileged=true", *gates, *self._apiserver_flags(),
                 # No kubernetes Endpoints for 127.0.0.1 (a loopback address there is refused).
                 "--endpoint-reconciler-type=none"],
            )  # fmt: skip
            self.server = f"https://127.0.0.1:{api_port}"
            self._wait_ready()
            self.write_kubeconfig(self.kubeconfig, ADMIN_TOKEN, "envtest-admin")
            common = [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false", *gates]
            self._spawn(
                "kube-scheduler",
                [str(self.assets / "kube-scheduler"), *common, f"--secure-port={free_port()}",
                 "--bind-address=127.0.0.1"],
            )  # fmt: skip
            self._spawn(
                "kube-controller-manager",
                [str(self.assets / "kube-controller-manager"), *common, f"--secure-port={free_port()}",
                 "--bind-address=127.0.0.1", f"--controllers={self.controllers or CONTROLLERS}",
                 "--use-service-account-credentials=false", "--concurrent-gc-syncs=1",
                 *self._manager_flags()],
            )  # fmt: skip
            self._check_alive()
        except BaseException:
            print(self.logs())
            self.stop()
            raise
        self.started_in = time.monotonic() - begin
        return self

    def _manager_flags(self) -> list[str]:
        """Further kube-controller-manager flags (a subclass's)."""
        return []

    def _apiserver_flags(self) -> list[str]:
        """Further kube-apiserver flags (a subclass's)."""
        return []

    def _check_alive(self) -> None:
        dead = {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}
        if dead:
            raise RuntimeError(f"control-plane process(es) exited: {dead}")

    def _wait_ready(self) -> None:
        """Poll /readyz until it answers ok, a process exits, or READY_TIMEOUT passes."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        deadline = time.monotonic() + READY_TIMEOUT
        last = "no answer"
        while time.monotonic() < deadline:
            self._check_alive()
            req = urllib.request.Request(self.server + "/readyz")
            req.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
            try:
                with urllib.request.urlopen(req, context=context, timeout=5) as resp:
                    if resp.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                last = f"{exc.code}: {exc.read()[-300:]!r}"
            except OSError as exc:
                last = str(exc)
            time.sleep(0.25)
        raise TimeoutError(f"kube-apiserver not ready after {READY_TIMEOUT:.0f}s: {last}")

    def logs(self, tail: int = 40) -> str:
        """The last `tail` lines of each component's log."""
        parts = []
        for name in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"):
            path = self.root / f"{name}.log"
            if path.exists():
                lines = path.read_text(errors="replace").splitlines()[-tail:]
                parts.append(f"----- {name} ({path}) -----\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self, keep: bool = False) -> None:
        """Stop every process by PID and remove the folder (etcd's data, the logs) unless `keep`."""
        stop_processes(self.processes.values())
        self.processes.clear()
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)


def stop_processes(processes: Iterable[subprocess.Popen[Any]], grace: float = 15.0) -> None:
    """Stop each running process, last started first (the API server before etcd, so it shuts down
    cleanly): SIGTERM to it (its own session: the whole group), SIGKILL after `grace` seconds."""
    for proc in reversed(list(processes)):
        if proc.poll() is not None:
            continue
        _signal(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            proc.wait(timeout=10)


def _signal(proc: subprocess.Popen[Any], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
