import pytest
from vke_gpu_dra.config import PluginConfigError, parse_config
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Version
from vke_gpu_dra_core.discovery import DeviceSource
from vke_gpu_dra_core.discovery.simulated import SimulatedSource, numa_layout, parse_numa_nodes
from vke_gpu_dra_core.profiles import UnknownProductError

from tests.driver.slice_check import assert_publishable

FULL_GPU_ATTRIBUTES = {
    facts.ATTR_TYPE,
    facts.ATTR_UUID,
    facts.ATTR_PRODUCT_NAME,
    facts.ATTR_BRAND,
    facts.ATTR_ARCHITECTURE,
    facts.ATTR_CUDA_COMPUTE_CAPABILITY,
    facts.ATTR_DRIVER_VERSION,
    facts.ATTR_CUDA_DRIVER_VERSION,
    facts.ATTR_PCIE_BUS_ID,
    facts.ATTR_PCI_BUS_ID,
    facts.ATTR_PCIE_ROOT,
}


def test_is_a_device_source():
    assert isinstance(SimulatedSource(1, "NVIDIA A30", "n"), DeviceSource)


def test_a30_devices_have_the_nvidia_attribute_set():
    result = SimulatedSource(2, "NVIDIA A30", "192.168.2.8").discover()
    assert result.problems == []
    assert [d.name for d in result.devices] == ["gpu-0", "gpu-1"]
    dev = result.devices[0]
    assert set(dev.attributes) == FULL_GPU_ATTRIBUTES
    assert dev.simulated and dev.minor is None and dev.device_nodes == ()
    assert dev.device_type == facts.DEVICE_TYPE_GPU
    assert dev.attributes[facts.ATTR_TYPE] == "gpu"
    assert dev.attributes[facts.ATTR_PRODUCT_NAME] == "NVIDIA A30"
    assert dev.attributes[facts.ATTR_ARCHITECTURE] == "Ampere"
    assert dev.attributes[facts.ATTR_BRAND] == "Nvidia"
    assert dev.attributes[facts.ATTR_CUDA_COMPUTE_CAPABILITY] == Version("8.0.0")
    assert dev.attributes[facts.ATTR_DRIVER_VERSION] == Version("570.124.6")
    assert dev.attributes[facts.ATTR_CUDA_DRIVER_VERSION] == Version("12.8.0")
    assert dev.attributes[facts.ATTR_UUID] == dev.uuid and dev.uuid.startswith("GPU-")
    assert dev.slice_entry()["capacity"] == {"memory": {"value": "24Gi"}}


def test_uuids_are_stable_per_node_and_differ_between_nodes():
    a1 = [d.uuid for d in SimulatedSource(4, "NVIDIA A30", "node-a").discover().devices]
    a2 = [d.uuid for d in SimulatedSource(4, "NVIDIA A30", "node-a").discover().devices]
    b = [d.uuid for d in SimulatedSource(4, "NVIDIA A30", "node-b").discover().devices]
    assert a1 == a2
    assert len(set(a1)) == 4
    assert not set(a1) & set(b)


