"""The typed stack configuration: frozen dataclasses, one per section, and the errors a load reports.

Each field of a section is filled from one row of the key table (`keys.KEYS`): the row names the field,
or it is derived from the key's name (`nodePool.minReplicas` -> `NodePoolConfig.min_replicas`). The few
fields no row fills are computed by a cross-field rule (`reader.DERIVED`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from vke_gpu_dra_core import dra_gates, facts, featuregates, imageref
from vke_gpu_dra_core.versions import parse_major_minor

PROJECT: Final = "vke-gpu-dra"


class SecretStr:
    """A secret string; its value is only reachable through `reveal()`."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "SecretStr('[secret]')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretStr) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class Issue:
    """One invalid value: the key, the value as given and what is allowed."""

    key: str
    value: str
    allowed: str

    def __str__(self) -> str:
        # A provider key is kept in parentheses (`(volcengine:region)`) and shown as it is written.
        shown = (
            self.key[1:-1] if self.key.startswith("(") and self.key.endswith(")") else f"{PROJECT}:{self.key}"
        )
        return f"{shown} = {self.value}: allowed: {self.allowed}"


class StackConfigError(ValueError):
    """All problems of a stack configuration, one line each."""

    def __init__(self, issues: Sequence[Issue]) -> None:
        self.issues = tuple(issues)
        lines = "\n".join(f"  - {i}" for i in self.issues)
        super().__init__(f"invalid stack configuration ({len(self.issues)} problem(s)):\n{lines}")


@dataclass(frozen=True)
class Label:
    key: str
    value: str


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class VolcengineAccess:
    """Credentials and endpoint the runtime-pinning resource uses (the provider's own config keys)."""

    region: str
    access_key: SecretStr | None = None
    secret_key: SecretStr | None = None
    session_token: SecretStr | None = None
    endpoint: str = ""


@dataclass(frozen=True)
class NetworkConfig:
    existing_vpc_id: str
    existing_subnet_ids: tuple[str, ...]
    existing_security_group_id: str
    vpc_cidr: str
    zone_ids: tuple[str, ...]
    subnet_cidrs: tuple[str, ...]
    nat_spec: str
    eip_bandwidth: int
    eip_billing_type: str
    ssh_ingress_cidrs: tuple[str, ...]

    @property
    def use_existing(self) -> bool:
        return bool(self.existing_vpc_id)


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    kubernetes_version: str
    #: Ask VKE for a kubernetes_version line its docs do not list yet (`vke_releases`).
    force_kubernetes_version: bool
    pod_network_mode: str
    pod_cidrs: tuple[str, ...]
    max_pods_per_node: int
    service_cidr: str
    api_server_public_access: bool
    api_server_bandwidth: int
    api_server_billing_type: str
    delete_protection: bool
    kubeconfig_valid_hours: int


@dataclass(frozen=True)
class NodePoolConfig:
    name: str
    instance_types: tuple[str, ...]
    containerd_version: str
    key_pair_name: str
    password: SecretStr | None
    image_id: str
    instance_charge_type: str
    system_volume_type: str
    system_volume_size: int
    data_volume_type: str
    data_volume_size: int
    min_replicas: int
    max_replicas: int
    desired_replicas: int
    labels: tuple[Label, ...]
    taints: tuple[Taint, ...]
    hpc_cluster_id: str
    readiness_timeout_minutes: int

    @property
    def all_labels(self) -> tuple[Label, ...]:
        """The procedure's DRA labels (from facts) followed by the user's other labels."""
        required = tuple(Label(k, v) for k, v in facts.REQUIRED_NODE_LABELS.items())
        extra = tuple(lb for lb in self.labels if lb.key not in facts.REQUIRED_NODE_LABELS)
        return required + extra


@dataclass(frozen=True)
class DriverConfig:
    implementation: str
    image_pull_policy: str
    image_pull_secrets: tuple[str, ...]
    device_source: str
    simulated_gpus: int
    simulated_product: str
    kubelet_plugin_on_all_nodes: bool
    nvidia_chart_version: str
    timeout_seconds: int
    nvidia_driver_root: str = "/"
    #: Seconds between two checks of a node's prepared claims against the API server (the chart's value).
    claim_reconcile_interval_seconds: int = 600
    #: Feature gates set explicitly (name -> enabled), from driver.featureGates.
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    #: driver.extendedResource: "auto", "on" or "off" (see StackConfig.gpu_extended_resource).
    extended_resource: str = "auto"
    #: GPU health (python): XIDs ignored on top of NVIDIA's list ("74,79"), and the recovery window.
    additional_xids_to_ignore: str = ""
    health_recovery_window_seconds: int = 300


