"""The checked-in stubs match the .proto files, and the wire names are kubelet's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vke_gpu_dra.kubelet._proto.dra.v1 import api_pb2 as v1_pb2
from vke_gpu_dra.kubelet._proto.dra.v1beta1 import api_pb2 as v1beta1_pb2
from vke_gpu_dra.kubelet._proto.dra_health.v1alpha1 import api_pb2 as health_pb2
from vke_gpu_dra.kubelet._proto.pluginregistration.v1 import api_pb2 as reg_pb2

SCRIPT = Path(__file__).resolve().parents[2] / "driver" / "scripts" / "generate_protos.py"


def test_regenerating_the_stubs_changes_nothing() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_service_names_match_kubelet() -> None:
    v1_service = v1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert v1_service.full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert (
        v1beta1_pb2.DESCRIPTOR.services_by_name["DRAPlugin"].full_name
        == "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
    )
    health_service = health_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    assert health_service.full_name == "v1alpha1.DRAResourceHealth"
    assert reg_pb2.DESCRIPTOR.services_by_name["Registration"].full_name == "pluginregistration.Registration"
    health = health_pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"].methods_by_name["NodeWatchResources"]
    assert health.server_streaming and not health.client_streaming


def _numbers(message: object) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_field_numbers() -> None:
    fields = {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}
    # kubelet's v1 at 1.36 (k8s.io/kubelet v0.36): `optional string share_id = 5`; v1beta1 has no shares
    assert _numbers(v1_pb2.Device) == {**fields, "share_id": 5}
    assert _numbers(v1beta1_pb2.Device) == fields
    share = v1_pb2.Device.DESCRIPTOR.fields_by_name["share_id"]
    assert share.type == share.TYPE_STRING and share.has_presence
    for pb in (v1_pb2, v1beta1_pb2):
        assert _numbers(pb.Claim) == {"namespace": 1, "uid": 2, "name": 3}
        assert _numbers(pb.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
        assert _numbers(pb.NodeUnprepareResourceResponse) == {"error": 1}
        assert _numbers(pb.NodePrepareResourcesRequest) == {"claims": 1}
        assert _numbers(pb.NodePrepareResourcesResponse) == {"claims": 1}
    assert _numbers(reg_pb2.PluginInfo) == {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
    assert _numbers(reg_pb2.RegistrationStatus) == {"plugin_registered": 1, "error": 2}
    assert _numbers(health_pb2.DeviceHealth) == {"device": 1, "health": 2, "last_updated_time": 3}
    assert _numbers(health_pb2.DeviceIdentifier) == {"pool_name": 1, "device_name": 2}
    assert dict(health_pb2.HealthStatus.items()) == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}


def test_a_share_id_reaches_v1_and_is_an_unknown_field_to_v1beta1() -> None:
    msg = v1_pb2.Device(pool_name="p", device_name="d", share_id="7d1c")
    assert v1_pb2.Device.FromString(msg.SerializeToString()).share_id == "7d1c"
    assert not v1_pb2.Device(pool_name="p").HasField("share_id")
    assert v1beta1_pb2.Device.FromString(msg.SerializeToString()).device_name == "d"


def test_v1_and_v1beta1_messages_are_wire_identical() -> None:
    msg = v1_pb2.NodePrepareResourcesResponse()
    msg.claims["u"].devices.add(request_names=["r"], pool_name="p", device_name="d", cdi_device_ids=["x=y"])
    msg.claims["e"].error = "bad"
    other = v1beta1_pb2.NodePrepareResourcesResponse.FromString(msg.SerializeToString())
    assert other.claims["u"].devices[0].cdi_device_ids == ["x=y"]
    assert other.claims["e"].error == "bad"
