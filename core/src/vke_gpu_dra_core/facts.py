"""Facts shared by the driver, its Helm chart tests, the Pulumi program and the policy pack.

This module is the single source of truth for names that must agree across the project:
the DRA driver name, the attribute names it publishes, the DeviceClasses that select its
devices, the CDI vendor, and the node labels of the VKE DRA procedure. It imports nothing
outside the standard library so that every part of the project can depend on it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

#: Name of the DRA driver (NVIDIA's gpu.nvidia.com, so workloads written for it run unchanged).
DRIVER_NAME: Final = "gpu.nvidia.com"

#: Namespace the driver is installed into (the procedure's `--namespace`).
DRIVER_NAMESPACE: Final = "nvidia-dra-driver-gpu"
#: NVIDIA's Helm chart of its DRA driver (the procedure's `helm install nvidia-dra-driver-gpu ...`), which
#: is also the release's name.
NVIDIA_CHART: Final = "nvidia-dra-driver-gpu"
#: The Helm repository NVIDIA publishes it in.
NVIDIA_CHART_REPO: Final = "https://helm.ngc.nvidia.com/nvidia"

#: Where the driver's devices come from (`--device-source`, stack config `driver.deviceSource`).
DeviceSource = Literal["nvml", "simulated"]
DEVICE_SOURCES: Final[tuple[DeviceSource, ...]] = get_args(DeviceSource)

#: CDI vendor and classes (NVIDIA: "k8s." + driver name; classes "device" and "claim").
CDI_VENDOR: Final = f"k8s.{DRIVER_NAME}"
CDI_CLASS_DEVICE: Final = "device"
CDI_CLASS_CLAIM: Final = "claim"

# --- attribute and capacity names published in ResourceSlices (unqualified => driver domain) ---
ATTR_TYPE: Final = "type"
ATTR_UUID: Final = "uuid"
ATTR_PARENT_UUID: Final = "parentUUID"
ATTR_PROFILE: Final = "profile"
ATTR_PRODUCT_NAME: Final = "productName"
ATTR_BRAND: Final = "brand"
ATTR_ARCHITECTURE: Final = "architecture"
ATTR_CUDA_COMPUTE_CAPABILITY: Final = "cudaComputeCapability"
ATTR_DRIVER_VERSION: Final = "driverVersion"
ATTR_CUDA_DRIVER_VERSION: Final = "cudaDriverVersion"
ATTR_PCIE_BUS_ID: Final = "pcieBusID"
#: Standard Kubernetes attribute (qualified with its own domain).
ATTR_PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"

CAPACITY_MEMORY: Final = "memory"
CAPACITY_MULTIPROCESSORS: Final = "multiprocessors"
CAPACITY_COPY_ENGINES: Final = "copyEngines"
CAPACITY_DECODERS: Final = "decoders"
CAPACITY_ENCODERS: Final = "encoders"
CAPACITY_JPEG_ENGINES: Final = "jpegEngines"
CAPACITY_OFA_ENGINES: Final = "ofaEngines"
CAPACITY_MEMORY_SLICE_PREFIX: Final = "memorySlice"

#: Values of the `type` attribute.
DEVICE_TYPE_GPU: Final = "gpu"
DEVICE_TYPE_MIG: Final = "mig"

# --- node labels of the VKE DRA procedure ---
LABEL_GPU_SCHEDULE: Final = "vke.node.gpu.schedule"
LABEL_GPU_SCHEDULE_DRA: Final = "nvidia-dra"
#: Other values VKE gives the schedule label (device plugin, mGPU); forbidden beside DRA.
LABEL_GPU_SCHEDULE_CONFLICTING: Final = ("nvidia", "mgpu")
LABEL_GPU_PRESENT: Final = "nvidia.com/gpu.present"
LABEL_GPU_PRESENT_VALUE: Final = "true"
#: Labels every DRA GPU node pool must carry.
REQUIRED_NODE_LABELS: Final = {
    LABEL_GPU_SCHEDULE: LABEL_GPU_SCHEDULE_DRA,
    LABEL_GPU_PRESENT: LABEL_GPU_PRESENT_VALUE,
}

#: Minimum versions the procedure requires.
MIN_KUBERNETES_VERSION: Final = (1, 34)
MIN_CONTAINERD_VERSION: Final = (2, 1)


@dataclass(frozen=True)
class DeviceClassSpec:
    """A DeviceClass that selects this driver's devices of one `type`."""

    name: str
    device_type: str

    @property
    def cel_expression(self) -> str:
        return device_type_selector(self.device_type)

    def manifest(self, api_version: str = "resource.k8s.io/v1") -> dict[str, object]:
        """The DeviceClass object as Kubernetes JSON."""
        return {
            "apiVersion": api_version,
            "kind": "DeviceClass",
            "metadata": {"name": self.name},
            "spec": {"selectors": [{"cel": {"expression": self.cel_expression}}]},
        }


def device_type_selector(device_type: str, driver: str = DRIVER_NAME) -> str:
    """CEL selecting `driver`'s devices whose `type` attribute equals `device_type` (NVIDIA's exact form)."""
    return f"device.driver == '{driver}' && device.attributes['{driver}'].{ATTR_TYPE} == '{device_type}'"


#: The DeviceClasses of NVIDIA's chart for GPUs (compute domains are not part of this project).
DEVICE_CLASSES: Final = (
    DeviceClassSpec(name="gpu.nvidia.com", device_type=DEVICE_TYPE_GPU),
    DeviceClassSpec(name="mig.nvidia.com", device_type=DEVICE_TYPE_MIG),
)
DEVICE_CLASS_GPU: Final = DEVICE_CLASSES[0]
DEVICE_CLASS_MIG: Final = DEVICE_CLASSES[1]
