from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device, PreparedDevice, Version, binary_si, render_attribute


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
