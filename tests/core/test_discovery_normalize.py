import pytest
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Version
from vke_gpu_dra_core.discovery import normalize as n


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("535.104.05", "535.104.5"),
        ("550.54.15", "550.54.15"),
        ("535.129.03", "535.129.3"),
        ("8.0", "8.0.0"),
        ("12.4", "12.4.0"),
        ("570", "570.0.0"),
        ("v1.2.3", "1.2.3"),
        ("007.08.09", "7.8.9"),
    ],
)
def test_version_normalisation(raw, want):
    assert n.normalize_version(raw) == Version(want)


@pytest.mark.parametrize("raw", ["", "abc", "1.2.3.4", "1.2.x", "1..2", "-1.0"])
def test_bad_versions_name_the_value(raw):
    with pytest.raises(ValueError, match="version"):
        n.normalize_version(raw)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (12040, "12.4.0"),
        (12020, "12.2.0"),
        (11080, "11.8.0"),
        (13000, "13.0.0"),
    ],
)
def test_cuda_driver_version(raw, want):
    assert n.cuda_driver_version(raw) == Version(want)


def test_compute_capability():
    assert n.compute_capability(8, 0) == Version("8.0.0")
    assert n.compute_capability(9, 0) == Version("9.0.0")


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("00000000:65:01.0", "0000:65:01.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("0000", "0000"),
        ("00000000", "00000000"),
        ("00000001:AB:00.0", "0001:ab:00.0"),
    ],
)
def test_pcie_bus_id(raw, want):
    assert n.pcie_bus_id(raw) == want


@pytest.mark.parametrize("bus_id", ["0000:3b:00.0", "0001:ab:1e.7"])
def test_pci_bus_id_attribute_is_the_extended_bdf(bus_id):
    assert n.pci_bus_id_attribute(bus_id, "index 0") == bus_id


@pytest.mark.parametrize("bus_id", ["00000000:3b:00.0", "0000:3B:00.0", "3b:00.0", ""])
def test_pci_bus_id_attribute_refuses_other_forms(bus_id):
    with pytest.raises(
        ValueError, match=rf"GPU index 0: PCI bus ID '{bus_id}' is not an extended BDF"
    ) as err:
        n.pci_bus_id_attribute(bus_id, "index 0")
    assert facts.ATTR_PCI_BUS_ID in str(err.value)


def test_addressing_modes_are_go_nvlibs_names():
    assert [n.addressing_mode_name(v, "0") for v in (0, 1, 2)] == ["None", "HMM", "ATS"]
    with pytest.raises(ValueError, match="unknown addressing mode value 3"):
        n.addressing_mode_name(3, "0")


def test_enum_tables_match_the_parity_sheet():
    assert n.architecture_name(7, "0") == "Ampere"
    assert n.architecture_name(8, "0") == "Ada Lovelace"
    assert n.architecture_name(0xFFFFFFFF, "0") == "Unknown"
    assert n.brand_name(14, "0") == "Nvidia"
    assert n.brand_name(2, "0") == "Tesla"
    assert n.brand_name(16, "0") == "TitanRTX"
    assert len(n.BRANDS) == 17 and len(n.ARCHITECTURES) == 10


@pytest.mark.parametrize(
    ("fn", "value", "kind"),
    [
        (n.architecture_name, 11, "architecture"),
        (n.architecture_name, 1, "architecture"),
        (n.brand_name, 17, "brand"),
    ],
)
def test_unknown_enum_values_name_the_gpu(fn, value, kind):
    with pytest.raises(ValueError, match=rf"GPU 3 \(GPU-abc\): unknown {kind} value {value} \(known: "):
        fn(value, "3 (GPU-abc)")


def test_device_names():
    assert n.gpu_device_name(3) == "gpu-3"
    assert n.mig_device_name(0, 19, 2, 1) == "gpu-0-mig-19-2-1"


@pytest.mark.parametrize(
    ("mib", "total", "gb"),
    [
        (4864, 40960 * 2**20, 5),
        (9856, 40960 * 2**20, 10),
        (19968, 40960 * 2**20, 20),
        (40192, 40960 * 2**20, 40),
        (9856, 81920 * 2**20, 10),
        (19968, 81920 * 2**20, 20),
        (5836, 24576 * 2**20, 6),
        (11872, 24576 * 2**20, 12),
        (9984, 81559 * 2**20, 10),
        (80384, 81559 * 2**20, 80),
        # H200: half of 141 GB rounds away from zero, as Go's math.Round does (3g.71gb, not 3g.70gb)
        (66560, 143771 * 2**20, 71),
        (33280, 143771 * 2**20, 35),
    ],
)
def test_mig_memory_gb_follows_go_nvlib(mib, total, gb):
    assert n.mig_memory_gb(mib, total) == gb


def test_mig_profile_names():
    total = 40960 * 2**20
    assert (
        n.mig_profile_name(
            gi_slices=1, ci_slices=1, mig_memory_mib=4864, total_memory_bytes=total, profile_index=0
        )
        == "1g.5gb"
    )
    assert (
        n.mig_profile_name(
            gi_slices=1, ci_slices=1, mig_memory_mib=4864, total_memory_bytes=total, profile_index=7
        )
        == "1g.5gb+me"
    )
    assert (
        n.mig_profile_name(
            gi_slices=3, ci_slices=1, mig_memory_mib=19968, total_memory_bytes=total, profile_index=2
        )
        == "1c.3g.20gb"
    )
    with pytest.raises(ValueError, match="total memory"):
        n.mig_profile_name(gi_slices=1, ci_slices=1, mig_memory_mib=1, total_memory_bytes=0, profile_index=0)


def test_mig_capacity_has_memory_slices():
    cap = n.mig_capacity(
        multiprocessors=42,
        copy_engines=3,
        decoders=2,
        encoders=0,
        jpeg_engines=0,
        ofa_engines=0,
        memory_mib=19968,
        placement_start=4,
        placement_size=4,
    )
    assert cap[facts.CAPACITY_MEMORY] == 19968 * 2**20
    assert cap[facts.CAPACITY_MULTIPROCESSORS] == 42
    assert sorted(k for k in cap if k.startswith("memorySlice")) == [f"memorySlice{i}" for i in range(4, 8)]
    assert all(cap[f"memorySlice{i}"] == 1 for i in range(4, 8))
    with pytest.raises(ValueError, match="placement"):
        n.mig_capacity(
            multiprocessors=1,
            copy_engines=1,
            decoders=0,
            encoders=0,
            jpeg_engines=0,
            ofa_engines=0,
            memory_mib=1,
            placement_start=0,
            placement_size=0,
        )
