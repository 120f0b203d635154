import pytest
from vke_gpu_dra.config import PluginConfigError, parse_config
from vke_gpu_dra_core.featuregates import FeatureGateError, FeatureGates, parse


def test_defaults_are_off_for_the_sharing_gates():
    gates = FeatureGates()
    assert not gates.time_slicing and not gates.mps
    assert parse("") == gates


def test_chart_rendering_with_trailing_comma_and_go_booleans():
    gates = parse("TimeSlicingSettings=true,MPSSupport=1,")
    assert gates.time_slicing and gates.mps
    assert not parse(" MPSSupport = False ").mps
    assert (
        parse("IMEXDaemonsWithDNSNames=false,ContextualLogging=true").values["IMEXDaemonsWithDNSNames"]
        is False
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Sharing=true", "unrecognized feature gate: Sharing (known: ConsumableShares, ContextualLogging, "),
        ("mpssupport=true", "unrecognized feature gate: mpssupport"),
        ("MPSSupport", "missing bool value for MPSSupport"),
        ("MPSSupport=yes", "invalid value of MPSSupport=yes: must be true or false"),
        ("=true", "missing gate name in '=true' (write Name=true, e.g. MPSSupport=true"),
    ],
)
def test_bad_gates_are_one_clear_error(text, message):
    with pytest.raises(FeatureGateError, match=message.replace("(", r"\(")):
        parse(text)


def test_flag_and_env():
    assert parse_config(
        ["--node-name", "n"], {"FEATURE_GATES": "TimeSlicingSettings=true"}
    ).feature_gates.time_slicing
    config = parse_config(
        ["--node-name", "n", "--feature-gates", "MPSSupport=true", "--image-name", "img:1"],
        {"FEATURE_GATES": "TimeSlicingSettings=true"},
    )
    assert config.feature_gates.mps and not config.feature_gates.time_slicing and config.image_name == "img:1"
    assert not parse_config(["--node-name", "n"], {}).feature_gates.mps
    with pytest.raises(
        PluginConfigError,
        match=r"invalid value 'X=true' for --feature-gates from env FEATURE_GATES: "
        "unrecognized feature gate: X",
    ):
        parse_config(["--node-name", "n"], {"FEATURE_GATES": "X=true"})
    with pytest.raises(
        PluginConfigError, match=r"--image-name .* is required when feature gate MPSSupport is enabled"
    ):
        parse_config(["--node-name", "n", "--feature-gates", "MPSSupport=true"], {})


def test_namespace_flag():
    assert parse_config(["--node-name", "n"], {"NAMESPACE": "gpu-dra"}).namespace == "gpu-dra"
    with pytest.raises(PluginConfigError, match="--namespace"):
        parse_config(["--node-name", "n", "--namespace", "Bad_NS"], {})
