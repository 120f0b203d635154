import pytest
from vke_gpu_dra_core.catalog import (
    CatalogError,
    builtin_catalog,
    builtin_families,
    family_of,
    gpu_instance_types,
    gpu_types,
    is_gpu_instance_type,
    load_catalog,
    lookup,
    parse_families,
)
from vke_gpu_dra_core.profiles import get_profile


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


def test_families_carry_source_and_confidence_and_cover_every_row():
    families = builtin_families()
    assert {"ecs.gni2", "ecs.hpcpni3ln"} <= set(families)
    assert all(
        f.source and f.confidence in ("high", "medium", "low", "unverified") for f in families.values()
    )
    assert {family_of(name) for name in builtin_catalog()} <= set(families)


def test_is_gpu_instance_type_from_rows_families_and_extra_names():
    assert is_gpu_instance_type("ecs.gni2.3xlarge")
    assert is_gpu_instance_type("ecs.gni2.8xlarge")  # family ecs.gni2, no row of its own
    assert not is_gpu_instance_type("ecs.g3i.2xlarge")
    assert not is_gpu_instance_type("ecs.gni2x.large")
    assert is_gpu_instance_type("ecs.g3i.2xlarge", ["ecs.g3i.2xlarge"])
    assert not is_gpu_instance_type("ecs.g3i.4xlarge", ["ecs.g3i.2xlarge"])
    assert is_gpu_instance_type("ecs.g3i.4xlarge", ["ecs.g3i.*"])
    assert is_gpu_instance_type("ecs.newgpu.large", ["ecs.newgpu"])
    rows = '{"ecs.new.8xlarge": {"product": "NVIDIA H200", "gpus": 8}}'
    assert is_gpu_instance_type("ecs.new.8xlarge", config_value=rows)
    assert not is_gpu_instance_type("ecs.new.16xlarge", config_value=rows)


def test_gpu_types_by_confidence():
    medium = gpu_types(min_confidence="medium")
    assert (
        "ecs.gni2.8xlarge" in medium and "ecs.gni3.xlarge" not in medium and "ecs.pni2.8xlarge" not in medium
    )
    assert "ecs.gni3.2xlarge" in gpu_types()
    with pytest.raises(CatalogError, match="min_confidence 'sure'"):
        gpu_types(min_confidence="sure")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"gni2": {"confidence": "low", "source": "x"}}, "key 'gni2' is not an ECS instance family"),
        ({"ecs.gni2": {"confidence": "low"}}, "['ecs.gni2'].source: None; allowed"),
        ({"ecs.gni2": {"confidence": "sure", "source": "x"}}, "confidence: 'sure'; allowed"),
        ({"ecs.gni2": {"confidence": "low", "source": "x", "gpu": "A10"}}, "unknown field(s) gpu"),
        (
            {"ecs.other": {"confidence": "low", "source": "x"}},
            "no entry for the family of catalogued type(s) ecs.gni2",
        ),
        ([], "must be a map of ECS instance family"),
    ],
)
def test_bad_family_entries_are_named(data, message):
    rows = {"ecs.gni2.3xlarge": builtin_catalog()["ecs.gni2.3xlarge"]}
    with pytest.raises(CatalogError) as info:
        parse_families(data, "families", rows)
    assert message in str(info.value)
