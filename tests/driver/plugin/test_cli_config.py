"""Configuration parsing: defaults, environment, precedence and one-line errors."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest
from vke_gpu_dra.config import OPTIONS, PluginConfigError, _plain_flags, build_parser, parse_config
from vke_gpu_dra.logs import setup_logging
from vke_gpu_dra_core import facts


def test_defaults_match_the_chart_contract() -> None:
    config = parse_config(["--node-name", "10.0.0.7"], environ={})
    assert config.node_name == "10.0.0.7"
    assert config.driver_name == facts.DRIVER_NAME
    assert config.kubeconfig is None
    assert config.plugin_data_dir == Path(f"/var/lib/kubelet/plugins/{facts.DRIVER_NAME}")
    assert config.registrar_dir == Path("/var/lib/kubelet/plugins_registry")
    assert config.dra_socket == Path(f"/var/lib/kubelet/plugins/{facts.DRIVER_NAME}/dra.sock")
    assert config.registration_socket == Path(
        f"/var/lib/kubelet/plugins_registry/{facts.DRIVER_NAME}-reg.sock"
    )
    assert config.cdi_root == Path("/var/run/cdi")
    assert config.device_source == "nvml"
    assert (config.simulated_gpus, config.simulated_product) == (8, "NVIDIA A30")
    assert config.nvidia_driver_root == Path("/")
    assert config.driver_root_path == Path("/")  # read where the host has it unless told otherwise
    assert config.nvidia_cdi_hook_path is None
    assert (config.healthcheck_port, config.metrics_port) == (51516, 8080)
    assert config.log_format == "json"
    assert config.log_level == "info"
    assert config.rolling_update_id is None  # fixed socket names
    assert config.claim_reconcile_interval == 600  # the chart's claimReconcileIntervalSeconds
    assert config.additional_xids_to_ignore == frozenset()
    assert config.health_recovery_window == 300  # 5 minutes


def test_health_flags_and_env() -> None:
    config = parse_config(
        ["--node-name", "n", "--health-recovery-window", "60"],
        environ={"ADDITIONAL_XIDS_TO_IGNORE": "74, 79"},
    )
    assert config.additional_xids_to_ignore == {74, 79}
    assert config.health_recovery_window == 60
    for no_xid in ("", " ", ",", " , ,"):
        config = parse_config(["--node-name", "n", f"--additional-xids-to-ignore={no_xid}"], environ={})
        assert config.additional_xids_to_ignore == frozenset(), no_xid


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--node-name", "n"],
        ["--node-name=n", "--kubeconfig", "/k", "--metrics-port=9100"],
        ["--node-name", "a", "--node-name", "b"],  # the last one wins
        ["--node-name", "", "--image-name=", "--namespace==x"],
        ["--simulated-gpus=-1", "--log-level", "a=b"],
        ["--feature-gates", "MPSSupport=true,TimeSlicingSettings=false"],
    ],
)
def test_a_plain_command_line_is_read_as_argparse_reads_it(argv: list[str]) -> None:
    assert _plain_flags(argv) == vars(build_parser().parse_args(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["-h"],
        ["--node-name"],
        ["--node-name", "--kubeconfig", "/k"],
        ["--simulated-gpus", "-1"],
        ["--node", "n"],
        ["--bogus", "x"],
        ["n"],
        ["--", "--node-name", "n"],
    ],
)
def test_any_other_command_line_is_left_to_argparse(argv: list[str]) -> None:
    assert _plain_flags(argv) is None


def test_argparse_answers_what_the_plain_reading_leaves_to_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(PluginConfigError, match="unrecognized arguments: --bogus x"):
        parse_config(["--node-name", "n", "--bogus", "x"], environ={})
    with pytest.raises(PluginConfigError, match="argument --node-name: expected one argument"):
        parse_config(["--node-name"], environ={})
    with pytest.raises(SystemExit) as done:
        parse_config(["--version"], environ={})
    assert done.value.code == 0 and capsys.readouterr().out.startswith("dra-gpu-kubelet-plugin ")


def test_rolling_update_id_names_both_sockets() -> None:
    uid = "0b5f7d2e-9c1a-4e8b-a3f6-1d2c3b4a5e6f"  # a pod UID, as the chart passes it
    config = parse_config(["--node-name", "n"], environ={"ROLLING_UPDATE_ID": uid})
    assert config.rolling_update_id == uid
    assert config.registration_socket == Path(
        f"/var/lib/kubelet/plugins_registry/{facts.DRIVER_NAME}-{uid}-reg.sock"
    )
    assert config.dra_socket == Path(f"/var/lib/kubelet/plugins/{facts.DRIVER_NAME}/dra-{uid}.sock")
    assert (
        parse_config(["--node-name", "n", "--rolling-update-id", "b"], environ={}).dra_socket.name
        == "dra-b.sock"
    )


def test_every_flag_has_its_environment_variable() -> None:
    assert {o.flag: o.env for o in OPTIONS} == {
        "--node-name": "NODE_NAME",
        "--driver-name": "DRIVER_NAME",
        "--kubeconfig": "KUBECONFIG",
        "--plugin-data-dir": "PLUGIN_DATA_DIR",
        "--registrar-dir": "REGISTRAR_DIR",
        "--cdi-root": "CDI_ROOT",
        "--device-source": "DEVICE_SOURCE",
        "--simulated-gpus": "SIMULATED_GPUS",
        "--simulated-product": "SIMULATED_PRODUCT",
        "--simulated-numa-nodes": "SIMULATED_NUMA_NODES",
        "--nvidia-driver-root": "NVIDIA_DRIVER_ROOT",
        "--container-driver-root": "DRIVER_ROOT_CTR_PATH",
        "--nvidia-cdi-hook-path": "NVIDIA_CDI_HOOK_PATH",
        "--healthcheck-port": "HEALTHCHECK_PORT",
        "--feature-gates": "FEATURE_GATES",
        "--namespace": "NAMESPACE",
        "--image-name": "IMAGE_NAME",
        "--nvidia-namespace": "NVIDIA_NAMESPACE",
        "--pod-resources-socket": "POD_RESOURCES_SOCKET",
        "--metrics-port": "METRICS_PORT",
        "--log-format": "LOG_FORMAT",
        "--log-level": "LOG_LEVEL",
        "--rolling-update-id": "ROLLING_UPDATE_ID",
        "--claim-reconcile-interval": "CLAIM_RECONCILE_INTERVAL",
        "--boot-id-path": "BOOT_ID_PATH",
        "--additional-xids-to-ignore": "ADDITIONAL_XIDS_TO_IGNORE",  # NVIDIA's name
        "--health-recovery-window": "HEALTH_RECOVERY_WINDOW",
    }


def test_boot_id_path_defaults_to_the_kernels_and_must_be_absolute() -> None:
    assert parse_config(["--node-name", "n"], environ={}).boot_id_path == Path(
        "/proc/sys/kernel/random/boot_id"
    )
    config = parse_config(["--node-name", "n"], environ={"BOOT_ID_PATH": "/tmp/boot_id"})
    assert config.boot_id_path == Path("/tmp/boot_id")
    with pytest.raises(
        PluginConfigError, match=r"invalid value 'boot_id' for --boot-id-path \[env BOOT_ID_PATH\]"
    ):
        parse_config(["--node-name", "n", "--boot-id-path", "boot_id"], environ={})


def test_driver_root_as_the_chart_sets_it() -> None:
    env = {
        "NODE_NAME": "n",
        "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",
        "DRIVER_ROOT_CTR_PATH": "/driver-root",
        "NVIDIA_CDI_HOOK_PATH": "/usr/bin/nvidia-cdi-hook",
    }
    config = parse_config([], environ=env)
    assert config.nvidia_driver_root == Path("/run/nvidia/driver")
    assert config.driver_root_path == Path("/driver-root")
    assert config.nvidia_cdi_hook_path == Path("/usr/bin/nvidia-cdi-hook")
    with pytest.raises(
        PluginConfigError,
        match="invalid value 'bin/hook' for --nvidia-cdi-hook-path from env "
        "NVIDIA_CDI_HOOK_PATH: must be an absolute path",
    ):
        parse_config([], environ={"NODE_NAME": "n", "NVIDIA_CDI_HOOK_PATH": "bin/hook"})


def test_environment_and_flag_precedence() -> None:
    env = {"NODE_NAME": "from-env", "METRICS_PORT": "0", "DRIVER_NAME": "gpu.example.com", "KUBECONFIG": "/k"}
    config = parse_config(["--metrics-port", "9100"], environ=env)
    assert config.node_name == "from-env"
    assert config.metrics_port == 9100  # the flag wins
    assert config.driver_name == "gpu.example.com"
    assert config.plugin_data_dir == Path("/var/lib/kubelet/plugins/gpu.example.com")
    assert config.kubeconfig == Path("/k")
    assert parse_config([], environ={"NODE_NAME": "n", "HEALTHCHECK_PORT": ""}).healthcheck_port == 51516


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--simulated-gpus", "-1"], {}, "invalid value '-1' for --simulated-gpus [env SIMULATED_GPUS]"),
        (
            [],
            {"LOG_FORMAT": "xml"},
            "invalid value 'xml' for --log-format from env LOG_FORMAT: must be one of",
        ),
        (["--cdi-root", "var/run/cdi"], {}, "--cdi-root [env CDI_ROOT]: must be an absolute path"),
        (["--simulated-product", "GTX"], {}, "must be one of the known products: "),
        (["--driver-name", "GPU"], {}, "--driver-name [env DRIVER_NAME]: must be a lowercase DNS subdomain"),
        (["--metrics-port", "51516"], {}, "must differ, both are 51516"),
        (["--plugin-data-dir", "/" + "x" * 110], {}, "--plugin-data-dir (env PLUGIN_DATA_DIR) is too long"),
        (
            ["--rolling-update-id", "../x"],
            {},
            "invalid value '../x' for --rolling-update-id [env ROLLING_UPDATE_ID]: "
            "must be 1 to 64 lowercase letters, digits and '-' (the pod UID)",
        ),
        ([], {"ROLLING_UPDATE_ID": "-a"}, "from env ROLLING_UPDATE_ID: must be 1 to 64"),
        (["--rolling-update-id", "a" * 65], {}, "must be 1 to 64"),
        (
            [],
            {"CLAIM_RECONCILE_INTERVAL": "5"},
            "invalid value '5' for --claim-reconcile-interval from env CLAIM_RECONCILE_INTERVAL: "
            "must be an integer from 10 to 86400",
        ),
        (
            [],
            {"ADDITIONAL_XIDS_TO_IGNORE": "74;79"},
            "invalid value '74;79' for --additional-xids-to-ignore from env ADDITIONAL_XIDS_TO_IGNORE: "
            "must be a comma-separated list of XID numbers (e.g. 74,79); '74;79' is not one",
        ),
        (
            ["--health-recovery-window", "5m"],
            {},
            "invalid value '5m' for --health-recovery-window [env HEALTH_RECOVERY_WINDOW]: "
            "must be an integer from 0 to 86400",
        ),
        (
            ["--log-level", "trace"],
            {},
            "--log-level [env LOG_LEVEL]: must be one of: debug, info, warning, error",
        ),
    ],
)
def test_errors_name_flag_env_value_and_what_is_allowed(argv: list[str], env: dict, message: str) -> None:
    with pytest.raises(PluginConfigError) as err:
        parse_config(["--node-name", "n", *argv], environ=env)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_json_logs_carry_fields() -> None:
    stream = io.StringIO()
    setup_logging("json", stream=stream)
    try:
        logging.getLogger("vke_gpu_dra.test").info("hello", extra={"fields": {"claim": "ns/c"}})
        try:
            raise ValueError("bad")
        except ValueError:
            logging.getLogger("vke_gpu_dra.test").exception("failed")
    finally:
        logging.getLogger().handlers.clear()
    first, second = (json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{"))
    assert first["msg"] == "hello" and first["claim"] == "ns/c" and first["level"] == "info"
    assert second["level"] == "error" and "ValueError: bad" in second["error_trace"]
