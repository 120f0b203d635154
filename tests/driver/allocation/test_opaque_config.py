import pytest
from vke_gpu_dra.opaque_config import (
    NO_SHARING,
    MpsSettings,
    OpaqueConfigError,
    Sharing,
    config_for,
    decode_configs,
    decode_parameters,
    mps_limits,
    quantity_bytes,
    resolve_sharing,
)
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.featuregates import FeatureGates, parse

from tests.driver.claim_objects import gpu_config, mig_config, opaque

DRIVER = facts.DRIVER_NAME
OFF = FeatureGates()
TS = parse("TimeSlicingSettings=true")
MPS = parse("MPSSupport=true")
BOTH = parse("TimeSlicingSettings=true,MPSSupport=true,")
GPU, MIG = facts.DEVICE_TYPE_GPU, facts.DEVICE_TYPE_MIG


def one(params, gates, device_type=GPU):
    configs = decode_configs([opaque(params)], DRIVER)
    return resolve_sharing(config_for("gpu", device_type, "gpu-0", configs), device_type, gates)


def test_null_or_absent_sharing_is_accepted():
    assert decode_parameters(gpu_config(), "c") == ("GpuConfig", None)
    assert decode_parameters(gpu_config(sharing=None), "c") == ("GpuConfig", None)
    assert decode_parameters(mig_config(sharing=None), "c") == ("MigDeviceConfig", None)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"apiVersion": "resource.nvidia.com/v1", "kind": "GpuConfig"}, "apiVersion must be"),
        ({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "TpuConfig"}, "kind must be one of GpuConfig"),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig"},
            "compute domains",
        ),
        (gpu_config(sharingg=None), r"\(GpuConfig\): unknown field\(s\) sharingg"),
        (gpu_config(sharing={"strategy": 3}), "strategy must be a string"),
        (
            gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": 3}}),
            "interval must be a string",
        ),
        (
            gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"intervall": "Long"}}),
            r"timeSlicingConfig: unknown field\(s\) intervall",
        ),
        (
            gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50.5}}),
            "defaultActiveThreadPercentage must be an integer",
        ),
        (
            gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": True}}),
            "defaultActiveThreadPercentage must be an integer",
        ),
        (
            gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "lots"}}),
            "must be a quantity",
        ),
        (
            gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "1GB"}}),
            "must be a quantity",
        ),
        (
            gpu_config(
                sharing={"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": ["1Gi"]}}
            ),
            "defaultPerDevicePinnedMemoryLimit must be a map",
        ),
        (
            gpu_config(
                sharing={"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": "x"}}}
            ),
            r"defaultPerDevicePinnedMemoryLimit\['0'\] must be a quantity",
        ),
        (gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"threads": 1}}), r"unknown field\(s\) threads"),
        (
            mig_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {}}),
            r"\(MigDeviceConfig\) field sharing: unknown field\(s\) timeSlicingConfig",
        ),
        ("not-an-object", "parameters must be an object"),
    ],
)
def test_strict_decoding_names_kind_and_field(params, message):
    with pytest.raises(OpaqueConfigError, match=message):
        decode_parameters(params, "config[0]")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Gi", 2**30),
        ("1.5Gi", 3 * 2**29),
        ("512Mi", 2**29),
        ("1G", 10**9),
        ("1e9", 10**9),
        ("1E", 10**18),
        ("100m", 1),
        ("1k", 1000),
        (".5Ki", 512),
        ("5.", 5),
        ("+3", 3),
        ("-1Mi", -(2**20)),
        (1048576, 2**20),
    ],
)
def test_quantities_as_kubernetes_parses_them(text, value):
    assert quantity_bytes(text, "q") == value


@pytest.mark.parametrize("text", ["1GB", "1 Gi", "Gi", ".", "1ki", "1.2.3", "", "1e", True, None])
def test_bad_quantities_are_refused(text):
    with pytest.raises(OpaqueConfigError, match="must be a quantity"):
        quantity_bytes(text, "q")


# ----------------------------------------------------------------- gates and NVIDIA's validation rules

SHARING_CASES = [
    {"strategy": "TimeSlicing"},
    {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    {"strategy": "MPS"},
    {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}},
]


@pytest.mark.parametrize("sharing", SHARING_CASES)
def test_gates_off_every_strategy_fails_with_nvidias_message(sharing):
    with pytest.raises(
        OpaqueConfigError, match=f"unknown GPU sharing strategy: {sharing['strategy']}; feature gate"
    ):
        one(gpu_config(sharing=sharing), OFF)


