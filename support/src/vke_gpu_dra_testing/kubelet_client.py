"""A kubelet-like gRPC client: registration handshake and DRA calls over unix sockets.

`container_cdi_device_ids` is what kubelet then hands the container runtime for one container.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
from vke_gpu_dra.kubelet._proto.dra.v1 import api_pb2 as v1_pb2
from vke_gpu_dra.kubelet._proto.dra.v1 import api_pb2_grpc as v1_grpc
from vke_gpu_dra.kubelet._proto.dra.v1beta1 import api_pb2 as v1beta1_pb2
from vke_gpu_dra.kubelet._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from vke_gpu_dra.kubelet._proto.dra_health.v1 import api_pb2 as health_v1_pb2
from vke_gpu_dra.kubelet._proto.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from vke_gpu_dra.kubelet._proto.dra_health.v1alpha1 import api_pb2 as health_pb2
from vke_gpu_dra.kubelet._proto.dra_health.v1alpha1 import api_pb2_grpc as health_grpc
from vke_gpu_dra.kubelet._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from vke_gpu_dra.kubelet._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc

KUBELET_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
VERSIONS: dict[str, tuple[ModuleType, type]] = {
    "v1": (v1_pb2, v1_grpc.DRAPluginStub),
    "v1beta1": (v1beta1_pb2, v1beta1_grpc.DRAPluginStub),
}
TIMEOUT = 10.0


def channel(path: Path | str) -> grpc.Channel:
    ch = grpc.insecure_channel(f"unix:{path}")
    grpc.channel_ready_future(ch).result(timeout=TIMEOUT)
    return ch


def container_cdi_device_ids(
    container: Mapping[str, Any], prepared: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[str]:
    """The CDI device IDs kubelet gives the runtime for one container of a pod, in kubelet's order.

    `container` is a pod spec's container; `prepared` maps each of the pod's `resourceClaims` names
    to the devices of that claim's NodePrepareResources answer (`Kubelet.prepare`'s `devices`).
    As kubelet's DRA manager: for each entry of the container's `resources.claims`, the IDs of
    every device of the claim when the entry names no request, else of the devices whose request
    names hold that request (a `request/subrequest` name counts for its request).
    """
    ids: list[str] = []
    for ref in (container.get("resources") or {}).get("claims") or []:
        request = ref.get("request") or ""
        for device in prepared[ref["name"]]:
            bases = {name.split("/", 1)[0] for name in device["request_names"]}
            if not request or request in bases:
                ids.extend(device["cdi_device_ids"])
    return ids


class Kubelet:
    """Registers a plugin like kubelet's plugin manager and then calls its DRA service."""

    def __init__(self, reg_socket: Path) -> None:
        self.reg_socket = reg_socket
        self.info: reg_pb2.PluginInfo | None = None
        self.version = ""
        self._channels: list[grpc.Channel] = []
        self._dra: grpc.Channel | None = None

    def register(self, *, accept: bool = True) -> reg_pb2.PluginInfo:
        ch = channel(self.reg_socket)
        self._channels.append(ch)
        stub = reg_grpc.RegistrationStub(ch)
        info = stub.GetInfo(reg_pb2.InfoRequest(), timeout=TIMEOUT)
        chosen = next((v for v in info.supported_versions if v in KUBELET_VERSIONS), "")
        if accept and chosen:
            stub.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True), timeout=TIMEOUT)
        self.info, self.version = info, chosen.split(".")[0]
        return info

    def notify(self, registered: bool, error: str = "") -> None:
        stub = reg_grpc.RegistrationStub(self._channels[0])
        stub.NotifyRegistrationStatus(
            reg_pb2.RegistrationStatus(plugin_registered=registered, error=error), timeout=TIMEOUT
        )

    def dra_channel(self) -> grpc.Channel:
        if self._dra is None:
            assert self.info is not None, "register first"
            self._dra = channel(self.info.endpoint)
            self._channels.append(self._dra)
        return self._dra

    def _stub(self, version: str | None) -> tuple[ModuleType, Any]:
        pb, stub_cls = VERSIONS[version or self.version]
        return pb, stub_cls(self.dra_channel())

    def prepare(
        self, claims: Iterable[tuple[str, str, str]], version: str | None = None, timeout: float = TIMEOUT
    ) -> dict:
        """claims: (namespace, name, uid); returns {uid: {"error": str, "devices": [...]}} (a device's
        `share_id` only when the plugin answered one).

        `timeout` is the call's deadline, as kubelet sets one (45 s) on every call."""
        pb, stub = self._stub(version)
        req = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims]
        )
        resp = stub.NodePrepareResources(req, timeout=timeout)
        return {
            uid: {
                "error": r.error,
                "devices": [
                    {
                        "request_names": list(d.request_names),
                        "pool_name": d.pool_name,
                        "device_name": d.device_name,
                        "cdi_device_ids": list(d.cdi_device_ids),
                        **_share(d),
                    }
                    for d in r.devices
                ],
            }
            for uid, r in resp.claims.items()
        }

    def unprepare(self, claims: Iterable[tuple[str, str, str]], version: str | None = None) -> dict[str, str]:
        pb, stub = self._stub(version)
        req = pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims]
        )
        resp = stub.NodeUnprepareResources(req, timeout=TIMEOUT)
        return {uid: r.error for uid, r in resp.claims.items()}

    def watch_health(self, version: str = "v1alpha1", timeout: float = TIMEOUT) -> Any:
        """The resource-health stream of `version`: "v1alpha1" (what kubelet 1.34 opens) or "v1" (1.37)."""
        pb, grpc_module = {"v1": (health_v1_pb2, health_v1_grpc), "v1alpha1": (health_pb2, health_grpc)}[
            version
        ]
        stub = grpc_module.DRAResourceHealthStub(self.dra_channel())
        return stub.NodeWatchResources(pb.NodeWatchResourcesRequest(), timeout=timeout)

    def close(self) -> None:
        for ch in self._channels:
            ch.close()
        self._channels.clear()
        self._dra = None


def _share(device: Any) -> dict[str, str]:
    """`{"share_id": ...}` for a device answered as a consumable share (v1 only), else nothing."""
    if "share_id" in device.DESCRIPTOR.fields_by_name and device.HasField("share_id"):
        return {"share_id": device.share_id}
    return {}
