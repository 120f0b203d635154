import os

import pytest
from vke_gpu_dra.discovery.pcie import PcieRootError, pcie_root, pcie_root_from_link


def make_link(sysfs, bdf, target):
    devices = sysfs / "bus" / "pci" / "devices"
    devices.mkdir(parents=True, exist_ok=True)
    os.symlink(target, devices / bdf)


def test_pcie_root_from_sysfs_link(tmp_path):
    make_link(tmp_path, "0000:3b:00.0", "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0")
    assert pcie_root("0000:3b:00.0", tmp_path) == "pci0000:3a"


def test_pcie_root_from_absolute_link():
    link = "/sys/devices/pci0000:64/0000:64:00.0/0000:65:01.0"
    assert pcie_root_from_link("0000:65:01.0", link) == "pci0000:64"


def test_missing_device_is_an_error_naming_it(tmp_path):
    with pytest.raises(PcieRootError, match=r"PCI device 0000:3b:00\.0: cannot read link"):
        pcie_root("0000:3b:00.0", tmp_path)


@pytest.mark.parametrize("bdf", ["00000000:3B:00.0", "0000:3B:00.0", "3b:00.0", "../../etc"])
def test_bad_bus_id_is_rejected(tmp_path, bdf):
    with pytest.raises(PcieRootError, match="is not of the form"):
        pcie_root(bdf, tmp_path)


@pytest.mark.parametrize("link", ["../../../somewhere/else", "../../../devices/platform/foo"])
def test_link_without_pci_root_is_an_error(link):
    with pytest.raises(PcieRootError, match=r"0000:3b:00\.0"):
        pcie_root_from_link("0000:3b:00.0", link)
