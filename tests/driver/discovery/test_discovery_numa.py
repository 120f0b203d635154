"""`resource.kubernetes.io/numaNode` from sysfs: /sys/bus/pci/devices/<bdf>/numa_node, -1 meaning none."""

import os

import pytest
from vke_gpu_dra.discovery.numa import NumaNodeError, numa_node, parse_numa_node

BDF = "0000:3b:00.0"


def pci_device(sysfs, bdf, numa):
    """A PCI function as sysfs has it: the device directory under its root, linked from bus/pci/devices."""
    target = sysfs / "devices" / "pci0000:3a" / "0000:3a:00.0" / bdf
    target.mkdir(parents=True)
    (target / "numa_node").write_text(f"{numa}\n")
    devices = sysfs / "bus" / "pci" / "devices"
    devices.mkdir(parents=True, exist_ok=True)
    os.symlink(f"../../../devices/pci0000:3a/0000:3a:00.0/{bdf}", devices / bdf)


@pytest.mark.parametrize(("text", "node"), [("0\n", 0), ("1", 1), (" 7 \n", 7), ("1023\n", 1023)])
def test_numa_node_is_read_through_the_bus_link(tmp_path, text, node):
    pci_device(tmp_path, BDF, text.strip())
    assert numa_node(BDF, tmp_path) == node
    assert parse_numa_node(BDF, text) == node


def test_minus_one_means_no_numa_affinity(tmp_path):
    pci_device(tmp_path, BDF, -1)
    assert numa_node(BDF, tmp_path) is None


def test_missing_device_is_an_error_naming_it_and_the_file(tmp_path):
    with pytest.raises(NumaNodeError, match=rf"PCI device 0000:3b:00\.0: cannot read .*{BDF}/numa_node"):
        numa_node(BDF, tmp_path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "numa_node is '', not a number"),
        ("node0", "numa_node is 'node0', not a number"),
        ("-2", "numa_node is -2, outside -1 \\(none\\) and 0 to 1023"),
        ("1024", "numa_node is 1024, outside -1 \\(none\\) and 0 to 1023"),
    ],
)
def test_values_that_are_no_numa_node_are_errors(text, message):
    with pytest.raises(NumaNodeError, match=rf"PCI device 0000:3b:00\.0: {message}"):
        parse_numa_node(BDF, text)


@pytest.mark.parametrize("bdf", ["0000:3B:00.0", "3b:00.0", "../../etc"])
def test_bad_bus_id_names_no_path(tmp_path, bdf):
    with pytest.raises(NumaNodeError, match="is not of the form"):
        numa_node(bdf, tmp_path)


def test_the_same_numa_sample_is_valid_and_shown_in_the_docs():
    from pathlib import Path

    import kubernetes_validate
    import yaml
    from vke_gpu_dra_core import facts

    repo = Path(__file__).resolve().parents[3]
    objects = list(yaml.safe_load_all((repo / "driver/docs/samples/gpu-nic-same-numa.yaml").read_text()))
    for obj in objects:
        for version in ("1.34.0", "1.37.0"):
            kubernetes_validate.validate(obj, version, strict=True)
    template, pod = objects
    devices = template["spec"]["spec"]["devices"]
    assert devices["constraints"] == [{"requests": ["gpu", "nic"], "matchAttribute": facts.ATTR_NUMA_NODE}]
    assert devices["requests"][0]["exactly"]["deviceClassName"] == facts.DEVICE_CLASS_GPU.name
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template["metadata"]["name"]
    shown = (repo / "driver/docs/devices.md").read_text().split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(shown) == devices
