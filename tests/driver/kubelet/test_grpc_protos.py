"""The checked-in stubs match the .proto files, and the wire names are kubelet's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vke_gpu_dra.kubelet._proto.dra.v1 import api_pb2 as v1_pb2
from vke_gpu_dra.kubelet._proto.dra.v1beta1 import api_pb2 as v1beta1_pb2
from vke_gpu_dra.kubelet._proto.dra_health.v1 import api_pb2 as health_v1_pb2
from vke_gpu_dra.kubelet._proto.dra_health.v1alpha1 import api_pb2 as health_pb2
from vke_gpu_dra.kubelet._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from vke_gpu_dra.kubelet._proto.podresources.v1 import api_pb2 as pr_pb2
from vke_gpu_dra.kubelet.registration import SUPPORTED_VERSIONS

SCRIPT = Path(__file__).resolve().parents[3] / "driver" / "scripts" / "generate_protos.py"


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
    for pb, name in ((health_v1_pb2, "v1.DRAResourceHealth"), (health_pb2, "v1alpha1.DRAResourceHealth")):
        service = pb.DESCRIPTOR.services_by_name["DRAResourceHealth"]
        assert service.full_name == name
        health = service.methods_by_name["NodeWatchResources"]
        assert health.server_streaming and not health.client_streaming
    assert reg_pb2.DESCRIPTOR.services_by_name["Registration"].full_name == "pluginregistration.Registration"


def test_advertised_service_names_are_package_and_service() -> None:
    # kubelet's names in PluginInfo.supported_versions: the proto package's last part and the service
    def advertised(pb: object, service: str) -> str:
        package = pb.DESCRIPTOR.package  # type: ignore[attr-defined]
        return f"{package.rsplit('.', 1)[-1]}.{service}"

    assert (
        advertised(v1_pb2, "DRAPlugin"),
        advertised(v1beta1_pb2, "DRAPlugin"),
        advertised(health_v1_pb2, "DRAResourceHealth"),
        advertised(health_pb2, "DRAResourceHealth"),
    ) == SUPPORTED_VERSIONS


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
    for pb in (health_v1_pb2, health_pb2):  # v1alpha1 as of 1.36 (fields 4 and 5) is v1's schema
        assert _numbers(pb.DeviceHealth) == {
            "device": 1,
            "health": 2,
            "last_updated_time": 3,
            "health_check_timeout_seconds": 4,
            "message": 5,
        }
        assert _numbers(pb.DeviceIdentifier) == {"pool_name": 1, "device_name": 2}
        assert _numbers(pb.NodeWatchResourcesResponse) == {"devices": 1}
        assert _numbers(pb.NodeWatchResourcesRequest) == {}
        assert dict(pb.HealthStatus.items()) == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}
    timeout = health_v1_pb2.DeviceHealth.DESCRIPTOR.fields_by_name["health_check_timeout_seconds"]
    assert timeout.type == timeout.TYPE_INT64
    message = health_v1_pb2.DeviceHealth.DESCRIPTOR.fields_by_name["message"]
    assert message.type == message.TYPE_STRING


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


def test_v1_health_updates_read_as_v1alpha1_field_for_field() -> None:
    msg = health_v1_pb2.NodeWatchResourcesResponse()
    msg.devices.add(
        device=health_v1_pb2.DeviceIdentifier(pool_name="p", device_name="gpu-1"),
        health=health_v1_pb2.UNHEALTHY,
        last_updated_time=1_800_000_000,
        health_check_timeout_seconds=60,
        message="xid 79",
    )
    old = health_pb2.NodeWatchResourcesResponse.FromString(msg.SerializeToString())
    [device] = old.devices
    assert (device.device.pool_name, device.device.device_name) == ("p", "gpu-1")
    assert device.health == health_pb2.UNHEALTHY
    assert (device.last_updated_time, device.health_check_timeout_seconds) == (1_800_000_000, 60)
    assert device.message == "xid 79"
    assert old.SerializeToString() == msg.SerializeToString()


def test_pod_resources_matches_kubelets_api() -> None:
    """kubelet's pkg/apis/podresources/v1/api.proto (1.37): service, method and the DRA fields by number."""
    service = pr_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert set(service.methods_by_name) == {"List", "GetAllocatableResources", "Get"}
    assert _numbers(pr_pb2.ListPodResourcesResponse) == {"pod_resources": 1}
    assert _numbers(pr_pb2.PodResources) == {
        "name": 1,
        "namespace": 2,
        "containers": 3,
        "cpu_ids": 4,
        "memory": 5,
    }
    assert _numbers(pr_pb2.ContainerResources) == {
        "name": 1,
        "devices": 2,
        "cpu_ids": 3,
        "memory": 4,
        "dynamic_resources": 5,
    }
    # field 1 (class_name) was removed in 1.31
    assert _numbers(pr_pb2.DynamicResource) == {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4}
    assert _numbers(pr_pb2.ClaimResource) == {
        "cdi_devices": 1,
        "driver_name": 2,
        "pool_name": 3,
        "device_name": 4,
        "share_id": 5,
    }
    assert pr_pb2.ClaimResource.DESCRIPTOR.fields_by_name["share_id"].has_presence
    assert _numbers(pr_pb2.CDIDevice) == {"name": 1}
    assert _numbers(pr_pb2.GetPodResourcesRequest) == {"pod_name": 1, "pod_namespace": 2}
