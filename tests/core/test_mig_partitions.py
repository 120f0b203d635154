import pytest
from vke_gpu_dra_core import profiles
from vke_gpu_dra_core.mig_partitions import (
    LIMITS_1_34,
    LIMITS_1_35,
    MigCatalogError,
    builtin_mig_catalog,
    check_slice_limits,
    mig_product,
    parse_catalog,
    product_partitions,
    slice_limits,
)

GI = 2**30


def test_every_catalogued_product_is_a_mig_capable_profile_with_a_source():
    catalog = builtin_mig_catalog()
    assert set(catalog) >= {"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"}
    for name, product in catalog.items():
        assert profiles.get_profile(name).mig_capable
        assert "MIG User Guide" in product.source
        full = max(product.profiles, key=lambda p: p.memory_mib)
        assert full.memory_bytes <= profiles.get_profile(name).memory_bytes


def test_a100_80gb_counters_and_devices_match_nvidias_tables():
    parts = product_partitions("NVIDIA A100-SXM4-80GB", 3)
    assert parts.counter_set.to_api() == {
        "name": "gpu-3-counter-set",
        "counters": {
            "multiprocessors": {"value": "98"},
            "copy-engines": {"value": "7"},
            "decoders": {"value": "5"},
            "encoders": {"value": "0"},
            "jpeg-engines": {"value": "1"},
            "ofa-engines": {"value": "1"},
            "memory": {"value": "79Gi"},
            **{f"memory-slice-{i}": {"value": "1"} for i in range(8)},
        },
    }
    names = [d.name for d in parts.placements]
    assert names[:8] == [f"gpu-3-mig-1g10gb-19-{s}" for s in range(7)] + ["gpu-3-mig-2g20gb-14-0"]
    assert "gpu-3-mig-1g10gb-me-20-6" in names and "gpu-3-mig-7g80gb-0-0" in names
    # 7 + 3 + 2 + 1 + 1 + 7 + 4 placements (nvidia-smi mig -lgipp)
    assert len(parts.placements) == 25
    three_g = next(d for d in parts.placements if d.name == "gpu-3-mig-3g40gb-9-4")
    assert three_g.consumes_counters() == [
        {
            "counterSet": "gpu-3-counter-set",
            "counters": {
                "multiprocessors": {"value": "42"},
                "copy-engines": {"value": "3"},
                "decoders": {"value": "2"},
                "encoders": {"value": "0"},
                "jpeg-engines": {"value": "0"},
                "ofa-engines": {"value": "0"},
                "memory": {"value": "40192Mi"},
                **{f"memory-slice-{i}": {"value": "1"} for i in (4, 5, 6, 7)},
            },
        }
    ]
    assert parts.whole_gpu.name == "gpu-3"
    assert dict(parts.whole_gpu.consumes) == dict(parts.counter_set.counters)


def test_overlapping_placements_exclude_each_other_through_memory_slices():
    parts = product_partitions("NVIDIA H100 80GB HBM3", 0)
    by_name = {d.name: d for d in parts.devices}
    two_g = by_name["gpu-0-mig-2g20gb-14-2"]
    assert two_g.excludes(by_name["gpu-0-mig-1g10gb-19-3"])
    assert two_g.excludes(by_name["gpu-0-mig-1g20gb-15-2"])
    assert not two_g.excludes(by_name["gpu-0-mig-1g10gb-19-4"])
    assert all(parts.whole_gpu.excludes(d) for d in parts.placements)
    assert parts.counter_set.counters["multiprocessors"] == 132


@pytest.mark.parametrize("product", sorted(builtin_mig_catalog()))
def test_one_gpu_fits_one_slice_on_1_34_and_1_35_on(product):
    parts = product_partitions(product, 0)
    assert check_slice_limits([parts.counter_set], parts.devices, LIMITS_1_35) == []
    assert check_slice_limits([parts.counter_set], parts.devices, LIMITS_1_34) == []
    # 1.34 caps the shared counters of a slice at 32: three GPUs' sets (15 counters each) need two slices
    sets = [product_partitions(product, m).counter_set for m in range(3)]
    assert any("shared counters" in p for p in check_slice_limits(sets, [], LIMITS_1_34))
    # 1.35 on: 64 devices with counters per slice, so eight GPUs' placements are spread over slices
    eight = [d for m in range(8) for d in product_partitions(product, m).devices]
    assert any("devices consuming counters" in p for p in check_slice_limits([], eight, LIMITS_1_35))


def test_slice_limits_by_version():
    assert slice_limits(34) is LIMITS_1_34 and slice_limits(36) is LIMITS_1_35
    with pytest.raises(MigCatalogError, match=r"1\.33; allowed: 1\.34 or later"):
        slice_limits(33)


def test_bad_rows_name_the_field():
    row = {
        "id": 19, "index": 0, "slices": 1, "multiprocessors": 14, "copyEngines": 1, "decoders": 0,
        "encoders": 0, "jpegEngines": 0, "ofaEngines": 0, "memoryMiB": 4864, "placements": [0, 7], "size": 2,
    }  # fmt: skip
    data = {"products": {"X": {"memorySlices": 8, "source": "s", "profiles": {"1g.5gb": row}}}}
    with pytest.raises(MigCatalogError, match=r"\['1g.5gb'\].placements: start 7 with size 2 passes"):
        parse_catalog(data)
    with pytest.raises(MigCatalogError, match=r"no MIG profile '9g\.1gb'; allowed: 1g\.5gb"):
        mig_product("NVIDIA A100-SXM4-40GB").profile("9g.1gb")
    with pytest.raises(MigCatalogError, match="no MIG profiles catalogued for GPU product 'NVIDIA A10'"):
        mig_product("NVIDIA A10")
