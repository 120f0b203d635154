"""The wired plugin with a driver root: self-check, metrics, health, and claim specs with the user-space."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from vke_gpu_dra import cdi
from vke_gpu_dra.config import parse_config
from vke_gpu_dra.plugin import Plugin
from vke_gpu_dra_core.discovery.simulated import SIMULATED_DRIVER_VERSION
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, claim, free_port, plugin_args

from tests.driver import fake_driver


def test_simulated_plugin_with_a_fake_root_serves_and_reports_what_it_lacks(
    short_tmp: Path, fake_api: FakeAPIServer, tmp_path: Path
) -> None:
    fake_api.add_node(NODE)
    fake = fake_driver.build(tmp_path / "root", version=SIMULATED_DRIVER_VERSION)
    fake.local("/usr/bin/nvidia-smi").unlink()
    health_port, metrics_port = free_port(), free_port()
    args = [
        *plugin_args(short_tmp, gpus=2, health_port=health_port, metrics_port=metrics_port),
        "--nvidia-driver-root",
        str(fake.path),
    ]
    plugin = Plugin(parse_config(args, environ={}), stop_grace=5)
    plugin.start()
    kubelet = Kubelet(plugin.registration_socket)
    try:
        kubelet.register()
        with grpc.insecure_channel(f"127.0.0.1:{health_port}") as ch:
            status = (
                health_pb2_grpc.HealthStub(ch)
                .Check(health_pb2.HealthCheckRequest(service="liveness"), timeout=10)
                .status
            )
        assert status == health_pb2.HealthCheckResponse.SERVING
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        assert "vke_gpu_dra_driver_userspace_ready 0.0" in text
        assert 'vke_gpu_dra_driver_userspace_missing{item="nvidia-smi"} 1.0' in text
        assert "vke_gpu_dra_cdi_hooks_enabled 0.0" in text
        assert "vke_gpu_dra_driver_libraries 4.0" in text
        fake_api.add_claim(claim("c1", "uid-1", "gpu-0"))
        result = kubelet.prepare([("default", "c1", "uid-1")])
        assert result["uid-1"]["error"] == ""
        spec = cdi.load_spec(cdi.base_spec_path(short_tmp / "cdi"))  # a claim without edits of its own
        assert result["uid-1"]["devices"][0]["cdi_device_ids"] == [cdi.base_device_id("gpu-0")]
        edits = spec["containerEdits"]
        assert "NVIDIA_VISIBLE_DEVICES=void" in edits["env"]
        mounted = {m["containerPath"] for m in edits["mounts"]}
        assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" in mounted  # the SONAME fallback
        assert spec["devices"][0]["containerEdits"]["env"][0] == "GPU_DEVICE_0=gpu-0"
        assert spec["devices"][0]["containerEdits"]["env"][1].startswith("GPU_DEVICE_0_UUID=GPU-")
    finally:
        kubelet.close()
        plugin.stop()
