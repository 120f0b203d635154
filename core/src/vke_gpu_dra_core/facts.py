"""Facts shared by the driver, its Helm chart tests, the Pulumi program and the policy pack.

This module is the single source of truth for names that must agree across the project:
the DRA driver name, the attribute names it publishes, the DeviceClasses that select its
devices, the CDI vendor, and the node labels of the VKE DRA procedure. It imports nothing
outside the standard library so that every part of the project can depend on it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from . import dra_gates

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
#: The class of this driver's base spec, one CDI device per device of the node, written at start for
#: the claims without edits of their own. Not NVIDIA's "device": a base spec NVIDIA's plugin left in the
#: same directory defines those names, and a name defined twice is dropped by the runtime.
CDI_CLASS_BASE: Final = "base"

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
#: NVIDIA 25.8.1's bus ID attribute (driver domain); kept beside the standard one so selectors written for
#: 25.8.1 still match.
ATTR_PCIE_BUS_ID: Final = "pcieBusID"
#: Standard Kubernetes attributes (qualified with their own domain, k8s.io/dynamic-resource-allocation's
#: `deviceattribute` package).
ATTR_PCIE_ROOT: Final = "resource.kubernetes.io/pcieRoot"
#: The PCI bus ID in extended BDF form (`0000:3b:00.0`), as NVIDIA's driver publishes it since 25.12.
ATTR_PCI_BUS_ID: Final = "resource.kubernetes.io/pciBusID"
#: The NUMA node of the device's PCI function (KEP-6072, GA in 1.37; NVIDIA's driver since v0.5.0), an int;
#: omitted where the device has no NUMA affinity (sysfs `numa_node` -1). Only a name to the API server, so
#: 1.34 keeps it as well.
ATTR_NUMA_NODE: Final = "resource.kubernetes.io/numaNode"
#: Linux's largest NUMA node number + 1 (k8s.io/dynamic-resource-allocation `deviceattribute` rejects more).
MAX_NUMA_NODES: Final = 1024
#: How the GPU addresses system memory on coherent-memory platforms (NVIDIA's driver since 25.12):
#: `HMM`, `ATS` or `None` (supported but inactive); omitted where NVML does not support the query.
ATTR_ADDRESSING_MODE: Final = "addressingMode"

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

# --- extended resources backed by DRA (KEP-5004, DeviceClass.spec.extendedResourceName) ---
#: The classic device plugin's resource, which the gpu.nvidia.com DeviceClass maps (as NVIDIA's chart does
#: since 25.12): a pod asking `nvidia.com/gpu: 1` and no claim gets one of the driver's GPUs.
GPU_EXTENDED_RESOURCE: Final = "nvidia.com/gpu"
#: The first Kubernetes release whose DRAExtendedResource gate is on by default (beta); 1.34 and 1.35
#: know the field (alpha) but drop it unless the gate is on.
EXTENDED_RESOURCE_MIN_KUBERNETES_VERSION: Final = dra_gates.RELEASES[dra_gates.EXTENDED_RESOURCE][1]
#: The program's sample (the procedure's "Validating results"): a Deployment whose pod's claim comes from a
#: ResourceClaimTemplate asking one GPU of gpu.nvidia.com.
SAMPLE_DEPLOYMENT: Final = "gpu-test"
SAMPLE_CLAIM_TEMPLATE: Final = "single-gpu"
#: The program's sample Deployment written the classic way (`resources.limits: nvidia.com/gpu: 1`, no
#: claim), deployed where gpu.nvidia.com maps nvidia.com/gpu (stack key sample.classicDeployment).
SAMPLE_CLASSIC_DEPLOYMENT: Final = "gpu-test-classic"
#: The annotation the scheduler puts on the ResourceClaim it creates for a pod's extended resources.
EXTENDED_RESOURCE_CLAIM_ANNOTATION: Final = "resource.kubernetes.io/extended-resource-claim"
#: The annotation on a ResourceClaim made from a pod's ResourceClaimTemplate: the pod's name for the claim
#: (`pod.spec.resourceClaims[].name`, k8s.io/api resource/v1 `PodResourceClaimAnnotation`).
POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"


#: GPU health problems, each a device-taint key `<driver>/<kind>` as NVIDIA's plugin names them
#: (cmd/gpu-kubelet-plugin/device_health.go): `gpu.nvidia.com/xid`, `gpu.nvidia.com/gpu-lost`,
#: `gpu.nvidia.com/unmonitored`.
HealthProblem = Literal["xid", "gpu-lost", "unmonitored"]
HEALTH_PROBLEMS: Final[tuple[HealthProblem, ...]] = get_args(HealthProblem)
#: The annotation on a node's slices listing its devices with health problems (`<driver>/device-health`).
HEALTH_ANNOTATION_SUFFIX: Final = "device-health"


def health_taint_key(problem: HealthProblem, driver: str = DRIVER_NAME) -> str:
    return f"{driver}/{problem}"


def health_annotation_key(driver: str = DRIVER_NAME) -> str:
    return f"{driver}/{HEALTH_ANNOTATION_SUFFIX}"


@dataclass(frozen=True)
class DeviceClassSpec:
    """A DeviceClass that selects this driver's devices of one `type`."""

    name: str
    device_type: str
    #: The extended resource this class maps when the mapping is on (None: the class maps none).
    extended_resource_name: str | None = None

    @property
    def cel_expression(self) -> str:
        return device_type_selector(self.device_type)

    def manifest(
        self, api_version: str = "resource.k8s.io/v1", *, extended_resource: bool = False
    ) -> dict[str, object]:
        """The DeviceClass object as Kubernetes JSON; `extended_resource` adds `spec.extendedResourceName`
        to a class that maps one (NVIDIA's chart does so for gpu.nvidia.com with resource.k8s.io/v1)."""
        spec: dict[str, object] = {"selectors": [{"cel": {"expression": self.cel_expression}}]}
        if extended_resource and self.extended_resource_name is not None:
            spec["extendedResourceName"] = self.extended_resource_name
        return {
            "apiVersion": api_version,
            "kind": "DeviceClass",
            "metadata": {"name": self.name},
            "spec": spec,
        }


def device_type_selector(device_type: str, driver: str = DRIVER_NAME) -> str:
    """CEL selecting `driver`'s devices whose `type` attribute equals `device_type` (NVIDIA's exact form)."""
    return f"device.driver == '{driver}' && device.attributes['{driver}'].{ATTR_TYPE} == '{device_type}'"


#: The DeviceClasses of NVIDIA's chart for GPUs (compute domains are not part of this project).
DEVICE_CLASSES: Final = (
    DeviceClassSpec(
        name="gpu.nvidia.com", device_type=DEVICE_TYPE_GPU, extended_resource_name=GPU_EXTENDED_RESOURCE
    ),
    DeviceClassSpec(name="mig.nvidia.com", device_type=DEVICE_TYPE_MIG),
)
DEVICE_CLASS_GPU: Final = DEVICE_CLASSES[0]
DEVICE_CLASS_MIG: Final = DEVICE_CLASSES[1]
