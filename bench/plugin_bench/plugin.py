"""One plugin process: started with its command, waited for until it answers GetInfo and publishes its
first ResourceSlice, stopped with SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from vke_gpu_dra.kubelet._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from vke_gpu_dra.kubelet._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from vke_gpu_dra.kubelet.registration import registration_socket_name
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import plugin_args, wait_until

from .settings import WAIT_S
from .timed_fake import TimedFake
from .trees import PluginCommand


@dataclass
class PluginRun:
    command: PluginCommand
    proc: subprocess.Popen[bytes]
    started: float
    reg_socket: Path
    data_dir: Path
    log_path: Path
    kubelet: Kubelet | None = None

    def stop(self) -> int | None:
        if self.kubelet is not None:
            self.kubelet.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(WAIT_S)
        return self.proc.returncode


def launch_plugin(root: Path, gpus: int, command: PluginCommand) -> PluginRun:
    log_path = root / "plugin.log"
    argv = [*command.argv, *plugin_args(root, gpus=gpus)]
    with log_path.open("wb") as log:
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env=command.env)
    return PluginRun(
        command, proc, started, root / "registry" / registration_socket_name(facts.DRIVER_NAME),
        root / "plugins" / facts.DRIVER_NAME, log_path,
    )  # fmt: skip


def try_get_info(reg_socket: Path) -> bool:
    """One GetInfo on a fresh channel with its own subchannel (no shared reconnect back-off)."""
    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(f"unix:{reg_socket}", options=options) as ch:
        try:
            reg_grpc.RegistrationStub(ch).GetInfo(reg_pb2.InfoRequest(), timeout=0.5)
        except grpc.RpcError:
            return False
    return True


def wait_get_info(run: PluginRun) -> float:
    """Seconds from process start to the first answered GetInfo."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and run.proc.poll() is None:
        if run.reg_socket.exists() and try_get_info(run.reg_socket):
            return time.monotonic() - run.started
        time.sleep(0.002)
    raise RuntimeError(f"the plugin did not answer GetInfo; see {run.log_path}:\n{run.log_path.read_text()}")


def wait_first_slice(run: PluginRun, fake: TimedFake) -> float:
    if not wait_until(lambda: fake.first_added_after(run.started) is not None, WAIT_S, 0.001):
        raise RuntimeError("no ResourceSlice was created")
    added = fake.first_added_after(run.started)
    assert added is not None
    return added - run.started
