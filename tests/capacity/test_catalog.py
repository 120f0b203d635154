import pytest
from vke_gpu_dra.profiles import get_profile
from vke_gpu_dra_ops.capacity.catalog import (
    CatalogError,
    builtin_catalog,
    gpu_instance_types,
    load_catalog,
    lookup,
)


def test_builtin_rows_match_profiles_and_carry_confidence():
    catalog = builtin_catalog()
    assert catalog["ecs.gni2.3xlarge"].product == "NVIDIA A10"
    assert catalog["ecs.hpcpni3ln.45xlarge"].gpus == 8
    for row in catalog.values():
        assert row.gpu_memory_bytes == get_profile(row.product).memory_bytes
        assert row.confidence in ("high", "medium", "low", "unverified")
        assert row.source


def test_gpu_instance_types_for_the_policy_pack():
    assert gpu_instance_types(min_confidence="medium") == ["ecs.gni2.3xlarge", "ecs.hpcpni3ln.45xlarge"]
    assert "ecs.gni3.xlarge" in gpu_instance_types()
    assert "ecs.new.8xlarge" in gpu_instance_types(
        '{"ecs.new.8xlarge": {"product": "NVIDIA H200", "gpus": 8}}'
    )


def test_stack_config_adds_and_overrides_rows_in_json_or_yaml():
    catalog = load_catalog(
        "ecs.gni2.3xlarge: {product: NVIDIA A10, gpus: 2, confidence: high, source: console}"
    )
    assert catalog["ecs.gni2.3xlarge"].gpus == 2 and catalog["ecs.gni2.3xlarge"].origin.endswith(
        "gpuInstanceTypes"
    )
    row = load_catalog('{"ecs.x.big": {"product": "NVIDIA L20", "gpus": 4}}')["ecs.x.big"]
    assert (row.confidence, row.architecture, row.compute_capability) == ("unverified", "Ada Lovelace", "8.9")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            '{"ecs.x.y": {"product": "NVIDIA Z9", "gpus": 1}}',
            "vke-gpu-dra:gpuInstanceTypes['ecs.x.y'].product: 'NVIDIA Z9' is not a known GPU product; "
            "allowed: ",
        ),
        ('{"ecs.x.y": {"product": "NVIDIA A10", "gpus": 0}}', "['ecs.x.y'].gpus: 0; allowed: a whole number"),
        ('{"gni2": {"product": "NVIDIA A10", "gpus": 1}}', "key 'gni2' is not an ECS instance type"),
        ('{"ecs.x.y": {"product": "NVIDIA A10", "gpus": 1, "colour": 1}}', "unknown field(s) colour"),
        (
            '{"ecs.x.y": {"product": "NVIDIA A10", "gpus": 1, "confidence": "sure"}}',
            "confidence: 'sure'; allowed",
        ),
        ('{"ecs.x.y": {"product": "NVIDIA A10", "gpus": 1, "architecture": "Hopper"}}', "disagrees with"),
        ("[1, 2]", "must be a map of ECS instance type to row"),
    ],
)
def test_bad_config_rows_name_key_field_value_and_allowed(value, message):
    with pytest.raises(CatalogError) as info:
        load_catalog(value)
    assert message in str(info.value)


def test_lookup_of_unknown_type_points_at_the_config_key():
    with pytest.raises(CatalogError, match="add it with the config key vke-gpu-dra:gpuInstanceTypes"):
        lookup("ecs.unknown.xlarge")
