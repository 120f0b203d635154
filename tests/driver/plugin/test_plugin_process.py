"""The real entry points in a subprocess (simulated mode, fake API): serve, then SIGTERM."""

from __future__ import annotations

import ctypes.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from vke_gpu_dra.kubelet.registration import dra_socket_name, registration_socket_name
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, claim, free_port, plugin_args, wait_until

CONSOLE_SCRIPT = Path(sys.executable).with_name("dra-gpu-kubelet-plugin")
REG_SOCKET = registration_socket_name(facts.DRIVER_NAME)


def launch(args: list[str], *, module: bool, env: dict[str, str] | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "vke_gpu_dra"] if module else [str(CONSOLE_SCRIPT)]
    return subprocess.Popen(
        [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.mark.parametrize("module", [False, True], ids=["console-script", "python-m"])
def test_serves_and_stops_cleanly_on_sigterm(short_tmp: Path, fake_api: FakeAPIServer, module: bool) -> None:
    if not module and not CONSOLE_SCRIPT.exists():
        pytest.skip("console script not installed in this environment")
    fake_api.add_node(NODE)
    fake_api.add_claim(claim("c1", "uid-1", "gpu-1"))
    args = plugin_args(short_tmp, gpus=4, health_port=free_port(), metrics_port=free_port())
    reg = short_tmp / "registry" / REG_SOCKET
    dra = short_tmp / "plugins" / facts.DRIVER_NAME / dra_socket_name()
    proc = launch(args, module=module)
    try:
        assert wait_until(lambda: reg.exists() or proc.poll() is not None, timeout=30), (
            "no registration socket"
        )
        assert proc.poll() is None, proc.communicate()
        kubelet = Kubelet(reg)
        kubelet.register()
        result = kubelet.prepare([("default", "c1", "uid-1")])
        assert result["uid-1"]["error"] == "" and result["uid-1"]["devices"][0]["device_name"] == "gpu-1"
        kubelet.close()
        assert fake_api.wait_for(lambda: len(fake_api.slices_of(NODE)) == 1, timeout=10)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert not reg.exists() and not dra.exists()
    assert len(fake_api.slices_of(NODE)) == 1  # slices stay
    logs = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert {"starting", "serving", "prepared claim", "stopped"} <= {entry["msg"] for entry in logs}
    assert "fake-apiserver-token" not in stderr


def test_environment_configures_the_plugin(short_tmp: Path, fake_api: FakeAPIServer) -> None:
    fake_api.add_node(NODE)
    env = {
        "NODE_NAME": NODE,
        "KUBECONFIG": str(short_tmp / "kubeconfig"),
        "PLUGIN_DATA_DIR": str(short_tmp / "p"),
        "REGISTRAR_DIR": str(short_tmp / "r"),
        "CDI_ROOT": str(short_tmp / "cdi"),
        "DEVICE_SOURCE": "simulated",
        "SIMULATED_GPUS": "2",
        "SIMULATED_PRODUCT": "NVIDIA H200",
        "HEALTHCHECK_PORT": "0",
        "METRICS_PORT": "0",
        "LOG_FORMAT": "text",
    }
    proc = launch([], module=True, env=env)
    try:
        assert fake_api.wait_for(lambda: len(fake_api.slices_of(NODE)) == 1 or proc.poll() is not None, 30)
        [published] = fake_api.slices_of(NODE)
        assert len(published["spec"]["devices"]) == 2
        assert published["spec"]["devices"][0]["attributes"][facts.ATTR_PRODUCT_NAME] == {
            "string": "NVIDIA H200"
        }
        assert wait_until((short_tmp / "r" / REG_SOCKET).exists, timeout=10)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert " INFO    vke_gpu_dra.plugin: serving " in stderr  # text format


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ["--healthcheck-port", "http"],
            {},
            "invalid value 'http' for --healthcheck-port [env HEALTHCHECK_PORT]",
        ),
        (
            [],
            {"NODE_NAME": "n", "DEVICE_SOURCE": "gpu"},
            "from env DEVICE_SOURCE: must be one of: nvml, simulated",
        ),
        ([], {}, "--node-name (env NODE_NAME) is required"),
        (["--nope"], {}, "unrecognized arguments: --nope"),
    ],
)
def test_bad_configuration_exits_with_one_clear_line(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "KUBECONFIG")}
    proc = subprocess.run(
        [sys.executable, "-m", "vke_gpu_dra", *(["--node-name", "n"] if args and args[0] != "--nope" else []),
         *args],
        capture_output=True, text=True, timeout=30, check=False, env={**clean, **env},
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dra-gpu-kubelet-plugin: error: ") and expected in lines[0]


def test_missing_kubeconfig_is_a_config_error(short_tmp: Path) -> None:
    args = plugin_args(short_tmp, gpus=1)
    proc = subprocess.run(
        [sys.executable, "-m", "vke_gpu_dra", *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    kubeconfig = short_tmp / "kubeconfig"
    prefix = "dra-gpu-kubelet-plugin: error: --kubeconfig [env KUBECONFIG]"
    assert line == f"{prefix}: kubeconfig {kubeconfig} does not exist"
    assert not (short_tmp / "registry" / REG_SOCKET).exists()


@pytest.mark.skipif(bool(ctypes.util.find_library("nvidia-ml")), reason="a real NVML library is installed")
def test_nvml_mode_without_the_library_fails_with_a_clear_message(
    short_tmp: Path, fake_api: FakeAPIServer
) -> None:
    args = [a if a != "simulated" else "nvml" for a in plugin_args(short_tmp)]
    args += ["--nvidia-driver-root", str(short_tmp / "no-driver")]
    proc = subprocess.run(
        [sys.executable, "-m", "vke_gpu_dra", *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 1
    [error] = [json.loads(line) for line in proc.stderr.splitlines() if '"cannot start"' in line]
    assert "device discovery failed" in error["error"] and "NVML" in error["error"]
    assert not (short_tmp / "registry" / REG_SOCKET).exists()


def test_client_library_errors_are_log_entries_not_raw_lines(
    short_tmp: Path, fake_api: FakeAPIServer
) -> None:
    # A kubeconfig whose credential plugin fails: each failed request is a log entry naming the plugin.
    fake_api.add_node(NODE)
    kubeconfig = json.loads((short_tmp / "kubeconfig").read_text())
    kubeconfig["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "false",
            "interactiveMode": "Never",
        }
    }
    (short_tmp / "kubeconfig").write_text(json.dumps(kubeconfig))
    reg = short_tmp / "registry" / REG_SOCKET
    proc = launch(plugin_args(short_tmp, gpus=1), module=True)
    try:
        assert wait_until(lambda: reg.exists() or proc.poll() is not None, timeout=30)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = stderr.strip().splitlines()
    assert lines and all(line.startswith("{") for line in lines), stderr
    entries = [json.loads(line) for line in lines]
    failed = [e for e in entries if "exec plugin false failed with exit code 1" in e.get("error", "")]
    assert failed and all(e["level"] == "warning" for e in failed), entries
