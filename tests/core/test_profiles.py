import pytest
from vke_gpu_dra_core import profiles
from vke_gpu_dra_core.profiles import UnknownProductError, get_profile

REQUIRED = [
    "NVIDIA A30",
    "NVIDIA A10",
    "NVIDIA A100-SXM4-40GB",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H20",
    "NVIDIA H200",
    "NVIDIA L20",
    "NVIDIA L4",
    "Tesla T4",
    "Tesla V100-SXM2-32GB",
]


@pytest.mark.parametrize("name", REQUIRED)
def test_required_products_have_complete_rows(name):
    p = get_profile(name)
    assert p.product_name == name
    assert p.memory_bytes > 0 and p.memory_bytes % 2**20 == 0
    assert p.source
    assert p.architecture in {"Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper"}


def test_default_is_a30_with_24gi():
    p = get_profile(profiles.DEFAULT_PRODUCT)
    assert (p.product_name, p.memory_bytes, p.compute_capability, p.architecture) == (
        "NVIDIA A30",
        24 * 2**30,
        (8, 0),
        "Ampere",
    )
    assert p.mig_capable


def test_mig_support_matches_the_products():
    assert get_profile("NVIDIA H100 80GB HBM3").mig_capable
    assert not get_profile("NVIDIA L4").mig_capable
    assert not get_profile("Tesla T4").mig_capable


def test_unknown_product_lists_known_names():
    with pytest.raises(UnknownProductError) as err:
        get_profile("NVIDIA B300")
    message = str(err.value)
    assert "'NVIDIA B300'" in message
    assert "NVIDIA A30" in message and "Tesla T4" in message
