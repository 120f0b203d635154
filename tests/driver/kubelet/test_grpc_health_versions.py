"""Device health reaches a 1.37 kubelet on dra-health v1 and a 1.34 kubelet on v1alpha1, at once.

GPU events come from the fake libnvidia-ml through the real NVML watcher and health monitor; the
two kubelet-like clients talk gRPC over the plugin's unix sockets, each as its release does: 1.37
reads GetInfo's supported_versions and opens the newest health service it knows that the plugin
lists (v1 over v1alpha1, none when none is listed); 1.34 opens v1alpha1 on the DRA socket without
looking.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pynvml
import pytest
from vke_gpu_dra.discovery.nvml import NvmlSource
from vke_gpu_dra.health.monitor import HealthMonitor
from vke_gpu_dra.health.nvml_watch import NvmlHealthWatcher
from vke_gpu_dra.health.policy import DEFAULT_IGNORED_XIDS, NO_TAINTS
from vke_gpu_dra.kubelet._proto.dra_health.v1 import api_pb2 as v1_pb2
from vke_gpu_dra.kubelet._proto.dra_health.v1 import api_pb2_grpc as v1_grpc
from vke_gpu_dra.kubelet._proto.dra_health.v1alpha1 import api_pb2 as v1alpha1_pb2
from vke_gpu_dra.kubelet._proto.dra_health.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from vke_gpu_dra.kubelet._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from vke_gpu_dra.kubelet._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from vke_gpu_dra.kubelet.registration import (
    RegistrationServicer,
    RegistrationStatus,
    add_registration_servicer,
    registration_socket_name,
)
from vke_gpu_dra.kubelet.resource_health import (
    MAX_MESSAGE_CHARS,
    DeviceHealthBoard,
    DeviceHealthEntry,
    ResourceHealthServicer,
    add_resource_health_servicer,
    health_message,
    health_response,
)
from vke_gpu_dra.kubelet.sockets import unix_server
from vke_gpu_dra.metrics import Metrics
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.kubelet_client import channel
from vke_gpu_dra_testing.plugin_env import wait_until

from tests.driver.fake_nvml import write_config

NODE = "node-a"
XID = pynvml.nvmlEventTypeXidCriticalError
WHOLE = 0xFFFFFFFF
WINDOW = 300.0
#: How long one client waits for the update it expects (the stream's deadline).
STREAM_TIMEOUT = 30.0
#: kubelet 1.37's health services, in its order of preference.
KUBELET_137_HEALTH = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
#: (device name, health, message) of each device in one update.
Update = list[tuple[str, int, str]]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def kubelet_137_health_stream(reg_socket: Path, opened: list[grpc.Channel]) -> Iterator[Any]:
    """Registration as kubelet 1.37 does it, then the health stream it chooses from the answer."""
    reg = channel(reg_socket)
    opened.append(reg)
    info = reg_grpc.RegistrationStub(reg).GetInfo(reg_pb2.InfoRequest(), timeout=STREAM_TIMEOUT)
    chosen = next((s for s in KUBELET_137_HEALTH if s in info.supported_versions), "")
    assert chosen == "v1.DRAResourceHealth", list(info.supported_versions)
    dra = channel(info.endpoint)
    opened.append(dra)
    stub = v1_grpc.DRAResourceHealthStub(dra)
    return stub.NodeWatchResources(v1_pb2.NodeWatchResourcesRequest(), timeout=STREAM_TIMEOUT)


def kubelet_134_health_stream(dra_socket: Path, opened: list[grpc.Channel]) -> Iterator[Any]:
    """kubelet 1.34: v1alpha1 on the DRA socket, whatever the registration listed."""
    dra = channel(dra_socket)
    opened.append(dra)
    stub = v1alpha1_grpc.DRAResourceHealthStub(dra)
    return stub.NodeWatchResources(v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=STREAM_TIMEOUT)


def devices(response: Any) -> Update:
    return [(d.device.device_name, d.health, d.message) for d in response.devices]


def next_update(stream: Iterator[Any], wanted: Callable[[Update], bool]) -> Update:
    """Read updates until one is `wanted` (changes in between are skipped); the stream's deadline ends it."""
    for response in stream:
        assert {d.device.pool_name for d in response.devices} == {NODE}
        update = devices(response)
        if wanted(update):
            return update
    raise AssertionError("the health stream ended before the update")