def test_each_gate_enables_only_its_strategy():
    assert one(gpu_config(sharing={"strategy": "TimeSlicing"}), TS).strategy == "TimeSlicing"
    with pytest.raises(
        OpaqueConfigError, match="unknown GPU sharing strategy: MPS; feature gate MPSSupport is off"
    ):
        one(gpu_config(sharing={"strategy": "MPS"}), TS)
    assert one(gpu_config(sharing={"strategy": "MPS"}), MPS).strategy == "MPS"
    with pytest.raises(
        OpaqueConfigError, match="strategy: TimeSlicing; feature gate TimeSlicingSettings is off"
    ):
        one(gpu_config(sharing={"strategy": "TimeSlicing"}), MPS)
    with pytest.raises(
        OpaqueConfigError, match=r"unknown GPU sharing strategy: Exclusive \(allowed: TimeSlicing, MPS"
    ):
        one(gpu_config(sharing={"strategy": "Exclusive"}), BOTH)


def test_null_sharing_is_a_no_op_without_gates_and_default_time_slicing_with():
    assert one(gpu_config(), OFF) is NO_SHARING
    assert resolve_sharing(None, GPU, OFF) is NO_SHARING
    assert one(gpu_config(), MPS) is NO_SHARING
    assert one(gpu_config(sharing=None), TS) == Sharing("TimeSlicing", timeslice=0)
    assert resolve_sharing(None, GPU, TS) == Sharing("TimeSlicing", timeslice=0)
    assert resolve_sharing(None, MIG, TS) == Sharing("TimeSlicing")


@pytest.mark.parametrize(("interval", "number"), [("Default", 0), ("Short", 1), ("Medium", 2), ("Long", 3)])
def test_intervals_map_to_nvidia_smi_numbers(interval, number):
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}}
    assert one(gpu_config(sharing=sharing), TS) == Sharing("TimeSlicing", timeslice=number)


@pytest.mark.parametrize(
    ("sharing", "gates", "message"),
    [
        (
            {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}},
            TS,
            r"timeSlicingConfig.interval: unknown time-slice interval: Forever "
            r"\(allowed: Default, Short, Medium, Long\)",
        ),
        ({"strategy": "TimeSlicing", "timeSlicingConfig": {}}, TS, "interval: must be set"),
        (
            {"strategy": "TimeSlicing", "mpsConfig": {}},
            BOTH,
            "cannot use MpsConfig with the 'TimeSlicing' strategy",
        ),
        (
            {"strategy": "MPS", "timeSlicingConfig": {"interval": "Long"}},
            BOTH,
            "cannot use TimeSlicingConfig with the 'MPS' strategy",
        ),
        (
            {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": -1}},
            MPS,
            "defaultActiveThreadPercentage: active thread percentage must not be negative, got -1",
        ),
        (
            {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}},
            MPS,
            "defaultActiveThreadPercentage: active thread percentage must not be greater than 100, got 101",
        ),
    ],
)
def test_validation_rules_per_field(sharing, gates, message):
    with pytest.raises(OpaqueConfigError, match=message):
        one(gpu_config(sharing=sharing), gates)


def test_mig_devices_accept_time_slicing_and_set_nothing():
    assert one(mig_config(sharing={"strategy": "TimeSlicing"}), TS, MIG) == Sharing("TimeSlicing")


def test_mps_settings_and_limits_as_nvidia_passes_them():
    sharing = {
        "strategy": "MPS",
        "mpsConfig": {
            "defaultActiveThreadPercentage": 50,
            "defaultPinnedDeviceMemoryLimit": "10Gi",
            "defaultPerDevicePinnedMemoryLimit": {"1": "1.5Gi", "GPU-a": "1Mi"},
        },
    }
    got = one(gpu_config(sharing=sharing), MPS)
    assert got.strategy == "MPS" and got.mps is not None and got.mps.active_thread_percentage == 50
    assert mps_limits(got.mps, ["GPU-a", "GPU-b", "GPU-c"], "c") == {
        "GPU-a": "1M",
        "GPU-b": "1536M",
        "GPU-c": "10240M",
    }
    assert mps_limits(MpsSettings(), ["GPU-a"], "c") == {}
    assert mps_limits(MpsSettings(pinned_memory_limit="1Gi"), [], "c") == {}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (MpsSettings(pinned_memory_limit="1023Ki"), "invalid limit: default value set too low: 1023Ki"),
        (
            MpsSettings(per_device_pinned_memory_limit={"0": "100"}),
            "invalid limit: value set too low: 0: 100",
        ),
        (
            MpsSettings(per_device_pinned_memory_limit={"GPU-x": "1Gi"}),
            "invalid device: unable to parse key as an integer: GPU-x",
        ),
        (MpsSettings(per_device_pinned_memory_limit={"2": "1Gi"}), "invalid device: invalid device index: 2"),
        (
            MpsSettings(per_device_pinned_memory_limit={"-1": "1Gi"}),
            "invalid device: invalid device index: -1",
        ),
    ],
)
def test_mps_limit_errors(settings, message):
    with pytest.raises(OpaqueConfigError, match=message):
        mps_limits(settings, ["GPU-a", "GPU-b"], "c")


