import pytest
from vke_gpu_dra_core import profiles
from vke_gpu_dra_core.discovery.normalize import mig_profile_name
from vke_gpu_dra_core.mig_partitions import (
    LIMITS_1_34,
    LIMITS_1_35,
    GpuPartitions,
    MigCatalogError,
    MigPlacement,
    Partition,
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
    assert set(catalog) >= {
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 PCIe",
        "NVIDIA H200",
        "NVIDIA H20",
    }
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


#: Profile names per product in NVIDIA's MIG User Guide tables (Supported MIG Profiles) and, for the H20,
#: NVIDIA AI Enterprise's MIG-backed vGPU table, in the tables' order: 1g, 1g+me, 1g with twice the memory,
#: 2g, 3g, 4g, 7g.
GUIDE_PROFILES = {
    "NVIDIA A100-SXM4-40GB": ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    "NVIDIA A100-SXM4-80GB": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "NVIDIA H100 80GB HBM3": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "NVIDIA H100 PCIe": ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    "NVIDIA H200": ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    "NVIDIA H20": ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"),
}
#: The tables' "Number of Instances Available", the same for every product above, in the same order.
GUIDE_INSTANCES = (7, 1, 4, 3, 2, 1, 1)


def fits(parts: GpuPartitions, chosen: list[Partition]) -> bool:
    """Whether the devices `chosen` can all be allocated from the counter set (what the scheduler checks)."""
    totals: dict[str, int] = {}
    for device in chosen:
        for name, value in device.consumes.items():
            totals[name] = totals.get(name, 0) + value
    return all(value <= parts.counter_set.counters[name] for name, value in totals.items())


def test_the_catalog_has_the_guides_profiles_and_no_other():
    catalog = builtin_mig_catalog()
    assert set(GUIDE_PROFILES) == set(catalog)
    for product, names in GUIDE_PROFILES.items():
        assert sorted(p.name for p in catalog[product].profiles) == sorted(names), product


@pytest.mark.parametrize("product", sorted(GUIDE_PROFILES))
def test_counters_admit_as_many_instances_of_a_profile_as_nvidias_tables(product: str) -> None:
    parts = product_partitions(product, 0)
    for name, documented in zip(GUIDE_PROFILES[product], GUIDE_INSTANCES, strict=True):
        chosen: list[Partition] = []
        for device in (d for d in parts.placements if d.profile and d.profile.name == name):
            if fits(parts, [*chosen, device]):
                chosen.append(device)
        assert len(chosen) == documented, name
        # placements of one profile that the counters admit together never share a memory slice
        assert not any(a.excludes(b) for i, a in enumerate(chosen) for b in chosen[i + 1 :])


@pytest.mark.parametrize("product", sorted(GUIDE_PROFILES))
def test_every_layout_nvml_can_hold_fits_the_counters(product: str) -> None:
    """Placements on distinct memory slices, at most 7 compute slices and one +me profile: NVML can hold
    them together, so the counters (SMs, engines, memory) must admit them too, or the scheduler would
    refuse a layout the GPU can hold."""
    parts = product_partitions(product, 0)
    placements = list(parts.placements)
    layouts = 0

    def grow(chosen: list[Partition], after: int) -> None:
        nonlocal layouts
        layouts += 1
        assert fits(parts, chosen), [d.name for d in chosen]
        for i in range(after, len(placements)):
            device = placements[i]
            assert device.profile is not None
            if any(device.excludes(other) for other in chosen):
                continue
            if sum(d.profile.slices for d in chosen if d.profile) + device.profile.slices > 7:
                continue
            if "+me" in device.profile.name and any(d.profile and "+me" in d.profile.name for d in chosen):
                continue
            grow([*chosen, device], i + 1)

    grow([], 0)
    assert layouts > 100
    # two +me profiles share the GPU's one OFA engine: the counters refuse the second, as NVML does
    me = [d for d in parts.placements if d.profile and d.profile.name.endswith("+me")]
    assert not me[0].excludes(me[1]) and not fits(parts, me[:2])


@pytest.mark.parametrize("product", sorted(GUIDE_PROFILES))
def test_overlap_follows_memory_slices_and_the_whole_gpu_consumes_everything(product: str) -> None:
    parts = product_partitions(product, 0)
    assert dict(parts.whole_gpu.consumes) == dict(parts.counter_set.counters)
    assert all(parts.whole_gpu.excludes(d) and d.excludes(parts.whole_gpu) for d in parts.placements)
    for a in parts.placements:
        for b in parts.placements:
            assert a.placement and b.placement
            assert a.excludes(b) == a.placement.overlaps(b.placement), (a.name, b.name)
    # the full-GPU profile is one placement over all eight memory slices, with the counter set's maxima
    full = [d for d in parts.placements if d.profile and d.profile.slices == 7]
    assert len(full) == 1 and full[0].placement == MigPlacement(0, 8)
    assert dict(full[0].consumes) == dict(parts.counter_set.counters)
    assert full[0].profile is not None
    assert full[0].profile.memory_bytes <= profiles.get_profile(product).memory_bytes


@pytest.mark.parametrize("product", sorted(GUIDE_PROFILES))
def test_profile_names_follow_from_memory_as_nvml_consumers_derive_them(product: str) -> None:
    """go-nvlib names a profile from its memory and the GPU's: the catalog's memory gives NVIDIA's names."""
    total = profiles.get_profile(product).memory_bytes
    for p in mig_product(product).profiles:
        derived = mig_profile_name(
            gi_slices=p.slices,
            ci_slices=p.slices,
            mig_memory_mib=p.memory_mib,
            total_memory_bytes=total,
            profile_index=p.index,
        )
        assert derived == p.name