class Node:
    """Two fake GPUs watched through NVML, and the plugin's DRA and registration sockets serving them."""

    def __init__(self, root: Path, fake_lib: Path, lib: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv(
            "FAKE_NVML_CONFIG", str(write_config(root / "fake-nvml.conf", {"device_count": 2}))
        )
        sysfs, proc = root / "sys", root / "proc"
        (sysfs / "bus" / "pci" / "devices").mkdir(parents=True)
        (proc / "driver" / "nvidia-caps").mkdir(parents=True)
        self.lib = lib
        source = NvmlSource(library_path=fake_lib, sysfs_root=sysfs, proc_root=proc)
        found = source.discover().devices
        self.board = DeviceHealthBoard(NODE, found)
        metrics = Metrics()
        monitor = HealthMonitor(
            driver=facts.DRIVER_NAME,
            entries=[d.slice_entry() for d in found],
            board=self.board,
            metrics=metrics,
            support=NO_TAINTS,
            publish=lambda entries, annotations: None,
        )
        self.clock = Clock()
        self.watcher = NvmlHealthWatcher(
            source,
            found,
            monitor,
            metrics,
            recovery_window=WINDOW,
            ignored_xids=DEFAULT_IGNORED_XIDS,
            wait_ms=20,
            probe_interval=0.0,
            clock=self.clock,
        )
        self.dra_socket = root / "plugins" / facts.DRIVER_NAME / "dra.sock"
        self.reg_socket = root / "registry" / registration_socket_name(facts.DRIVER_NAME)
        self.dra = unix_server(self.dra_socket, max_workers=8, name="dra")
        add_resource_health_servicer(self.dra, ResourceHealthServicer(self.board))
        self.reg = unix_server(self.reg_socket, max_workers=2, name="reg")
        add_registration_servicer(
            self.reg,
            RegistrationServicer(
                driver_name=facts.DRIVER_NAME, dra_endpoint=self.dra_socket, status=RegistrationStatus()
            ),
        )

    def __enter__(self) -> Node:
        self.dra.start()
        self.reg.start()
        self.watcher.start()
        assert self.watcher.watching.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.watcher.stop()
        self.board.close()
        self.reg.stop(0).wait()
        self.dra.stop(0).wait()

    def await_two_rounds(self) -> None:
        start = self.watcher.rounds
        assert wait_until(lambda: self.watcher.rounds >= start + 2)

    def inject_xid(self, gpu: int, xid: int) -> None:
        zero = ctypes.c_ulonglong
        assert self.lib.fakeNvmlInjectEvent(gpu, zero(XID), zero(xid), WHOLE, WHOLE) == 0


def test_xid_lost_gpu_and_recovery_reach_a_137_kubelet_on_v1_and_a_134_kubelet_on_v1alpha1(
    short_tmp: Path, fake_lib: Path, lib: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[grpc.Channel] = []
    with Node(short_tmp, fake_lib, lib, monkeypatch) as node:
        streams = {
            "1.37 on v1": kubelet_137_health_stream(node.reg_socket, opened),
            "1.34 on v1alpha1": kubelet_134_health_stream(node.dra_socket, opened),
        }
        try:
            healthy = [("gpu-0", 1, ""), ("gpu-1", 1, "")]
            for stream in streams.values():  # the full list as soon as the stream opens
                assert next_update(stream, lambda u: True) == healthy

            node.inject_xid(1, 79)
            xid = [("gpu-0", 1, ""), ("gpu-1", 2, "xid 79")]
            for stream in streams.values():
                assert next_update(stream, lambda u: u[1][1] == 2) == xid

            node.lib.fakeNvmlSetLost(0, 1)
            lost = [("gpu-0", 2, "gpu-lost"), ("gpu-1", 2, "xid 79")]
            for stream in streams.values():
                assert next_update(stream, lambda u: u[0][1] == 2) == lost

            node.lib.fakeNvmlSetLost(0, 0)
            node.await_two_rounds()  # the watcher has seen gpu-0 answer again: its window starts now
            node.clock.now += WINDOW  # both GPUs answered NVML for a whole window without a fatal event
            for stream in streams.values():
                assert next_update(stream, lambda u: u == healthy) == healthy
        finally:
            for stream in streams.values():
                stream.cancel()  # type: ignore[attr-defined]
            for ch in opened:
                ch.close()


def test_the_reason_is_the_message_and_kubelets_limit_holds() -> None:
    assert health_message("") == ""
    assert health_message("xid 79") == "xid 79"
    exact = "x" * MAX_MESSAGE_CHARS
    assert health_message(exact) == exact
    cut = health_message("y" * (MAX_MESSAGE_CHARS + 1))
    assert len(cut) == MAX_MESSAGE_CHARS and cut == "y" * (MAX_MESSAGE_CHARS - 3) + "..."
    entries = [
        DeviceHealthEntry("gpu-0", True, 5, "unknown", "unmonitored"),
        DeviceHealthEntry("gpu-1", False, 7, "unhealthy", "z" * 2000),
    ]
    [unmonitored, long] = health_response(NODE, entries).devices
    assert (unmonitored.health, unmonitored.message, unmonitored.last_updated_time) == (0, "unmonitored", 5)
    assert (long.health, len(long.message), long.last_updated_time) == (2, MAX_MESSAGE_CHARS, 7)
