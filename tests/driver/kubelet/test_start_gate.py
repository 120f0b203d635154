"""The plugin registers before the slow parts of its start; kubelet's calls wait for the claims to load.

A real Plugin with the fake API server and kubelet's gRPC client: its claim loading is held on an event,
so the test sees the registration socket answer GetInfo and a prepare wait, then go through once the
claims are loaded; and a start that fails answers the waiting call with why.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from vke_gpu_dra.kubelet._proto.pluginregistration.v1 import api_pb2, api_pb2_grpc
from vke_gpu_dra.kubelet.endpoints import KubeletEndpoints
from vke_gpu_dra.kubelet.start_gate import StartGate
from vke_gpu_dra.plugin import Plugin, StartupError
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, claim, plugin_args, plugin_config, wait_until


def test_the_gate_answers_why_a_call_cannot_go_on() -> None:
    gate = StartGate()
    assert gate.wait(time.monotonic() + 0.01) == (
        "the plugin is still starting (restoring its prepared claims); kubelet retries"
    )
    gate.fail("device discovery failed: no GPU")
    assert gate.wait(time.monotonic() + 10) == "the plugin failed to start: device discovery failed: no GPU"
    assert not gate.is_open
    opened = StartGate()
    opened.open()
    assert opened.wait(time.monotonic()) is None and opened.is_open


class HeldStart:
    """A Plugin whose claim loading waits for `release` (what a slow restore after a reboot looks like)."""

    def __init__(self, short_tmp: Path, *, fail: bool = False) -> None:
        self.plugin = Plugin(plugin_config(short_tmp), stop_grace=2)
        self.release = threading.Event()
        self.loading = threading.Event()
        load = self.plugin._load_prepared_claims

        def held() -> None:
            self.loading.set()
            assert self.release.wait(30)
            if fail:
                raise StartupError("cannot read the prepared claims: test")
            load()

        self.plugin._load_prepared_claims = held  # type: ignore[method-assign]
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._start, daemon=True)

    def _start(self) -> None:
        try:
            self.plugin.start()
        except BaseException as err:  # the test reads it
            self.errors.append(err)


@pytest.fixture
def held(short_tmp: Path, fake_api: FakeAPIServer) -> Iterator[HeldStart]:
    fake_api.add_node(NODE)
    start = HeldStart(short_tmp)
    start.thread.start()
    yield start
    start.release.set()
    start.thread.join(30)
    start.plugin.stop()


def test_getinfo_answers_before_the_claims_are_loaded_and_a_prepare_waits_for_them(
    held: HeldStart, fake_api: FakeAPIServer
) -> None:
    assert held.loading.wait(30)
    kubelet = Kubelet(held.plugin.registration_socket)
    try:
        info = kubelet.register()  # the claims are not loaded yet
        assert info.name and info.endpoint == str(held.plugin.dra_socket)
        fake_api.add_claim(claim("c1", "uid-1", "gpu-0"))
        with ThreadPoolExecutor(max_workers=1) as pool:
            waiting = pool.submit(kubelet.prepare, [("default", "c1", "uid-1")])
            time.sleep(0.2)
            assert not waiting.done()  # held at the gate, within its deadline
            held.release.set()
            answer = waiting.result(timeout=30)["uid-1"]
        assert answer["error"] == "" and answer["devices"][0]["device_name"] == "gpu-0"
    finally:
        kubelet.close()
    assert wait_until(lambda: held.plugin.slices is not None, timeout=30)


def test_a_call_whose_deadline_comes_first_answers_that_the_plugin_is_starting(held: HeldStart) -> None:
    assert held.loading.wait(30)
    kubelet = Kubelet(held.plugin.registration_socket)
    try:
        kubelet.register()
        answer = kubelet.prepare([("default", "c1", "uid-1")], timeout=2.0)["uid-1"]
    finally:
        kubelet.close()
    assert "the plugin is still starting" in answer["error"] and answer["devices"] == []


def test_a_start_that_fails_answers_the_waiting_call_and_removes_the_sockets(
    short_tmp: Path, fake_api: FakeAPIServer
) -> None:
    fake_api.add_node(NODE)
    start = HeldStart(short_tmp, fail=True)
    start.thread.start()
    assert start.loading.wait(30)
    kubelet = Kubelet(start.plugin.registration_socket)
    try:
        kubelet.register()
        with ThreadPoolExecutor(max_workers=1) as pool:
            waiting = pool.submit(kubelet.prepare, [("default", "c1", "uid-1")])
            time.sleep(0.2)
            start.release.set()
            answer = waiting.result(timeout=30)["uid-1"]
    finally:
        kubelet.close()
    start.thread.join(30)
    assert answer["error"].endswith("the plugin failed to start: cannot read the prepared claims: test")
    assert [str(e) for e in start.errors] == ["cannot read the prepared claims: test"]
    assert not start.plugin.registration_socket.exists() and not start.plugin.dra_socket.exists()


#: What the entry point must not load before kubelet can register the plugin: the API client, the metrics
#: library, the YAML parser, NVML and discovery (they are slow to load), and what is needed only once a call
#: is answered or the plugin runs (the device model, the claim reads, the health policy; argparse, which
#: reads only `--help`, `--version` and a malformed command line, and what it loads).
NOT_LOADED_AT_REGISTRATION = (
    "yaml",
    "urllib3",
    "prometheus_client",
    "kubernetes",
    "pynvml",
    "vke_gpu_dra_kube.client",
    "vke_gpu_dra.kubeapi",
    "vke_gpu_dra.state",
    "vke_gpu_dra.plugin",
    "vke_gpu_dra.api_errors",
    "vke_gpu_dra.kubelet.claim_fetch",
    "vke_gpu_dra.health",
    "vke_gpu_dra_core.discovery",
    "vke_gpu_dra_core.device_model",
    "argparse",
    "gettext",
    "shutil",
)


def test_what_loads_before_kubelet_can_register_leaves_the_slow_parts_out(
    short_tmp: Path, fake_api: FakeAPIServer
) -> None:
    """The entry point up to serving kubelet's sockets (the command line, a JSON kubeconfig's check, the
    logs, the endpoints started) loads none of `NOT_LOADED_AT_REGISTRATION`: they load after registration."""
    fake_api.write_kubeconfig(short_tmp / "kubeconfig")
    script = f"""
