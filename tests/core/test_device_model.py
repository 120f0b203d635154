from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device, PreparedDevice, Version, binary_si, render_attribute
from vke_gpu_dra_core.discovery import normalize
from vke_gpu_dra_core.discovery.devices import GpuFacts, mig_device
from vke_gpu_dra_testing.fake_apiserver import MAX_ATTRS_AND_CAPS


def test_binary_si_uses_largest_exact_suffix():
    assert binary_si(42949672960) == "40Gi"
    assert binary_si(85520809984) == "81559Mi"
    assert binary_si(25769803776) == "24Gi"
    assert binary_si(14) == "14"
    assert binary_si(0) == "0"


def test_attributes_render_in_v1_shape():
    assert render_attribute(True) == {"bool": True}
    assert render_attribute(3) == {"int": 3}
    assert render_attribute("gpu") == {"string": "gpu"}
    assert render_attribute(Version("8.0.0")) == {"version": "8.0.0"}


def test_slice_entry_renders_attributes_and_capacity():
    dev = Device(
        name="gpu-0",
        device_type="gpu",
        uuid="GPU-1",
        attributes={facts.ATTR_TYPE: "gpu", facts.ATTR_CUDA_COMPUTE_CAPABILITY: Version("8.0.0")},
        capacity={facts.CAPACITY_MEMORY: 24 * 2**30},
    )
    assert dev.slice_entry() == {
        "name": "gpu-0",
        "attributes": {"cudaComputeCapability": {"version": "8.0.0"}, "type": {"string": "gpu"}},
        "capacity": {"memory": {"value": "24Gi"}},
    }


def test_prepared_device_round_trips_json():
    dev = PreparedDevice(("gpu",), "node-a", "gpu-0", ("k8s.gpu.nvidia.com/device=gpu-0",))
    assert PreparedDevice.from_json(dev.to_json()) == dev


def test_device_classes_match_nvidia_selectors():
    assert facts.DEVICE_CLASS_GPU.cel_expression == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    assert facts.DEVICE_CLASS_MIG.manifest()["metadata"] == {"name": "mig.nvidia.com"}


def test_binary_si_falls_back_to_the_decimal_form_the_apiserver_returns():
    # Without a binary suffix the apiserver parses the number as DecimalSI and returns it canonically.
    assert binary_si(12_345_000) == "12345k"
    assert binary_si(1000) == "1k"
    assert binary_si(3_000_000_000) == "3G"
    assert binary_si(1536) == "1536"
    assert binary_si(1_024_000) == "1000Ki"


def test_the_largest_device_stays_within_the_apiserver_limit():
    """A MIG device on a full-height placement carries every attribute and the most capacities."""
    parent = GpuFacts(
        minor=0,
        uuid="GPU-parent",
        product_name="NVIDIA H200",
        brand="Nvidia",
        architecture="Hopper",
        cuda_compute_capability=Version("9.0.0"),
        driver_version=Version("570.124.6"),
        cuda_driver_version=Version("12.8.0"),
        pcie_bus_id="0000:18:00.0",
        pcie_root="pci0000:17",
        memory_bytes=141 * 2**30,
        addressing_mode="HMM",
        numa_node=1,
    )
    capacity = normalize.mig_capacity(
        multiprocessors=132,
        copy_engines=8,
        decoders=7,
        encoders=0,
        jpeg_engines=7,
        ofa_engines=1,
        memory_mib=140 * 1024,
        placement_start=0,
        placement_size=8,
    )
    mig = mig_device(
        parent, name="gpu-0-mig-0-0-8", uuid="MIG-a", profile="7g.141gb", capacity=capacity, caps_nodes=()
    )
    for name in (
        facts.ATTR_PCIE_BUS_ID,
        facts.ATTR_PCI_BUS_ID,
        facts.ATTR_PCIE_ROOT,
        facts.ATTR_ADDRESSING_MODE,
        facts.ATTR_NUMA_NODE,
    ):
        assert name in mig.attributes
    assert mig.attributes[facts.ATTR_NUMA_NODE] == 1
    assert len(mig.attributes) + len(mig.capacity) == 30 <= MAX_ATTRS_AND_CAPS
