"""The NVML health watcher against the fake libnvidia-ml (events injected by the test, a switch that
makes a GPU lost and back), through the real pynvml. Windows run on an injected clock."""

import ctypes
import json
import logging

import pynvml
from vke_gpu_dra.discovery.nvml import NvmlSource
from vke_gpu_dra.health.monitor import HealthMonitor
from vke_gpu_dra.health.nvml_watch import NvmlHealthWatcher
from vke_gpu_dra.health.policy import DEFAULT_IGNORED_XIDS, NO_TAINTS, TaintSupport
from vke_gpu_dra.kubelet.resource_health import DeviceHealthBoard
from vke_gpu_dra.metrics import Metrics
from vke_gpu_dra_testing.plugin_env import wait_until

from tests.driver.discovery.test_discovery_nvml import mig_settings
from tests.driver.fake_nvml import write_config

XID = pynvml.nvmlEventTypeXidCriticalError
DBE = pynvml.nvmlEventTypeDoubleBitEccError
WHOLE = 0xFFFFFFFF
WINDOW = 300.0
T0 = 1_800_000_000.0
TAINTS = TaintSupport(taints=True, none_effect=True, max_taints=16, max_devices_with_taints=64)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Env:
    """A configured fake, its devices (discovered through NVML), a monitor and a running watcher."""

    def __init__(
        self, fake_lib, lib, tmp_path, monkeypatch, settings, *, support=TAINTS, ignored=DEFAULT_IGNORED_XIDS
    ):
        monkeypatch.setenv("FAKE_NVML_CONFIG", str(write_config(tmp_path / "fake-nvml.conf", settings)))
        sysfs, proc = tmp_path / "sys", tmp_path / "proc"
        (sysfs / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
        (proc / "driver" / "nvidia-caps").mkdir(parents=True, exist_ok=True)
        self.lib = lib
        self.source = NvmlSource(library_path=fake_lib, sysfs_root=sysfs, proc_root=proc)
        self.devices = self.source.discover().devices
        self.board = DeviceHealthBoard("node-a", self.devices)
        self.metrics = Metrics()
        self.published: list[list[dict]] = []
        self.notes: list[dict[str, str]] = []
        self.monitor = HealthMonitor(
            driver="gpu.nvidia.com",
            entries=[d.slice_entry() for d in self.devices],
            board=self.board,
            metrics=self.metrics,
            support=support,
            publish=self.publish,
        )
        self.clock = Clock()
        self.watcher = NvmlHealthWatcher(
            self.source,
            self.devices,
            self.monitor,
            self.metrics,
            recovery_window=WINDOW,
            ignored_xids=ignored,
            wait_ms=20,
            probe_interval=0.0,
            clock=self.clock,
        )

    def publish(self, entries: list[dict], annotations: dict[str, str]) -> None:
        self.published.append(entries)
        self.notes.append(annotations)

    def __enter__(self):
        self.watcher.start()
        assert self.watcher.watching.wait(10)
        return self

    def __exit__(self, *exc):
        self.watcher.stop()

    def status(self, device: str) -> tuple[str, str]:
        entry = self.board.entry(device)
        assert entry is not None
        return entry.status, entry.reason

    def metric(self, name: str, **labels) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def inject(self, gpu: int, kind: int, data: int, gi: int = WHOLE, ci: int = WHOLE) -> None:
        assert (
            self.lib.fakeNvmlInjectEvent(gpu, ctypes.c_ulonglong(kind), ctypes.c_ulonglong(data), gi, ci) == 0
        )

    def drained(self) -> bool:
        """Every injected event is delivered and a whole round of the watcher (events, probe, recovery on
        the current clock) ran after this call."""
        start = self.watcher.rounds
        return wait_until(lambda: self.lib.fakeNvmlQueued() == 0 and self.watcher.rounds >= start + 2)


TWO_GPUS = {"device_count": 2}


def test_fatal_xid_makes_the_gpu_unhealthy_tainted_and_counted(fake_lib, lib, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="vke_gpu_dra.health")
    with Env(fake_lib, lib, tmp_path, monkeypatch, TWO_GPUS) as env:
        env.inject(1, XID, 79)
        assert wait_until(lambda: env.status("gpu-1") == ("unhealthy", "xid 79"))
        assert env.status("gpu-0") == ("healthy", "")
        [gpu0, gpu1] = env.published[-1]
        assert "taints" not in gpu0
        assert gpu1["taints"] == [
            {
                "key": "gpu.nvidia.com/xid",
                "value": "79",
                "effect": "NoSchedule",
                "timeAdded": "2027-01-15T08:00:00Z",
            }
        ]
        assert env.metric("vke_gpu_dra_device_health_problem", device="gpu-1", reason="xid") == 1
        assert env.metric("vke_gpu_dra_health_events_total", kind="xid", outcome="fatal") == 1
        assert env.metric("vke_gpu_dra_devices_unhealthy") == 1
        assert json.loads(env.notes[-1]["gpu.nvidia.com/device-health"]) == [
            {
                "device": "gpu-1",
                "health": "unhealthy",
                "problems": [{"reason": "xid", "since": "2027-01-15T08:00:00Z", "xid": 79}],
            }
        ]
    assert "device unhealthy: tainted" in caplog.text


def test_events_appended_to_the_event_file_reach_the_watcher(fake_lib, lib, tmp_path, monkeypatch):
    """Another process (a test beside the plugin's container) adds events by appending lines; lines there
    before NVML was initialised are not delivered again."""
    events = tmp_path / "events"
    events.write_text("0 8 79\n")  # before: already delivered
    with Env(fake_lib, lib, tmp_path, monkeypatch, {**TWO_GPUS, "event_file": events}) as env:
        assert env.drained()
        assert env.status("gpu-0") == ("healthy", "")
        with events.open("a") as out:
            out.write(f"1 {XID} 79\n1 {XID}")  # a line being written is read once complete
        assert wait_until(lambda: env.status("gpu-1") == ("unhealthy", "xid 79"))
        with events.open("a") as out:
            out.write(f" 48 {WHOLE} {WHOLE}\nnot an event\n")
        assert env.drained()
        assert env.status("gpu-0") == ("healthy", "")
        assert env.metric("vke_gpu_dra_health_events_total", kind="xid", outcome="fatal") == 2


def test_double_bit_ecc_counts_as_xid_48(fake_lib, lib, tmp_path, monkeypatch):
    with Env(fake_lib, lib, tmp_path, monkeypatch, TWO_GPUS) as env:
        env.inject(0, DBE, 0)
        assert wait_until(lambda: env.status("gpu-0") == ("unhealthy", "xid 48"))


def test_ignored_xid_changes_nothing(fake_lib, lib, tmp_path, monkeypatch):
    with Env(fake_lib, lib, tmp_path, monkeypatch, TWO_GPUS) as env:
        env.inject(1, XID, 31)
        assert env.drained()
        assert env.status("gpu-1") == ("healthy", "")
        assert env.published == []
        assert env.metric("vke_gpu_dra_health_events_total", kind="xid", outcome="ignored") == 1


def test_an_added_ignored_xid_changes_nothing(fake_lib, lib, tmp_path, monkeypatch):
    ignored = DEFAULT_IGNORED_XIDS | {74}
    with Env(fake_lib, lib, tmp_path, monkeypatch, TWO_GPUS, ignored=ignored) as env:
        env.inject(1, XID, 74)
        assert env.drained()
        assert env.status("gpu-1") == ("healthy", "")
        env.inject(1, XID, 79)  # not on the list
        assert wait_until(lambda: env.status("gpu-1")[0] == "unhealthy")


def test_a_lost_gpu_is_unhealthy_and_back_after_the_window(fake_lib, lib, tmp_path, monkeypatch):
    with Env(fake_lib, lib, tmp_path, monkeypatch, TWO_GPUS, support=NO_TAINTS) as env:
        lib.fakeNvmlSetLost(0, 1)
        assert wait_until(lambda: env.status("gpu-0") == ("unhealthy", "gpu-lost"))
        assert [e["name"] for e in env.published[-1]] == ["gpu-1"]  # left out: no taints here
        lib.fakeNvmlSetLost(0, 0)
        assert env.drained()
        assert env.status("gpu-0")[0] == "unhealthy"  # answering, but not for a whole window yet
        env.clock.now += WINDOW
        assert wait_until(lambda: env.status("gpu-0") == ("healthy", ""))
        assert [e["name"] for e in env.published[-1]] == ["gpu-0", "gpu-1"]
        assert env.notes[-1] == {}
        assert env.metric("vke_gpu_dra_device_health_transitions_total", device="gpu-0", to="healthy") == 1


def test_fatal_xid_recovers_after_the_window(fake_lib, lib, tmp_path, monkeypatch):
    with Env(fake_lib, lib, tmp_path, monkeypatch, TWO_GPUS) as env:
        env.inject(0, XID, 79)
        assert wait_until(lambda: env.status("gpu-0")[0] == "unhealthy")
        env.clock.now += WINDOW - 1
        assert env.drained()
        assert env.status("gpu-0")[0] == "unhealthy"
        env.clock.now += 1
        assert wait_until(lambda: env.status("gpu-0") == ("healthy", ""))
        assert "taints" not in env.published[-1][0]


def test_a_flapping_gpu_is_held_back(fake_lib, lib, tmp_path, monkeypatch):
    with Env(fake_lib, lib, tmp_path, monkeypatch, TWO_GPUS) as env:
        for _ in range(3):
            lib.fakeNvmlSetLost(1, 1)
            assert wait_until(lambda: env.status("gpu-1")[0] == "unhealthy")
            assert env.drained()
            lib.fakeNvmlSetLost(1, 0)
            env.clock.now += WINDOW / 2
            assert env.drained()
            assert env.status("gpu-1")[0] == "unhealthy"
        env.clock.now += WINDOW
        assert wait_until(lambda: env.status("gpu-1") == ("healthy", ""))
        assert env.metric("vke_gpu_dra_device_health_transitions_total", device="gpu-1", to="healthy") == 1
        assert env.metric("vke_gpu_dra_health_events_total", kind="gpu-lost", outcome="fatal") == 1


def test_a_gpu_whose_events_cannot_be_registered_is_unmonitored(fake_lib, lib, tmp_path, monkeypatch):
    settings = {**TWO_GPUS, "gpu.1.fail": "nvmlDeviceRegisterEvents:3"}
    with Env(fake_lib, lib, tmp_path, monkeypatch, settings) as env:
        assert env.status("gpu-1") == ("unknown", "unmonitored")
        assert env.board.entry("gpu-1").healthy  # still allocatable
        [_, gpu1] = env.published[-1]
        assert [(t["key"], t["effect"]) for t in gpu1["taints"]] == [("gpu.nvidia.com/unmonitored", "None")]
        assert env.status("gpu-0") == ("healthy", "")


def test_an_unmonitored_gpu_is_still_published_on_a_server_without_taints(
    fake_lib, lib, tmp_path, monkeypatch
):
    settings = {**TWO_GPUS, "gpu.0.events": "0"}  # supports no event type: registering fails
    with Env(fake_lib, lib, tmp_path, monkeypatch, settings, support=NO_TAINTS) as env:
        assert env.status("gpu-0") == ("unknown", "unmonitored")
        assert [e["name"] for e in env.published[-1]] == ["gpu-0", "gpu-1"]


def test_without_an_event_set_every_gpu_is_unmonitored_and_lost_gpus_are_still_found(
    fake_lib, lib, tmp_path, monkeypatch
):
    settings = {**TWO_GPUS, "event_set_error": 3}
    with Env(fake_lib, lib, tmp_path, monkeypatch, settings) as env:
        assert env.status("gpu-0") == env.status("gpu-1") == ("unknown", "unmonitored")
        lib.fakeNvmlSetLost(1, 1)
        assert wait_until(lambda: env.status("gpu-1") == ("unhealthy", "gpu-lost, unmonitored"))


def test_a_mig_device_event_lands_on_that_mig_device(fake_lib, lib, tmp_path, monkeypatch):
    with Env(fake_lib, lib, tmp_path, monkeypatch, mig_settings()) as env:
        by_uuid = {d.uuid: d.name for d in env.devices}
        mig_b = by_uuid["MIG-b"]  # GI 5, CI 0
        env.inject(0, XID, 94, gi=5, ci=0)
        assert wait_until(lambda: env.status(mig_b) == ("unhealthy", "xid 94"))
        others = [d.name for d in env.devices if d.name != mig_b]
        assert all(env.status(name) == ("healthy", "") for name in others)
        env.inject(0, XID, 95, gi=77, ci=0)  # an instance this plugin does not publish
        assert env.drained()
        assert env.metric("vke_gpu_dra_health_events_total", kind="xid", outcome="unmatched") == 1
        env.inject(0, XID, 79)  # the whole GPU: every MIG device on it
        assert wait_until(lambda: all(env.status(name)[0] == "unhealthy" for name in others))


def test_stop_while_waiting_for_events_ends_the_thread_and_frees_nvml(fake_lib, lib, tmp_path, monkeypatch):
    env = Env(fake_lib, lib, tmp_path, monkeypatch, TWO_GPUS)
    env.watcher._wait_ms = 1000  # the default: a stop is noticed within a second
    env.watcher._probe_interval = 3600.0
    inits, shutdowns = lib.fakeNvmlInitCount(), lib.fakeNvmlShutdownCount()
    env.watcher.start()
    assert wait_until(lambda: lib.fakeNvmlWaiting() == 1)
    assert lib.fakeNvmlEventSets() == 1
    env.watcher.stop(timeout=10)
    assert env.watcher._thread is not None and not env.watcher._thread.is_alive()
    assert lib.fakeNvmlWaiting() == 0
    assert lib.fakeNvmlEventSets() == 0
    assert (lib.fakeNvmlInitCount() - inits, lib.fakeNvmlShutdownCount() - shutdowns) == (1, 1)
