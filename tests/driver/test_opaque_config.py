import pytest
from vke_gpu_dra import facts
from vke_gpu_dra.opaque_config import (
    ConfigError,
    check_supported,
    config_for,
    decode_configs,
    decode_parameters,
)

from tests.driver.claims import gpu_config, mig_config, opaque

DRIVER = facts.DRIVER_NAME


def test_null_or_absent_sharing_is_accepted():
    assert decode_parameters(gpu_config(), "c") == ("GpuConfig", None)
    assert decode_parameters(gpu_config(sharing=None), "c") == ("GpuConfig", None)
    assert decode_parameters(mig_config(sharing=None), "c") == ("MigDeviceConfig", None)


@pytest.mark.parametrize(("params", "message"), [
    ({"apiVersion": "resource.nvidia.com/v1", "kind": "GpuConfig"}, "apiVersion must be"),
    ({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "TpuConfig"}, "kind must be one of GpuConfig"),
    ({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig"}, "compute domains"),
    (gpu_config(sharingg=None), r"\(GpuConfig\): unknown field\(s\) sharingg"),
    (gpu_config(sharing={"strategy": "Exclusive"}), "unknown GPU sharing strategy 'Exclusive'"),
    (gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}}),
     "interval must be one of Default, Short, Medium, Long"),
    (gpu_config(sharing={"strategy": "TimeSlicing", "mpsConfig": {}}), "mpsConfig needs strategy MPS"),
    (gpu_config(sharing={"strategy": "MPS", "timeSlicingConfig": {}}), "timeSlicingConfig needs strategy"),
    (gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}),
     "defaultActiveThreadPercentage must be an integer 0-100"),
    (gpu_config(sharing={"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "lots"}}),
     "must be a quantity"),
    (mig_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {}}),
     r"\(MigDeviceConfig\) field sharing: unknown field\(s\) timeSlicingConfig"),
    ("not-an-object", "parameters must be an object"),
])
def test_strict_decoding_names_kind_and_field(params, message):
    with pytest.raises(ConfigError, match=message):
        decode_parameters(params, "config[0]")


def test_sharing_is_decoded_then_rejected_as_unsupported():
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
    configs = decode_configs([opaque(gpu_config(sharing=sharing))], DRIVER)
    with pytest.raises(ConfigError, match=r"config\[0\] \(FromClaim, GpuConfig\) field sharing: GPU sharing "
                                          r"strategy TimeSlicing is not supported by this driver yet"):
        check_supported(configs[0])


def test_other_drivers_configs_are_ignored_and_class_configs_come_first():
    configs = decode_configs([
        opaque(gpu_config(), source="FromClaim", requests=["a"]),
        opaque({"anything": True}, driver="other.example.com"),
        opaque(gpu_config(), source="FromClass"),
    ], DRIVER)
    assert [(c.source, c.requests) for c in configs] == [("FromClass", ()), ("FromClaim", ("a",))]


def test_bad_source_is_an_error():
    with pytest.raises(ConfigError, match="source must be FromClass or FromClaim"):
        decode_configs([opaque(gpu_config(), source="FromPod")], DRIVER)


def test_selection_prefers_request_specific_then_last_matching_type():
    configs = decode_configs([
        opaque(gpu_config(), source="FromClass"),
        opaque(mig_config(), source="FromClass"),
        opaque(gpu_config(), requests=["big"]),
    ], DRIVER)
    assert config_for("big", "gpu", "gpu-0", configs) is configs[2]
    assert config_for("big/sub", "gpu", "gpu-0", configs) is configs[2]
    assert config_for("other", "gpu", "gpu-0", configs) is configs[0]
    assert config_for("other", "mig", "gpu-0-mig-19-0-1", configs) is configs[1]
    assert config_for("x", "gpu", "gpu-0", []) is None


def test_gpu_config_aimed_at_a_mig_device_is_an_error():
    configs = decode_configs([opaque(gpu_config(), requests=["m"])], DRIVER)
    message = r"cannot apply GpuConfig .* to request m: device gpu-0-mig-19-0-1 is of type mig"
    with pytest.raises(ConfigError, match=message):
        config_for("m", "mig", "gpu-0-mig-19-0-1", configs)