import sys
import vke_gpu_dra.__main__ as entry

def served(config, endpoints, signals):  # where the entry point goes on once registration is served
    endpoints.stop(grace=0)
    names = {NOT_LOADED_AT_REGISTRATION!r}
    print(sorted(m for m in sys.modules if any(m == n or m.startswith(n + ".") for n in names)))
    return 0

entry._run = served
sys.exit(entry.main(sys.argv[1:]))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script, *plugin_args(short_tmp, gpus=8)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "registration served" in proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_started_plugin_with_claims_that_need_no_spec_loads_no_yaml_and_no_exact_quantities(
    short_tmp: Path, fake_api: FakeAPIServer
) -> None:
    """Simulated GPUs, a JSON kubeconfig, a claim answered from the base spec: the YAML library, exact
    quantities (decimal, fractions), the official client and NVML never load (they cost memory)."""
    fake_api.add_node(NODE)
    fake_api.write_kubeconfig(short_tmp / "kubeconfig")
    fake_api.add_claim(claim("c1", "uid-1", "gpu-0"))
    script = """
import sys
from vke_gpu_dra.config import parse_config
from vke_gpu_dra.plugin import Plugin
from vke_gpu_dra_core.device_model import ClaimRef
plugin = Plugin(parse_config(sys.argv[1:]), stop_grace=1)
plugin.start()
claim = plugin._api.get_resource_claim("default", "c1")
plugin.state.prepare(ClaimRef("default", "c1", "uid-1"), claim)
plugin.stop()
slow = ("yaml", "decimal", "fractions", "kubernetes", "pynvml")
print(sorted(m for m in sys.modules if m.split(".")[0] in slow))
"""
    args = plugin_args(short_tmp, gpus=2)
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_the_start_waits_briefly_for_kubelets_getinfo_before_loading_the_rest(short_tmp: Path) -> None:
    """`wait_for_info` ends as soon as GetInfo is asked (so it is answered while nothing else holds the
    interpreter), and after its timeout when nobody asks."""
    endpoints = KubeletEndpoints(
        driver_name="gpu.nvidia.com",
        node_name=NODE,
        dra_socket=short_tmp / "dra.sock",
        registration_socket=short_tmp / "reg.sock",
    )
    assert endpoints.wait_for_info(0.01) is False  # not started: nothing to wait for
    endpoints.start()
    try:
        started = time.monotonic()
        assert endpoints.wait_for_info(0.05) is False  # nobody asked: the timeout
        assert time.monotonic() - started >= 0.05
        with grpc.insecure_channel(f"unix:{short_tmp / 'reg.sock'}") as channel:
            info = api_pb2_grpc.RegistrationStub(channel).GetInfo(api_pb2.InfoRequest(), timeout=10)
        assert info.name == "gpu.nvidia.com"
        assert endpoints.wait_for_info(60) is True  # asked: at once
    finally:
        endpoints.stop(grace=0)
