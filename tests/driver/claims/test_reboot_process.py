"""A reboot at process level: the plugin is stopped, the node "reboots" (new boot id, CDI root and shm
mounts emptied, GPU settings reset), and the restarted plugin gives the prepared claims their
time-slice, compute mode, MPS daemon and CDI specs back before kubelet's first prepare goes through (kubelet
registers the plugin at once; the prepare waits at the start gate)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from vke_gpu_dra import cdi
from vke_gpu_dra.sharing.mps import daemon_id
from vke_gpu_dra_core import facts, profiles
from vke_gpu_dra_core.discovery.simulated import SimulatedSource
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, plugin_args, wait_until

from tests.driver.claim_objects import claim, gpu_config, opaque, result
from tests.driver.sharing_env import FakeDriverRoot

BOOT_1, BOOT_2 = "5a0c3e1f-aaaa-4b7d-8e2a-6f1d3c5b7a01", "5a0c3e1f-bbbb-4b7d-8e2a-6f1d3c5b7a02"
NAMESPACE = "gpu-dra"
LONG = gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
MPS = gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}})
REPO = Path(__file__).resolve().parents[3]


def gpu_uuid(index: int) -> str:
    """The UUID of simulated gpu-<index> of this node, as the plugin (two GPUs) discovers it."""
    return SimulatedSource(2, profiles.DEFAULT_PRODUCT, NODE).discover().devices[index].uuid


class Node:
    def __init__(self, root: Path, fake_api: FakeAPIServer) -> None:
        self.root = root
        self.api = fake_api
        self.driver_root = FakeDriverRoot(root / "driver-root")
        self.boot_id = root / "boot_id"
        self.mounts = root / "mounts"
        self.reg = root / "registry" / f"{facts.DRIVER_NAME}-reg.sock"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        args = [
            *plugin_args(self.root, gpus=2),
            "--nvidia-driver-root", str(self.driver_root.root),
            "--boot-id-path", str(self.boot_id),
            "--feature-gates", "TimeSlicingSettings=true,MPSSupport=true",
            "--image-name", "registry.example.com/plugin:1",
            "--namespace", NAMESPACE,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.driver.sharing_plugin", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            env={**os.environ, "FAKE_MOUNTS_FILE": str(self.mounts)},
        )  # fmt: skip

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> list[dict]:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        _, stderr = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, stderr
        return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()

    def reboot(self) -> None:
        """What a reboot takes: a new boot id, the CDI specs (tmpfs), the shm mounts; the GPUs'
        settings are reset, so the stub nvidia-smi's log starts anew."""
        self.boot_id.write_text(f"{BOOT_2}\n")
        for path in cdi.list_claim_specs(self.root / "cdi").values():
            path.unlink()
        self.mounts.unlink()
        self.driver_root.clear()


def prepare(kubelet: Kubelet, *names: str) -> dict[str, str]:
    answers = kubelet.prepare([("default", name, name) for name in names])
    return {uid: answer["error"] for uid, answer in answers.items()}


def test_after_a_reboot_settings_daemon_and_specs_are_back_before_a_prepare_goes_through(
    short_tmp: Path, fake_api: FakeAPIServer
) -> None:
    fake_api.add_node(NODE)
    fake_api.add_claim(claim("ts", result("gpu-0"), name="ts", config=[opaque(LONG)]))
    fake_api.add_claim(claim("mps", result("gpu-1"), name="mps", config=[opaque(MPS)]))
    node = Node(short_tmp, fake_api)
    node.boot_id.write_text(f"{BOOT_1}\n")
    try:
        # before the reboot: both claims prepared, the MPS daemon Ready at once
        fake_api.deployments_become_ready = True
        node.start()
        assert wait_until(lambda: node.reg.exists() or not node.running(), timeout=30), "no socket"
        kubelet = Kubelet(node.reg)
        kubelet.register()
        assert prepare(kubelet, "ts", "mps") == {"ts": "", "mps": ""}
        kubelet.close()
        node.stop()
        [(key, before)] = fake_api.deployments.items()
        assert key[1] == f"mps-control-daemon-{daemon_id('mps', [gpu_uuid(1)])}"

        node.reboot()
        answered = short_tmp / "first-prepare-answered"  # created when kubelet's first prepare answers
        node.driver_root.watch(answered)  # each nvidia-smi call records whether that answer came already
        fake_api.deployments_become_ready = False  # the restarted daemon's pod is Ready when the test says
        node.start()

        def daemon_started_again() -> bool:
            current = fake_api.deployments.get(key)
            return current is not None and current["metadata"]["uid"] != before["metadata"]["uid"]

        assert wait_until(lambda: daemon_started_again() or not node.running(), timeout=30)
        assert node.running()
        # kubelet registers the plugin at once; its prepare waits until the claims are restored
        assert wait_until(lambda: node.reg.exists() or not node.running(), timeout=30), "no socket"
        kubelet = Kubelet(node.reg)
        kubelet.register()
        with ThreadPoolExecutor(max_workers=1) as pool:
            waiting = pool.submit(prepare, kubelet, "ts", "mps")
            time.sleep(0.5)  # the plugin waits for the daemon: the prepare waits with it
            assert not waiting.done()
            fake_api.set_ready(*key)
            assert waiting.result(timeout=30) == {"ts": "", "mps": ""}
            answered.touch()
        kubelet.close()

        gpu0, gpu1 = gpu_uuid(0), gpu_uuid(1)
        seen = node.driver_root.seen()
        assert sorted(seen) == sorted(
            [
                (f"-i {gpu0} -c DEFAULT", "absent"),
                (f"compute-policy -i {gpu0} --set-timeslice 3", "absent"),
                (f"-i {gpu1} -c EXCLUSIVE_PROCESS", "absent"),
            ]
        )
        assert [args for args, _ in seen if gpu0 in args] == [
            f"-i {gpu0} -c DEFAULT",
            f"compute-policy -i {gpu0} --set-timeslice 3",
        ]
        specs = cdi.list_claim_specs(short_tmp / "cdi")
        assert sorted(specs) == [
            "mps"
        ]  # its daemon's pipe and shm; the time-sliced claim names the base spec
        written = [*specs.values(), cdi.base_spec_path(short_tmp / "cdi")]
        assert all(p.stat().st_mtime_ns <= answered.stat().st_mtime_ns for p in written)
        assert node.mounts.read_text().splitlines() == [
            str(
                short_tmp
                / "plugins"
                / facts.DRIVER_NAME
                / "mps"
                / key[1].removeprefix("mps-control-daemon-")
                / "shm"
            )
        ]

        # kubelet's calls after the reboot find everything in place: nothing more is set
        kubelet = Kubelet(node.reg)
        kubelet.register()
        assert prepare(kubelet, "ts", "mps") == {"ts": "", "mps": ""}
        kubelet.close()
        assert len(node.driver_root.seen()) == len(seen)
        logs = node.stop()
        [restored] = [e for e in logs if e["msg"].startswith("node rebooted")]
        assert (restored["previous_boot_id"], restored["boot_id"]) == (BOOT_1, BOOT_2)
        assert (restored["restored"], restored["failed"]) == (2, 0)

        # a plugin restart without a reboot sets nothing
        node.start()
        assert wait_until(lambda: node.reg.exists() or not node.running(), timeout=30), "no socket"
        assert len(node.driver_root.seen()) == len(seen)
        assert fake_api.deployments[key]["status"]["readyReplicas"] == 1
        node.stop()
    finally:
        node.kill()
