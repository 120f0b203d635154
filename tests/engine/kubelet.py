"""A node agent that plays kubelet's part for one Node of the test control plane, while the real Pulumi
CLI and Kubernetes provider deploy the stack and wait for it to become ready.

Every pass (a background thread, `interval` seconds apart) it lists the pods bound to its node and does
what kubelet does with them, through the same interfaces:

* the driver's DaemonSet pod (its container runs `dra-gpu-kubelet-plugin`): runs that command as the pod
  spec says, its environment resolved (values, `fieldRef`s), each path under one of the container's
  volume mounts moved into this node's folder, and a service-account token bound to the pod (the
  TokenRequest API, as kubelet's projected token is) in the kubeconfig it is given; the plugin is
  registered over its registration socket, and the pod reported Running and Ready;
* any other pod: once the scheduler allocated its claims, they are prepared through the plugin's DRA
  gRPC service (the pod waits, as kubelet's would, until the plugin registered); then Running and Ready;
* a pod being deleted: its claims unprepared (the plugin's process stopped and the node's ResourceSlices
  of the driver deleted, for the plugin's pod), its status terminal (Succeeded), then deleted at once
  (grace period 0), as kubelet confirms a deletion.

The plugin's two ports (health, metrics) are set to 0: every test node shares this machine's network.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.kubelet_client import Kubelet

from tests.integration.cluster import now
from tests.integration.controlplane import ApiError, Client, ControlPlane, stop_processes

PLUGIN_COMMAND = "dra-gpu-kubelet-plugin"
#: Where kubelet's plugin manager looks for registration sockets.
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
BIN = Path(sys.executable).parent
#: Environment variables of the plugin's container that name a port on the node.
PORT_VARIABLES = ("HEALTHCHECK_PORT", "METRICS_PORT")
JSON = dict[str, Any]


@dataclass
class _PluginProcess:
    process: subprocess.Popen[bytes]
    log: Path
    registry: Path
    kubelet: Kubelet | None = None


@dataclass
class NodeAgent:
    plane: ControlPlane
    node: str
    root: Path
    interval: float = 0.3
    errors: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    _plugin: _PluginProcess | None = None
    _running: dict[str, JSON] = field(default_factory=dict)
    _prepared: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    _host_dirs: dict[str, Path] = field(default_factory=dict)
    _terminated: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def api(self) -> Client:
        return self.plane.admin()

    def start(self) -> NodeAgent:
        self._thread = threading.Thread(target=self._loop, name=f"kubelet-{self.node}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._plugin is not None:
            self._stop_plugin()

    @property
    def plugin_log(self) -> str:
        if self._plugin is None or not self._plugin.log.exists():
            return "(no plugin started)"
        return self._plugin.log.read_text(errors="replace")

    def report(self) -> str:
        """What the agent did and what went wrong, for a failing test's message."""
        return "\n".join(["node agent events:", *self.events[-40:], "errors:", *self.errors[-10:],
                          "plugin log (last 40 lines):", *self.plugin_log.splitlines()[-40:]])  # fmt: skip

    # ------------------------------------------------------------------ the loop

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception:
                self.errors.append(traceback.format_exc())
            self._stop.wait(self.interval)

    def _sync(self) -> None:
        pods = self.api.items("/api/v1/pods", fieldSelector=f"spec.nodeName={self.node}")
        for pod in pods:
            uid = pod["metadata"]["uid"]
            if pod["metadata"].get("deletionTimestamp"):
                self._terminate(pod)
            elif uid not in self._running:
                self._run(pod)

    def _run(self, pod: JSON) -> None:
        container = pod["spec"]["containers"][0]
        if (container.get("command") or [""])[0] == PLUGIN_COMMAND:
            ready = self._run_plugin(pod, container)
        else:
            ready = self._prepare(pod)
        if ready:
            self._mark_running(pod)
            self._running[pod["metadata"]["uid"]] = pod
            self.events.append(f"{now()} running {_name(pod)}")

    def _terminate(self, pod: JSON) -> None:
        """A pod being deleted: its claims unprepared (the plugin stopped, for the plugin's own pod), the
        pod marked terminal, as kubelet marks a deleted pod, then deleted at once. The terminal phase is
        what lets the resource-claim controller release the pod's claims, which a foreground deletion of
        the pod waits for."""
        uid = pod["metadata"]["uid"]
        if uid in self._terminated:
            return
        if self._plugin is not None and self._plugin_pod_uid == uid:
            self._stop_plugin()
            self._delete_slices()
        claims = self._prepared.pop(uid, [])
        if claims and self._plugin is not None and self._plugin.kubelet is not None:
            errors = self._plugin.kubelet.unprepare(claims)
            if any(errors.values()):
                self.errors.append(f"unprepare of {_name(pod)}: {errors}")
        self._running.pop(uid, None)
        self._mark_terminated(pod)
        with contextlib.suppress(ApiError):
            self.api.request(
                "DELETE",
                f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods/{pod['metadata']['name']}",
                {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
            )
        self._terminated.add(uid)
        self.events.append(f"{now()} deleted {_name(pod)}")

    def _delete_slices(self) -> None:
        """The node's ResourceSlices of the driver, deleted as kubelet deletes them once the driver's plugin
        is gone from the node (after a grace period there, at once here)."""
        path = "/apis/resource.k8s.io/v1/resourceslices"
        for item in self.api.items(
            path, fieldSelector=f"spec.nodeName={self.node},spec.driver={facts.DRIVER_NAME}"
        ):
            with contextlib.suppress(ApiError):
                self.api.delete(f"{path}/{item['metadata']['name']}")
        self.events.append(f"{now()} deleted the node's ResourceSlices of {facts.DRIVER_NAME}")

    # ------------------------------------------------------------------ the plugin's pod

    _plugin_pod_uid: str = ""
    _crashed: bool = False

    def _run_plugin(self, pod: JSON, container: JSON) -> bool:
        if self._plugin is None:
            self._plugin = self._start_plugin(pod, container)
            self._plugin_pod_uid = pod["metadata"]["uid"]
        plugin = self._plugin
        if plugin.process.poll() is not None:
            if not self._crashed:
                self._crashed = True
                self.errors.append(
                    f"the plugin exited {plugin.process.returncode}:\n{self.plugin_log[-3000:]}"
                )
            return False
        sockets = list(plugin.registry.glob("*.sock")) if plugin.registry.exists() else []
        if not sockets:
            return False
        plugin.kubelet = Kubelet(sockets[0])
        plugin.kubelet.register()
        return True

    def _start_plugin(self, pod: JSON, container: JSON) -> _PluginProcess:
        mounts = self._mounts(pod, container)
        env = {k: _remap(v, mounts) for k, v in self._environment(pod, container).items()}
        env.update({name: "0" for name in PORT_VARIABLES if name in env})
        kubeconfig = self.root / "plugin.kubeconfig"
        self.plane.write_kubeconfig(kubeconfig, self._pod_token(pod))
        env["KUBECONFIG"] = str(kubeconfig)
        log = self.root / "plugin.log"
        command = [
            str(BIN / container["command"][0]),
            *container.get("command", [])[1:],
            *container.get("args", []),
        ]
        with log.open("wb") as out:
            process = subprocess.Popen(
                command,
                env={**{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}, **env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        registry = _remap(REGISTRY_DIR, mounts)
        self.events.append(f"{now()} started the plugin for {_name(pod)} (pid {process.pid})")
        return _PluginProcess(process, log, Path(registry))

    def _stop_plugin(self) -> None:
        assert self._plugin is not None
        if self._plugin.kubelet is not None:
            self._plugin.kubelet.close()
        stop_processes([self._plugin.process])
        self._plugin = None
        self._plugin_pod_uid = ""

    def _mounts(self, pod: JSON, container: JSON) -> list[tuple[str, Path]]:
        """(mount path, folder on this node) for each of the container's volume mounts, longest first."""
        volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        mounts = []
        for mount in container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if "hostPath" in volume:
                # One short folder per host path (the plugin's unix socket paths must stay under 108 bytes).
                path = volume["hostPath"]["path"]
                host = self._host_dirs.setdefault(path, self.root / f"h{len(self._host_dirs)}")
            else:
                host = self.root / "pods" / pod["metadata"]["uid"] / mount["name"]
            host.mkdir(parents=True, exist_ok=True)
            mounts.append((mount["mountPath"].rstrip("/"), host))
        return sorted(mounts, key=lambda m: -len(m[0]))

    def _environment(self, pod: JSON, container: JSON) -> dict[str, str]:
        env: dict[str, str] = {}
        for var in container.get("env", []):
            if "value" in var:
                env[var["name"]] = var["value"]
            elif "fieldRef" in (var.get("valueFrom") or {}):
                env[var["name"]] = _field(pod, var["valueFrom"]["fieldRef"]["fieldPath"])
            else:
                raise RuntimeError(
                    f"{_name(pod)}: env {var['name']} from {var.get('valueFrom')} is not played here"
                )
        return env

    def _pod_token(self, pod: JSON) -> str:
        meta, spec = pod["metadata"], pod["spec"]
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        account = spec.get("serviceAccountName", "default")
        path = f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token"
        return str(self.api.create(path, request)["status"]["token"])

    # ------------------------------------------------------------------ other pods

    def _prepare(self, pod: JSON) -> bool:
        """Prepare the pod's claims once allocated and the plugin registered; True when it may run."""
        wanted = pod["spec"].get("resourceClaims") or []
        if not wanted:
            return True
        status = pod.get("status", {})
        names = {s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
        if any(names.get(c["name"]) is None for c in wanted):
            return False
        if self._plugin is None or self._plugin.kubelet is None:
            return False
        namespace = pod["metadata"]["namespace"]
        claims = []
        for claim_name in names.values():
            claim = self.api.get(
                f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{claim_name}"
            )
            if not claim.get("status", {}).get("allocation"):
                return False
            claims.append((namespace, claim_name, claim["metadata"]["uid"]))
        answers = self._plugin.kubelet.prepare(claims)
        failed = {uid: a["error"] for uid, a in answers.items() if a["error"]}
        if failed:
            self.errors.append(f"prepare of {_name(pod)}: {failed}")
            return False
        self._prepared[pod["metadata"]["uid"]] = claims
        devices = [d["cdi_device_ids"] for a in answers.values() for d in a["devices"]]
        self.events.append(f"{now()} prepared {_name(pod)}: {devices}")
        return True

    def _mark_terminated(self, pod: JSON) -> None:
        """Every container terminated, the pod Succeeded: the status kubelet writes once it stopped them."""
        meta = pod["metadata"]
        finished = now()
        containers = [
            {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False, "started": False,
             "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": finished}}}
            for c in pod["spec"]["containers"]
        ]  # fmt: skip
        conditions = [
            {"type": t, "status": "False", "lastTransitionTime": finished}
            for t in ("ContainersReady", "Ready")
        ]
        status = {"phase": "Succeeded", "conditions": conditions, "containerStatuses": containers}
        with contextlib.suppress(ApiError):
            self.api.patch(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", {"status": status}
            )

    def _mark_running(self, pod: JSON) -> None:
        spec, meta = pod["spec"], pod["metadata"]
        started = now()
        containers = [
            {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True, "started": True,
             "restartCount": 0, "state": {"running": {"startedAt": started}}}
            for c in spec["containers"]
        ]  # fmt: skip
        conditions = [
            {"type": t, "status": "True", "lastTransitionTime": started}
            for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled")
        ]
        status = {"phase": "Running", "conditions": conditions, "containerStatuses": containers,
                  "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": started}  # fmt: skip
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        self.api.patch(path, {"status": status})


def _name(pod: JSON) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _field(pod: JSON, path: str) -> str:
    value: Any = pod
    for part in path.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return str(value)


def _remap(value: str, mounts: list[tuple[str, Path]]) -> str:
    """A container path under one of its mounts -> the same path in the node's folder."""
    for mount_path, host in mounts:
        if value == mount_path or value.startswith(mount_path + "/"):
            return str(host) + value[len(mount_path) :]
    return value


def wait_for(predicate: Any, timeout: float, interval: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