# ----------------------------------------------------------------------------- decoding and precedence


def test_other_drivers_configs_are_ignored_and_class_configs_come_first():
    configs = decode_configs(
        [
            opaque(gpu_config(), source="FromClaim", requests=["a"]),
            opaque({"anything": True}, driver="other.example.com"),
            opaque(gpu_config(), source="FromClass"),
        ],
        DRIVER,
    )
    assert [(c.source, c.requests) for c in configs] == [("FromClass", ()), ("FromClaim", ("a",))]


def test_bad_source_and_non_opaque_configs_are_errors():
    with pytest.raises(OpaqueConfigError, match="source must be FromClass or FromClaim"):
        decode_configs([opaque(gpu_config(), source="FromPod")], DRIVER)
    with pytest.raises(OpaqueConfigError, match="only opaque parameters are supported by this driver"):
        decode_configs([{"source": "FromClaim", "requests": ["a"]}], DRIVER)


def test_last_applicable_config_wins_in_both_orders():
    specific_then_general = decode_configs(
        [
            opaque(gpu_config(), requests=["big"]),
            opaque(gpu_config()),
        ],
        DRIVER,
    )
    assert config_for("big", GPU, "gpu-0", specific_then_general) is specific_then_general[1]
    general_then_specific = decode_configs(
        [
            opaque(gpu_config()),
            opaque(gpu_config(), requests=["big"]),
        ],
        DRIVER,
    )
    assert config_for("big", GPU, "gpu-0", general_then_specific) is general_then_specific[1]
    assert config_for("other", GPU, "gpu-0", general_then_specific) is general_then_specific[0]


def test_claim_configs_beat_class_configs_whatever_their_order_in_the_list():
    configs = decode_configs(
        [
            opaque(gpu_config(), source="FromClaim"),
            opaque(gpu_config(), source="FromClass"),
        ],
        DRIVER,
    )
    assert config_for("gpu", GPU, "gpu-0", configs).source == "FromClaim"


def test_request_names_match_exactly():
    configs = decode_configs(
        [
            opaque(mig_config(), source="FromClass"),
            opaque(gpu_config(), requests=["big"]),
            opaque(gpu_config(), requests=["pick/a"]),
        ],
        DRIVER,
    )
    assert config_for("big", GPU, "gpu-0", configs) is configs[1]
    assert config_for("big/sub", GPU, "gpu-0", configs) is None  # `big` does not name `big/sub`
    assert config_for("pick/a", GPU, "gpu-0", configs) is configs[2]
    assert config_for("pick", GPU, "gpu-0", configs) is None
    assert config_for("other", MIG, "gpu-0-mig-19-0-1", configs) is configs[0]
    assert config_for("x", GPU, "gpu-0", []) is None


def test_general_config_of_the_other_type_is_skipped():
    configs = decode_configs([opaque(gpu_config()), opaque(mig_config())], DRIVER)
    assert config_for("gpu", GPU, "gpu-0", configs) is configs[0]


def test_gpu_config_aimed_at_a_mig_device_is_an_error():
    configs = decode_configs([opaque(gpu_config(), requests=["m"])], DRIVER)
    message = (
        r"cannot apply GPU config to request: m \(GpuConfig from .*device gpu-0-mig-19-0-1 is of type mig"
    )
    with pytest.raises(OpaqueConfigError, match=message):
        config_for("m", MIG, "gpu-0-mig-19-0-1", configs)
    configs = decode_configs([opaque(mig_config(), requests=["g"])], DRIVER)
    with pytest.raises(OpaqueConfigError, match="cannot apply MIG device config to request: g"):
        config_for("g", GPU, "gpu-0", configs)