BUILD_CR: Final = "cr"
BUILD_KIND: Final = "kind"


@dataclass(frozen=True)
class DriverImageConfig:
    """Where the python driver's image comes from: a given reference, a CR build or a kind build."""

    image: imageref.ImageReference | None
    build: str  # BUILD_CR, BUILD_KIND or "" (an image is given, or the nvidia chart's own)
    kind_cluster: str
    registry_name: str
    registry_create: bool
    registry_edition: str
    registry_project: str
    registry_namespace: str
    registry_repository: str


@dataclass(frozen=True)
class SampleConfig:
    enabled: bool
    namespace: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    #: sample.classicDeployment: "auto", "on" or "off" (gpu-test-classic; see components/stack.py).
    classic_deployment: str = "auto"


TARGET_VKE: Final = "vke"
TARGET_EXISTING: Final = "existing-cluster"


@dataclass(frozen=True)
class StackConfig:
    target: str
    production: bool
    name_prefix: str
    network: NetworkConfig
    cluster: ClusterConfig
    node_pool: NodePoolConfig
    driver: DriverConfig
    sample: SampleConfig
    kubeconfig: SecretStr | None = None
    kubeconfig_path: str = ""
    kubeconfig_context: str = ""
    volcengine: VolcengineAccess | None = field(default=None)
    driver_image: DriverImageConfig | None = None
    #: The stack's extra GPU catalog rows as given (the capacity check and the policy pack parse them).
    gpu_instance_types: str = ""

    @property
    def provisions_vke(self) -> bool:
        return self.target == TARGET_VKE

    @property
    def gpu_extended_resource(self) -> bool:
        """Whether gpu.nvidia.com maps nvidia.com/gpu: driver.extendedResource, where 'auto' means
        cluster.kubernetesVersion is one whose DRAExtendedResource gate is on by default (1.36 or later)."""
        return maps_gpu_extended_resource(self.driver.extended_resource, self.cluster.kubernetes_version)

    @property
    def slice_fields(self) -> frozenset[str]:
        """The optional ResourceSlice fields a cluster of cluster.kubernetesVersion keeps by default
        (`dra_gates.SLICE_FIELDS`: taints, allowMultipleAllocations, bindingConditions, sharedCounters);
        the driver finds the same on its server at start, by dry-runs."""
        version = parse_major_minor(self.cluster.kubernetes_version)
        return dra_gates.slice_fields_kept(version) if version is not None else frozenset()

    @property
    def gpus_shared_by_memory(self) -> bool:
        """Whether GPUs are published as consumable shares: the driver gate ConsumableShares on and a
        cluster that keeps `allowMultipleAllocations` (1.36 or later); else each claim takes whole GPUs."""
        gate = self.driver.feature_gates.get(featuregates.CONSUMABLE_SHARES, False)
        return bool(gate) and "allowMultipleAllocations" in self.slice_fields


def maps_gpu_extended_resource(mode: str, kubernetes_version: str) -> bool:
    """driver.extendedResource `mode` ("auto", "on" or "off") on a cluster of `kubernetes_version`:
    'auto' maps nvidia.com/gpu from the version whose DRAExtendedResource gate is on by default (1.36)."""
    if mode != "auto":
        return mode == "on"
    version = parse_major_minor(kubernetes_version)
    return version is not None and version >= facts.EXTENDED_RESOURCE_MIN_KUBERNETES_VERSION


#: Section name (as a key row names it) -> its dataclass; "" is StackConfig's own fields.
SECTIONS: Final[Mapping[str, type]] = {
    "": StackConfig,
    "network": NetworkConfig,
    "cluster": ClusterConfig,
    "node_pool": NodePoolConfig,
    "driver": DriverConfig,
    "driver_image": DriverImageConfig,
    "sample": SampleConfig,
    "volcengine": VolcengineAccess,
}