def test_uuid_is_stable_across_processes():
    # sha256-seeded: a fixed node name always yields the same first UUID (not Python's randomised hash()).
    import subprocess
    import sys

    code = (
        "from vke_gpu_dra_core.discovery.simulated import SimulatedSource;"
        "print(SimulatedSource(1, 'NVIDIA A30', 'node-a').discover().devices[0].uuid)"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1


def test_bus_ids_and_roots_are_distinct_and_plausible():
    devices = SimulatedSource(16, "NVIDIA H100 80GB HBM3", "n").discover().devices
    buses = [d.attributes[facts.ATTR_PCIE_BUS_ID] for d in devices]
    roots = [d.attributes[facts.ATTR_PCIE_ROOT] for d in devices]
    assert len(set(buses)) == 16 and len(set(roots)) == 16
    assert buses[0] == "0000:18:00.0" and roots[0] == "pci0000:17"
    assert buses[8] == "0001:18:00.0"


@pytest.mark.parametrize("product", ["NVIDIA A30", "NVIDIA H200", "Tesla T4", "NVIDIA L20"])
def test_devices_are_publishable(product):
    assert_publishable(SimulatedSource(8, product, "node-a").discover().devices)


def test_zero_devices_is_allowed():
    assert SimulatedSource(0, "NVIDIA A30", "n").discover().devices == []


@pytest.mark.parametrize("count", [-1, 129])
def test_bad_count_names_the_range(count):
    with pytest.raises(ValueError, match=rf"between 0 and 128, got {count}"):
        SimulatedSource(count, "NVIDIA A30", "n")


def test_unknown_product_is_rejected_up_front():
    with pytest.raises(UnknownProductError, match="known products"):
        SimulatedSource(1, "NVIDIA X1", "n")


def test_empty_node_name_is_rejected():
    with pytest.raises(ValueError, match="node name"):
        SimulatedSource(1, "NVIDIA A30", "")


def numa_of(devices):
    return [d.attributes.get(facts.ATTR_NUMA_NODE) for d in devices]


def test_no_numa_node_unless_configured():
    assert numa_of(SimulatedSource(4, "NVIDIA A30", "n").discover().devices) == [None] * 4


@pytest.mark.parametrize(
    ("nodes", "published"),
    [((0,), [0, 0, 0, 0]), ((0, 0, 1, 1), [0, 0, 1, 1]), ((1, None, 1, None), [1, None, 1, None])],
)
def test_numa_nodes_one_for_all_or_one_per_gpu(nodes, published):
    devices = SimulatedSource(4, "NVIDIA A30", "n", numa_nodes=nodes).discover().devices
    assert numa_of(devices) == published
    entry = devices[0].slice_entry()["attributes"]
    assert entry.get(facts.ATTR_NUMA_NODE) == (None if published[0] is None else {"int": published[0]})
    assert_publishable(devices)


@pytest.mark.parametrize(
    ("text", "nodes"), [("", ()), ("0", (0,)), ("0, 0,1,1", (0, 0, 1, 1)), ("-1,3", (None, 3))]
)
def test_numa_node_lists_parse(text, nodes):
    assert parse_numa_nodes(text) == nodes


@pytest.mark.parametrize(
    ("text", "message"),
    [("a", "'a' is not a number"), ("0,,1", "'' is not a number"), ("-2", "-2 is out of range"),
     ("1024", "1024 is out of range")],
)  # fmt: skip
def test_bad_numa_node_lists_say_what_is_allowed(text, message):
    with pytest.raises(ValueError, match=rf"{message}; expected one NUMA node for every GPU, or a comma"):
        parse_numa_nodes(text)


def test_numa_node_list_of_the_wrong_length_is_refused():
    with pytest.raises(
        ValueError, match="3 NUMA nodes for 4 simulated GPUs; expected one NUMA node for every"
    ):
        SimulatedSource(4, "NVIDIA A30", "n", numa_nodes=(0, 1, 1))
    with pytest.raises(ValueError, match="NUMA node 1024 is out of range"):
        numa_layout(2, (0, 1024))


def test_numa_nodes_flag_and_its_errors():
    base = ["--node-name", "n", "--device-source", "simulated", "--simulated-gpus", "4"]
    assert parse_config(base, environ={}).simulated_numa_nodes == ()
    assert parse_config(base, environ={"SIMULATED_NUMA_NODES": "0,0,1,1"}).simulated_numa_nodes == (
        0,
        0,
        1,
        1,
    )
    with pytest.raises(
        PluginConfigError,
        match=r"invalid value 'x' for --simulated-numa-nodes \[env SIMULATED_NUMA_NODES\]: 'x' is not a "
        "number",
    ):
        parse_config([*base, "--simulated-numa-nodes", "x"], environ={})
    with pytest.raises(
        PluginConfigError,
        match=r"--simulated-numa-nodes \(env SIMULATED_NUMA_NODES\) does not fit --simulated-gpus \(env "
        r"SIMULATED_GPUS\): 2 NUMA nodes for 4 simulated GPUs",
    ):
        parse_config([*base, "--simulated-numa-nodes", "0,1"], environ={})
    # Only simulated mode reads it.
    assert (
        parse_config(["--node-name", "n", "--simulated-numa-nodes", "0,1"], environ={}).device_source
        == "nvml"
    )
