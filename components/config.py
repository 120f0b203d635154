"""Stack configuration: one typed, validated object, read before any resource is registered.

`KEYS` is the single source of truth for every project config key (type, default, description).
`Pulumi.yaml` declares the same keys; `pulumi_yaml_config()` renders that block and a test keeps
the two equal. `load()` reads the raw values (strings, as the Pulumi engine hands them over),
parses them by type, validates them as a whole and returns a frozen `StackConfig`, or raises one
`ConfigError` that lists every problem, each naming the key, the value and what is allowed.
Secret values (node password, kubeconfig, cloud credentials) are wrapped in `SecretStr` and never
appear in messages or reprs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

import yaml
from pulumi.runtime import config as runtime_config
from vke_gpu_dra_core import facts, featuregates, imageref

PROJECT: Final = "vke-gpu-dra"

ConfigType = Literal["string", "integer", "boolean", "array"]

TARGET_VKE: Final = "vke"
TARGET_EXISTING: Final = "existing-cluster"
IMPLEMENTATION_PYTHON: Final = "python"
IMPLEMENTATION_NVIDIA: Final = "nvidia"

PRIVATE_RANGES: Final = tuple(
    ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
_PRIVATE_TEXT: Final = "a CIDR inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16"


@dataclass(frozen=True)
class Key:
    """One project config key as declared in Pulumi.yaml."""

    name: str
    type: ConfigType
    default: Any
    description: str
    secret: bool = False


DEFAULT_SAMPLE_IMAGE: Final = "doc-cn-beijing.cr.volces.com/vke/gpu-burn:1.0"

KEYS: Final[tuple[Key, ...]] = (
    # --- stack-wide ---
    Key(
        "target",
        "string",
        TARGET_VKE,
        "What the stack deploys into: 'vke' creates network, VKE cluster and GPU node pool; "
        "'existing-cluster' creates no Volcengine resources and uses the kubeconfig below.",
    ),
    Key(
        "production",
        "boolean",
        False,
        "Marks a production stack: cluster and node pool are protected (pulumi protect).",
    ),
    Key(
        "gpuInstanceTypes",
        "string",
        "",
        "Extra GPU instance types for the capacity check and the policy pack, a JSON or YAML map shaped like "
        "the catalog's instanceTypes (core/src/vke_gpu_dra_core/gpu_catalog.yaml); validated there.",
    ),
    Key(
        "namePrefix",
        "string",
        "vke-gpu-dra",
        "Prefix of the names of the Volcengine resources (VPC, subnets, NAT, EIP, security group).",
    ),
    Key(
        "kubeconfig",
        "string",
        "",
        "target=existing-cluster: kubeconfig text of the cluster (set it with --secret).",
        secret=True,
    ),
    Key(
        "kubeconfigPath",
        "string",
        "",
        "target=existing-cluster: path of a kubeconfig file (alternative to kubeconfig).",
    ),
    Key(
        "kubeconfigContext",
        "string",
        "",
        "target=existing-cluster: kubeconfig context to use (empty: the current context).",
    ),
    # --- network ---
    Key(
        "network.existingVpcId",
        "string",
        "",
        "Use this VPC instead of creating one (set with existingSubnetIds and existingSecurityGroupId).",
    ),
    Key(
        "network.existingSubnetIds",
        "array",
        [],
        "Use these subnets (node and control-plane subnets) instead of creating them.",
    ),
    Key(
        "network.existingSecurityGroupId",
        "string",
        "",
        "Use this security group for the nodes instead of creating one.",
    ),
    Key("network.vpcCidr", "string", "192.168.0.0/16", "CIDR of the VPC that is created."),
    Key(
        "network.zoneIds",
        "array",
        ["cn-beijing-a"],
        "Availability zones, one subnet per zone (same order as subnetCidrs).",
    ),
    Key(
        "network.subnetCidrs",
        "array",
        ["192.168.0.0/20"],
        "Subnet CIDRs inside vpcCidr, one per zone in zoneIds.",
    ),
    Key("network.natSpec", "string", "Small", "NAT gateway specification."),
    Key("network.eipBandwidth", "integer", 10, "Bandwidth of the NAT gateway's EIP in Mbit/s."),
    Key("network.eipBillingType", "string", "PostPaidByTraffic", "Billing type of the NAT gateway's EIP."),
    Key(
        "network.sshIngressCidrs",
        "array",
        [],
        "CIDRs allowed to reach the nodes on TCP 22 (empty: no SSH rule).",
    ),
    # --- cluster ---
    Key("cluster.name", "string", "vke-gpu-dra", "Name of the VKE cluster."),
    Key("cluster.kubernetesVersion", "string", "1.34", "Kubernetes version (major.minor), 1.34 or later."),
    Key("cluster.podNetworkMode", "string", "VpcCniShared", "Pod network: VpcCniShared or Flannel."),
    Key("cluster.podCidrs", "array", ["172.20.0.0/16"], "Flannel only: pod CIDRs."),
    Key("cluster.maxPodsPerNode", "integer", 64, "Flannel only: pods per node (16, 32, 64, 128 or 256)."),
    Key("cluster.serviceCidr", "string", "172.30.0.0/18", "Service CIDR of the cluster."),
    Key(
        "cluster.apiServerPublicAccess",
        "boolean",
        True,
        "Give the API server a public endpoint (the kubeconfig is then of type Public).",
    ),
    Key("cluster.apiServerBandwidth", "integer", 10, "Bandwidth of the API server's public EIP in Mbit/s."),
    Key(
        "cluster.apiServerBillingType",
        "string",
        "PostPaidByTraffic",
        "Billing type of the API server's public EIP: PostPaidByTraffic or PostPaidByBandwidth.",
    ),
    Key("cluster.deleteProtection", "boolean", False, "Turn on VKE delete protection for the cluster."),
    Key("cluster.kubeconfigValidHours", "integer", 8760, "Validity of the generated kubeconfig in hours."),
    # --- GPU node pool ---
    Key(
        "nodePool.name",
        "string",
        "gpu-dra",
        "Name of the GPU node pool (2-63 ASCII letters, digits or '-'; the nodes carry it as a label value).",
    ),
    Key("nodePool.instanceTypes", "array", ["ecs.gni2.3xlarge"], "GPU ECS instance types of the pool."),
    Key(
        "nodePool.containerdVersion", "string", "2.1", "containerd version pinned on the pool, 2.1 or later."
    ),
    Key("nodePool.keyPairName", "string", "", "Log in to nodes with this ECS key pair (or set password)."),
    Key(
        "nodePool.password",
        "string",
        "",
        "Log in to nodes with this password (set it with --secret; alternative to keyPairName).",
        secret=True,
    ),
    Key("nodePool.imageId", "string", "", "Node image ID (empty: VKE's default image)."),
    Key("nodePool.instanceChargeType", "string", "PostPaid", "PostPaid or PrePaid."),
    Key("nodePool.systemVolumeType", "string", "ESSD_PL0", "System disk type."),
    Key("nodePool.systemVolumeSize", "integer", 100, "System disk size in GiB (20-2048)."),
    Key("nodePool.dataVolumeType", "string", "ESSD_PL0", "Data disk type."),
    Key(
        "nodePool.dataVolumeSize",
        "integer",
        200,
        "Data disk size in GiB (0: none; else 20-32768); it holds /var/lib/containerd.",
    ),
    Key("nodePool.minReplicas", "integer", 1, "Auto-scaling minimum number of nodes."),
    Key("nodePool.maxReplicas", "integer", 1, "Auto-scaling maximum number of nodes."),
    Key("nodePool.desiredReplicas", "integer", 1, "Desired number of nodes (between min and max)."),
    Key("nodePool.labels", "array", [], "Extra node labels as key=value (the DRA labels are always set)."),
    Key("nodePool.taints", "array", [], "Node taints as key=value:Effect or key:Effect."),
    Key("nodePool.hpcClusterId", "string", "", "HPC cluster ID (needed by ecs.hpcpni* types)."),
    Key(
        "nodePool.readinessTimeoutMinutes",
        "integer",
        30,
        "How long to wait for the pool's nodes to be Ready with containerd 2.1+.",
    ),
    # --- DRA driver ---
    Key(
        "driver.implementation",
        "string",
        IMPLEMENTATION_PYTHON,
        "DRA driver: 'python' (this repository's chart driver/chart) or 'nvidia' (NVIDIA's chart).",
    ),
    Key("driver.imagePullPolicy", "string", "IfNotPresent", "python: Always, IfNotPresent or Never."),
    Key("driver.imagePullSecrets", "array", [], "python: names of image pull secrets."),
    Key("driver.deviceSource", "string", "nvml", "python: 'nvml' (real GPUs) or 'simulated'."),
    Key("driver.simulatedGpus", "integer", 8, "python, simulated: number of simulated GPUs per node."),
    Key(
        "driver.simulatedProduct",
        "string",
        "NVIDIA A30",
        "python, simulated: product name of simulated GPUs.",
    ),
    Key(
        "driver.kubeletPluginOnAllNodes",
        "boolean",
        False,
        "python: run the kubelet plugin on every node instead of nodes labelled "
        "vke.node.gpu.schedule=nvidia-dra (demo clusters).",
    ),
    Key(
        "driver.nvidiaDriverRoot",
        "string",
        "/",
        "Host root of the NVIDIA driver ('/', or '/run/nvidia/driver' for a driver container); "
        "its libraries and nvidia-smi go into GPU containers through CDI.",
    ),
    Key("driver.nvidiaChartVersion", "string", "25.8.1", "nvidia: version of NVIDIA's chart."),
    Key("driver.timeoutSeconds", "integer", 600, "How long Helm waits for the driver release."),
    # --- driver image supply chain (components/driver_image.py, docs/image-supply-chain.md) ---
    Key(
        "driver.image",
        "string",
        "",
        "python: deploy this image (registry/path:tag or registry/path@sha256:<64 hex>) and build "
        "nothing (empty: build driver/Dockerfile, see driver.image.build).",
    ),
    Key(
        "driver.image.build",
        "string",
        "",
        "python: where the program builds the image: 'cr' (push to the Volcengine CR instance "
        "driver.registry.name; the default with target=vke) or 'kind:<cluster>' (local Docker "
        "daemon, then kind load docker-image).",
    ),
    Key(
        "driver.registry.name",
        "string",
        "",
        "build=cr: name of the Volcengine CR instance the image is pushed to (an existing one, or "
        "the one created with driver.registry.create).",
    ),
    Key(
        "driver.registry.create",
        "boolean",
        False,
        "build=cr: create the CR instance driver.registry.name (it is billed; off: use an existing one).",
    ),
    Key(
        "driver.registry.edition",
        "string",
        "Enterprise",
        "build=cr, create: CR edition of the new instance: Enterprise or Micro.",
    ),
    Key(
        "driver.registry.project",
        "string",
        "default",
        "build=cr, create: Volcengine project of the new instance (pulumi-volcengine 0.0.47 takes no "
        "charge type: the instance's chargeType is an output).",
    ),
    Key(
        "driver.registry.namespace",
        "string",
        "vke-gpu-dra",
        "build=cr: CR namespace the stack creates for the image.",
    ),
    Key(
        "driver.registry.repository",
        "string",
        "dra-gpu-kubelet-plugin",
        "build=cr: CR repository the stack creates in that namespace.",
    ),
    # --- driver feature gates (GPU sharing) ---
    Key(
        "driver.featureGates",
        "string",
        "",
        "Driver feature gates, Kubernetes syntax 'TimeSlicingSettings=true,MPSSupport=true' "
        "(NVIDIA's alpha gates for GpuConfig.sharing; both off by default); the chart's featureGates.",
    ),
    # --- sample workload ---
    Key("sample.enabled", "boolean", True, "Deploy the sample ResourceClaimTemplate and Deployment."),
    Key("sample.namespace", "string", "default", "Namespace of the sample (created unless 'default')."),
    Key("sample.image", "string", DEFAULT_SAMPLE_IMAGE, "Image of the sample container."),
    Key("sample.command", "array", ["sh"], "Command of the sample container."),
    Key("sample.args", "array", ["-c", "nvidia-smi -L; sleep 600"], "Arguments of the sample container."),
)

KEYS_BY_NAME: Final = {k.name: k for k in KEYS}

NAT_SPECS: Final = ("Small", "Medium", "Large", "Extra_Large_1", "Extra_Large_2")
EIP_BILLING_TYPES: Final = ("PostPaidByBandwidth", "PostPaidByTraffic")
POD_NETWORK_MODES: Final = ("VpcCniShared", "Flannel")
MAX_PODS_CHOICES: Final = (16, 32, 64, 128, 256)
VOLUME_TYPES: Final = ("ESSD_PL0", "ESSD_FlexPL", "PTSSD")
CHARGE_TYPES: Final = ("PostPaid", "PrePaid")
TAINT_EFFECTS: Final = ("NoSchedule", "NoExecute", "PreferNoSchedule")
PULL_POLICIES: Final = ("Always", "IfNotPresent", "Never")
DEVICE_SOURCES: Final = ("nvml", "simulated")

_VERSION_RE: Final = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?$")
_LABEL_NAME_RE: Final = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE_RE: Final = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
_DNS_SUBDOMAIN_RE: Final = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
_DNS_LABEL_RE: Final = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_INSTANCE_TYPE_RE: Final = re.compile(r"^ecs\.[a-z0-9-]+\.[a-z0-9-]+$")
#: Node pool names: VKE's name rule intersected with Kubernetes label values (the pool label's value).
_POOL_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,61}[A-Za-z0-9]$")
_NAME_RE: Final = re.compile(r"^[A-Za-z0-9\u4e00-\u9fa5][A-Za-z0-9\u4e00-\u9fa5-]{1,63}$")


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
        return f"{PROJECT}:{self.key} = {self.value}: allowed: {self.allowed}"


class ConfigError(ValueError):
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
    #: Feature gates set explicitly (name -> enabled), from driver.featureGates.
    feature_gates: Mapping[str, bool] = field(default_factory=dict)


BUILD_CR: Final = "cr"
BUILD_KIND: Final = "kind"
REGISTRY_EDITIONS: Final = ("Enterprise", "Micro")
#: Keys that were replaced, and by what.
REPLACED_KEYS: Final = {"driver.imageRepository": "driver.image", "driver.imageTag": "driver.image"}
#: CR instance names: lower-case letters, digits and '-', 3-30 characters, starting with a letter.
_CR_INSTANCE_RE: Final = re.compile(r"^[a-z][a-z0-9-]{1,28}[a-z0-9]$")
_CR_NAME_RE: Final = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
_KIND_CLUSTER_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,48}[a-z0-9])?$")


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

    @property
    def provisions_vke(self) -> bool:
        return self.target == TARGET_VKE


# ---------------------------------------------------------------------------------------------
# Pulumi.yaml rendering (one source of truth for defaults)


def pulumi_yaml_config() -> dict[str, dict[str, Any]]:
    """The `config:` block of Pulumi.yaml as it must be (typed project config)."""
    block: dict[str, dict[str, Any]] = {}
    for k in KEYS:
        entry: dict[str, Any] = {"type": k.type}
        if k.type == "array":
            entry["items"] = {"type": "string"}
        entry["default"] = list(k.default) if k.type == "array" else k.default
        entry["description"] = k.description
        block[k.name] = entry
    return block


# ---------------------------------------------------------------------------------------------
# Reading raw values


@dataclass(frozen=True)
class RawConfig:
    """Raw config as the engine provides it: full keys (`project:key`) to strings, plus secret keys."""

    values: Mapping[str, str]
    secret_keys: frozenset[str] = frozenset()
    environ: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_pulumi_runtime(cls) -> RawConfig:
        """Everything the running Pulumi program was given (set_all_config and PULUMI_CONFIG)."""
        merged: dict[str, str] = dict(runtime_config.get_config_env())
        merged.update(runtime_config.CONFIG.get())
        secret = set(runtime_config.get_config_secret_keys_env())
        secret |= {k for k in merged if runtime_config.is_config_secret(k)}
        env = {k: v for k, v in os.environ.items() if k.startswith("VOLCENGINE_")}
        return cls(values=merged, secret_keys=frozenset(secret), environ=env)


#: What `pulumi.Config.get_bool` accepts (the Python SDK compares with exactly these strings and raises
#: ConfigTypeError for anything else, "TRUE", "yes", "1" and "on" included).
BOOLEAN_TRUE: Final = ("true", "True")
BOOLEAN_FALSE: Final = ("false", "False")
BOOLEAN_ALLOWED: Final = "true or false"


def parse_bool(raw: object) -> bool | None:
    """A boolean config value as Pulumi's config reads it; None when it is not one.

    `raw` is the engine's string, or a bool where a caller already holds typed YAML or JSON.
    """
    if isinstance(raw, bool):
        return raw
    if raw in BOOLEAN_TRUE:
        return True
    if raw in BOOLEAN_FALSE:
        return False
    return None


def _show(key: Key | None, raw: object) -> str:
    if key is not None and key.secret:
        return "[secret]"
    return json.dumps(raw) if not isinstance(raw, str) else repr(raw)


class _Reader:
    def __init__(self, raw: RawConfig) -> None:
        self.raw = raw
        self.issues: list[Issue] = []

    def fail(self, key: str, value: object, allowed: str) -> None:
        self.issues.append(Issue(key, _show(KEYS_BY_NAME.get(key), value), allowed))

    def unknown_keys(self) -> None:
        prefix = f"{PROJECT}:"
        for full in sorted(self.raw.values):
            if not full.startswith(prefix):
                continue
            name = full[len(prefix) :]
            if name in REPLACED_KEYS:
                self.issues.append(Issue(name, "(set)", f"unset: replaced by {REPLACED_KEYS[name]}"))
            elif name not in KEYS_BY_NAME:
                self.issues.append(Issue(name, "(set)", "one of the keys declared in Pulumi.yaml"))

    def get(self, name: str) -> Any:
        key = KEYS_BY_NAME[name]
        raw = self.raw.values.get(f"{PROJECT}:{name}")
        if raw is None:
            return list(key.default) if key.type == "array" else key.default
        return self._parse(key, raw)

    def _parse(self, key: Key, raw: Any) -> Any:  # noqa: PLR0911 (one return per config type)
        default = list(key.default) if key.type == "array" else key.default
        if key.type == "string":
            if not isinstance(raw, str):
                self.fail(key.name, raw, "a string")
                return default
            return raw
        if key.type == "boolean":
            value = parse_bool(raw)
            if value is None:
                self.fail(key.name, raw, BOOLEAN_ALLOWED)
                return default
            return value
        if key.type == "integer":
            try:
                if isinstance(raw, bool):
                    raise ValueError
                return int(raw)
            except (TypeError, ValueError):
                self.fail(key.name, raw, "an integer")
                return default
        # array
        value = raw
        if isinstance(raw, str):
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                value = None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(key.name, raw, "a list of strings")
            return default
        return value

    def is_secret(self, name: str) -> bool:
        return f"{PROJECT}:{name}" in self.raw.secret_keys


def _version(text: str) -> tuple[int, int] | None:
    m = _VERSION_RE.match(text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def _fmt_version(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def _private_cidr(r: _Reader, key: str, text: str) -> ipaddress.IPv4Network | None:
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError:
        r.fail(key, text, f"a well-formed IPv4 CIDR (network address/prefix), {_PRIVATE_TEXT}")
        return None
    if not isinstance(net, ipaddress.IPv4Network) or not any(net.subnet_of(p) for p in PRIVATE_RANGES):
        r.fail(key, text, _PRIVATE_TEXT)
        return None
    return net


def _any_cidr(r: _Reader, key: str, text: str) -> None:
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError:
        r.fail(key, text, "a well-formed CIDR such as 203.0.113.0/24")


def _choice(r: _Reader, key: str, value: Any, choices: Sequence[Any]) -> None:
    if value not in choices:
        r.fail(key, value, "one of " + ", ".join(str(c) for c in choices))


def _int_range(r: _Reader, key: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        r.fail(key, value, f"an integer from {low} to {high}")


def _label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.match(prefix)):
        return False
    return bool(_LABEL_NAME_RE.match(name))


def _parse_labels(r: _Reader, name: str, items: Sequence[str]) -> tuple[Label, ...]:
    labels: list[Label] = []
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not _label_key_ok(k) or not _LABEL_VALUE_RE.match(v):
            r.fail(name, item, "key=value with a valid Kubernetes label key and value")
            continue
        required = facts.REQUIRED_NODE_LABELS.get(k)
        if required is not None and v != required:
            r.fail(name, item, f"{k}={required} (the DRA procedure's value) or leave it out")
            continue
        labels.append(Label(k, v))
    return tuple(labels)


def _parse_taints(r: _Reader, name: str, items: Sequence[str]) -> tuple[Taint, ...]:
    taints: list[Taint] = []
    for item in items:
        kv, sep, effect = item.rpartition(":")
        k, _, v = kv.partition("=")
        if not sep or not _label_key_ok(k) or not _LABEL_VALUE_RE.match(v) or effect not in TAINT_EFFECTS:
            r.fail(name, item, "key=value:Effect or key:Effect, Effect one of " + ", ".join(TAINT_EFFECTS))
            continue
        taints.append(Taint(k, v, effect))
    return tuple(taints)


def _secret(r: _Reader, name: str) -> SecretStr | None:
    value = r.get(name)
    if not value:
        return None
    if not r.is_secret(name):
        r.fail(name, value, f"a secret value: pulumi config set --secret {name} ...")
    return SecretStr(value)


def _network(r: _Reader, target: str) -> NetworkConfig:  # noqa: PLR0912 (a flat list of independent checks)
    vpc_id = r.get("network.existingVpcId")
    subnet_ids = tuple(r.get("network.existingSubnetIds"))
    sg_id = r.get("network.existingSecurityGroupId")
    vpc_cidr = r.get("network.vpcCidr")
    zones = tuple(r.get("network.zoneIds"))
    subnets = tuple(r.get("network.subnetCidrs"))
    cfg = NetworkConfig(
        existing_vpc_id=vpc_id,
        existing_subnet_ids=subnet_ids,
        existing_security_group_id=sg_id,
        vpc_cidr=vpc_cidr,
        zone_ids=zones,
        subnet_cidrs=subnets,
        nat_spec=r.get("network.natSpec"),
        eip_bandwidth=r.get("network.eipBandwidth"),
        eip_billing_type=r.get("network.eipBillingType"),
        ssh_ingress_cidrs=tuple(r.get("network.sshIngressCidrs")),
    )
    if target != TARGET_VKE:
        return cfg
    existing = {
        "network.existingVpcId": bool(vpc_id),
        "network.existingSubnetIds": bool(subnet_ids),
        "network.existingSecurityGroupId": bool(sg_id),
    }
    if any(existing.values()) and not all(existing.values()):
        for key, given in existing.items():
            if not given:
                r.fail(key, "", "set together with the other network.existing* keys (all three or none)")
    if all(existing.values()):
        if len(subnet_ids) > 6:
            r.fail("network.existingSubnetIds", list(subnet_ids), "1 to 6 subnet IDs")
        return cfg
    vpc = _private_cidr(r, "network.vpcCidr", vpc_cidr)
    if not zones:
        r.fail("network.zoneIds", [], "at least one availability zone ID, e.g. cn-beijing-a")
    if len(subnets) != len(zones):
        r.fail(
            "network.subnetCidrs",
            list(subnets),
            f"exactly one CIDR per zone in network.zoneIds ({len(zones)})",
        )
    nets: list[ipaddress.IPv4Network] = []
    for s in subnets:
        net = _private_cidr(r, "network.subnetCidrs", s)
        if net is None:
            continue
        if vpc is not None and not net.subnet_of(vpc):
            r.fail("network.subnetCidrs", s, f"a CIDR inside network.vpcCidr ({vpc_cidr})")
        if any(net.overlaps(o) for o in nets):
            r.fail("network.subnetCidrs", s, "subnet CIDRs that do not overlap each other")
        nets.append(net)
    _choice(r, "network.natSpec", cfg.nat_spec, NAT_SPECS)
    _int_range(r, "network.eipBandwidth", cfg.eip_bandwidth, 1, 500)
    _choice(r, "network.eipBillingType", cfg.eip_billing_type, EIP_BILLING_TYPES)
    for c in cfg.ssh_ingress_cidrs:
        _any_cidr(r, "network.sshIngressCidrs", c)
    return cfg


def _cluster(r: _Reader, target: str, network: NetworkConfig) -> ClusterConfig:  # noqa: PLR0912 (a flat list of independent checks)
    cfg = ClusterConfig(
        name=r.get("cluster.name"),
        kubernetes_version=r.get("cluster.kubernetesVersion"),
        pod_network_mode=r.get("cluster.podNetworkMode"),
        pod_cidrs=tuple(r.get("cluster.podCidrs")),
        max_pods_per_node=r.get("cluster.maxPodsPerNode"),
        service_cidr=r.get("cluster.serviceCidr"),
        api_server_public_access=r.get("cluster.apiServerPublicAccess"),
        api_server_bandwidth=r.get("cluster.apiServerBandwidth"),
        api_server_billing_type=r.get("cluster.apiServerBillingType"),
        delete_protection=r.get("cluster.deleteProtection"),
        kubeconfig_valid_hours=r.get("cluster.kubeconfigValidHours"),
    )
    if target != TARGET_VKE:
        return cfg
    minimum = facts.MIN_KUBERNETES_VERSION
    version = _version(cfg.kubernetes_version)
    if version is None or version < minimum or not re.fullmatch(r"\d+\.\d+", cfg.kubernetes_version):
        r.fail(
            "cluster.kubernetesVersion",
            cfg.kubernetes_version,
            f"a Kubernetes version major.minor, {_fmt_version(minimum)} or later (e.g. 1.34)",
        )
    if not _NAME_RE.match(cfg.name):
        r.fail("cluster.name", cfg.name, "2-64 letters, digits or '-', not starting with '-'")
    _choice(r, "cluster.podNetworkMode", cfg.pod_network_mode, POD_NETWORK_MODES)
    service = _private_cidr(r, "cluster.serviceCidr", cfg.service_cidr)
    taken: list[tuple[str, ipaddress.IPv4Network]] = []
    if not network.use_existing:
        with contextlib.suppress(ValueError):  # a malformed vpcCidr is reported by the network checks
            taken.append(("network.vpcCidr", ipaddress.IPv4Network(network.vpc_cidr)))
    if service is not None:
        for other_key, other in taken:
            if service.overlaps(other):
                r.fail("cluster.serviceCidr", cfg.service_cidr, f"a CIDR that does not overlap {other_key}")
        taken.append(("cluster.serviceCidr", service))
    if cfg.pod_network_mode == "Flannel":
        if not cfg.pod_cidrs:
            r.fail("cluster.podCidrs", [], "at least one pod CIDR with podNetworkMode=Flannel")
        for c in cfg.pod_cidrs:
            net = _private_cidr(r, "cluster.podCidrs", c)
            if net is None:
                continue
            for other_key, other in taken:
                if net.overlaps(other):
                    r.fail("cluster.podCidrs", c, f"a CIDR that does not overlap {other_key}")
        _choice(r, "cluster.maxPodsPerNode", cfg.max_pods_per_node, MAX_PODS_CHOICES)
    _int_range(r, "cluster.apiServerBandwidth", cfg.api_server_bandwidth, 1, 500)
    _choice(r, "cluster.apiServerBillingType", cfg.api_server_billing_type, EIP_BILLING_TYPES)
    _int_range(r, "cluster.kubeconfigValidHours", cfg.kubeconfig_valid_hours, 1, 43800)
    return cfg


def _node_pool(r: _Reader, target: str) -> NodePoolConfig:  # noqa: PLR0912 (a flat list of independent checks)
    cfg = NodePoolConfig(
        name=r.get("nodePool.name"),
        instance_types=tuple(r.get("nodePool.instanceTypes")),
        containerd_version=r.get("nodePool.containerdVersion"),
        key_pair_name=r.get("nodePool.keyPairName"),
        password=_secret(r, "nodePool.password"),
        image_id=r.get("nodePool.imageId"),
        instance_charge_type=r.get("nodePool.instanceChargeType"),
        system_volume_type=r.get("nodePool.systemVolumeType"),
        system_volume_size=r.get("nodePool.systemVolumeSize"),
        data_volume_type=r.get("nodePool.dataVolumeType"),
        data_volume_size=r.get("nodePool.dataVolumeSize"),
        min_replicas=r.get("nodePool.minReplicas"),
        max_replicas=r.get("nodePool.maxReplicas"),
        desired_replicas=r.get("nodePool.desiredReplicas"),
        labels=_parse_labels(r, "nodePool.labels", r.get("nodePool.labels")),
        taints=_parse_taints(r, "nodePool.taints", r.get("nodePool.taints")),
        hpc_cluster_id=r.get("nodePool.hpcClusterId"),
        readiness_timeout_minutes=r.get("nodePool.readinessTimeoutMinutes"),
    )
    if target != TARGET_VKE:
        return cfg
    if not _POOL_NAME_RE.match(cfg.name):
        r.fail(
            "nodePool.name",
            cfg.name,
            "2-63 ASCII letters, digits or '-', starting and ending with a letter or digit "
            "(a VKE node pool name that is also a Kubernetes label value: the nodes carry it)",
        )
    if not cfg.instance_types:
        r.fail("nodePool.instanceTypes", [], "at least one GPU ECS instance type, e.g. ecs.gni2.3xlarge")
    for t in cfg.instance_types:
        if not _INSTANCE_TYPE_RE.match(t):
            r.fail("nodePool.instanceTypes", t, "a non-empty ECS instance type ID such as ecs.gni2.3xlarge")
    minimum = facts.MIN_CONTAINERD_VERSION
    version = _version(cfg.containerd_version)
    if version is None or version < minimum or cfg.containerd_version.startswith("v"):
        r.fail(
            "nodePool.containerdVersion",
            cfg.containerd_version,
            f"a containerd version {_fmt_version(minimum)} or later (e.g. 2.1)",
        )
    if bool(cfg.key_pair_name) == bool(cfg.password):
        r.fail(
            "nodePool.keyPairName",
            cfg.key_pair_name,
            "exactly one of nodePool.keyPairName and nodePool.password (secret)",
        )
    _choice(r, "nodePool.instanceChargeType", cfg.instance_charge_type, CHARGE_TYPES)
    _choice(r, "nodePool.systemVolumeType", cfg.system_volume_type, VOLUME_TYPES)
    _int_range(r, "nodePool.systemVolumeSize", cfg.system_volume_size, 20, 2048)
    _choice(r, "nodePool.dataVolumeType", cfg.data_volume_type, VOLUME_TYPES)
    if cfg.data_volume_size != 0:
        _int_range(r, "nodePool.dataVolumeSize", cfg.data_volume_size, 20, 32768)
    if cfg.min_replicas < 0:
        r.fail("nodePool.minReplicas", cfg.min_replicas, "an integer >= 0")
    _int_range(r, "nodePool.maxReplicas", cfg.max_replicas, 1, 2000)
    if cfg.min_replicas > cfg.max_replicas:
        r.fail("nodePool.minReplicas", cfg.min_replicas, f"at most nodePool.maxReplicas ({cfg.max_replicas})")
    elif not cfg.min_replicas <= cfg.desired_replicas <= cfg.max_replicas:
        r.fail(
            "nodePool.desiredReplicas",
            cfg.desired_replicas,
            f"between nodePool.minReplicas ({cfg.min_replicas}) and nodePool.maxReplicas "
            f"({cfg.max_replicas})",
        )
    if cfg.instance_charge_type == "PrePaid":
        r.fail("nodePool.instanceChargeType", "PrePaid", "PostPaid (VKE rejects PrePaid with auto-scaling)")
    if any(t.startswith("ecs.hpc") for t in cfg.instance_types) and not cfg.hpc_cluster_id:
        r.fail(
            "nodePool.hpcClusterId", "", "an HPC cluster ID when nodePool.instanceTypes has ecs.hpc* types"
        )
    _int_range(r, "nodePool.readinessTimeoutMinutes", cfg.readiness_timeout_minutes, 1, 240)
    return cfg


def _driver(r: _Reader) -> DriverConfig:
    cfg = DriverConfig(
        implementation=r.get("driver.implementation"),
        image_pull_policy=r.get("driver.imagePullPolicy"),
        image_pull_secrets=tuple(r.get("driver.imagePullSecrets")),
        device_source=r.get("driver.deviceSource"),
        simulated_gpus=r.get("driver.simulatedGpus"),
        simulated_product=r.get("driver.simulatedProduct"),
        kubelet_plugin_on_all_nodes=r.get("driver.kubeletPluginOnAllNodes"),
        nvidia_chart_version=r.get("driver.nvidiaChartVersion"),
        timeout_seconds=r.get("driver.timeoutSeconds"),
        nvidia_driver_root=r.get("driver.nvidiaDriverRoot"),
        feature_gates=_feature_gates(r, r.get("driver.featureGates")),
    )
    if not cfg.nvidia_driver_root.startswith("/") or "\n" in cfg.nvidia_driver_root:
        r.fail(
            "driver.nvidiaDriverRoot",
            cfg.nvidia_driver_root,
            "an absolute host path such as / or /run/nvidia/driver",
        )
    _choice(r, "driver.implementation", cfg.implementation, (IMPLEMENTATION_PYTHON, IMPLEMENTATION_NVIDIA))
    _choice(r, "driver.imagePullPolicy", cfg.image_pull_policy, PULL_POLICIES)
    _choice(r, "driver.deviceSource", cfg.device_source, DEVICE_SOURCES)
    _int_range(r, "driver.simulatedGpus", cfg.simulated_gpus, 1, 64)
    _int_range(r, "driver.timeoutSeconds", cfg.timeout_seconds, 60, 3600)
    for s in cfg.image_pull_secrets:
        if not _DNS_SUBDOMAIN_RE.match(s):
            r.fail("driver.imagePullSecrets", s, "names of Secrets (DNS subdomain names)")
    if cfg.implementation == IMPLEMENTATION_NVIDIA:
        if cfg.device_source != "nvml":
            r.fail("driver.deviceSource", cfg.device_source, "nvml with driver.implementation=nvidia")
        if cfg.kubelet_plugin_on_all_nodes:
            r.fail(
                "driver.kubeletPluginOnAllNodes",
                True,
                "false with driver.implementation=nvidia (the procedure's node affinity)",
            )
        if not _VERSION_RE.match(cfg.nvidia_chart_version) or cfg.nvidia_chart_version.startswith("v"):
            r.fail("driver.nvidiaChartVersion", cfg.nvidia_chart_version, "a chart version such as 25.8.1")
    return cfg


def _driver_image(r: _Reader, target: str, implementation: str) -> DriverImageConfig:  # noqa: PLR0911, PLR0912 (a flat list of independent checks)
    text, build = r.get("driver.image"), r.get("driver.image.build")
    cfg = DriverImageConfig(
        image=None,
        build="",
        kind_cluster="",
        registry_name=r.get("driver.registry.name"),
        registry_create=r.get("driver.registry.create"),
        registry_edition=r.get("driver.registry.edition"),
        registry_project=r.get("driver.registry.project"),
        registry_namespace=r.get("driver.registry.namespace"),
        registry_repository=r.get("driver.registry.repository"),
    )
    if target not in (TARGET_VKE, TARGET_EXISTING):  # reported by the target check
        return cfg
    if implementation != IMPLEMENTATION_PYTHON:
        for key, value in (("driver.image", text), ("driver.image.build", build)):
            if value:
                r.fail(
                    key, value, "empty with driver.implementation=nvidia (NVIDIA's chart brings its image)"
                )
        return cfg
    if text:
        if build:
            r.fail("driver.image.build", build, "empty when driver.image is set (a given image is not built)")
        try:
            image = imageref.parse(text)
        except imageref.ReferenceError as error:
            r.fail("driver.image", text, f"an OCI image reference: {error}")
            return cfg
        problem = imageref.domain_problem(image.domain, local_cluster=target != TARGET_VKE)
        if problem:
            r.fail("driver.image", text, f"an image in a registry the nodes can pull from ({problem})")
        return replace(cfg, image=image)
    if not build:
        if target != TARGET_VKE:
            r.fail(
                "driver.image",
                "",
                "the python driver's image: set driver.image (registry/path:tag or "
                "registry/path@sha256:<digest>) or driver.image.build=kind:<cluster> "
                "(scripts/kind-up creates the kind cluster vke-gpu-dra)",
            )
            return cfg
        build = BUILD_CR
    if build == BUILD_CR:
        if target != TARGET_VKE:
            r.fail(
                "driver.image.build",
                build,
                "kind:<cluster> with target=existing-cluster (a CR build needs target=vke)",
            )
            return cfg
        if not cfg.registry_name:
            r.fail(
                "driver.registry.name",
                "",
                "the Volcengine CR instance the driver image is pushed to: pulumi config set "
                "driver.registry.name <instance> (and driver.registry.create true to create it), "
                "or set driver.image to an image the nodes can pull",
            )
        elif not _CR_INSTANCE_RE.match(cfg.registry_name):
            r.fail(
                "driver.registry.name",
                cfg.registry_name,
                "3-30 lower-case letters, digits or '-', starting with a letter (a CR instance name)",
            )
        _choice(r, "driver.registry.edition", cfg.registry_edition, REGISTRY_EDITIONS)
        if cfg.registry_create and not cfg.registry_project:
            r.fail("driver.registry.project", "", "a Volcengine project name, e.g. default")
        for key in ("driver.registry.namespace", "driver.registry.repository"):
            value = r.get(key)
            if not 2 <= len(value) <= 90 or not _CR_NAME_RE.match(value):
                r.fail(key, value, "2-90 lower-case letters and digits, separated by '.', '_' or '-'")
        return replace(cfg, build=BUILD_CR)
    kind, sep, cluster = build.partition(":")
    if kind != BUILD_KIND or not sep:
        r.fail("driver.image.build", build, "cr or kind:<cluster>")
        return cfg
    if target == TARGET_VKE:
        r.fail("driver.image.build", build, "cr or empty with target=vke (VKE nodes cannot pull from kind)")
        return cfg
    if not _KIND_CLUSTER_RE.match(cluster):
        r.fail("driver.image.build", build, "kind:<cluster> with a kind cluster name (a-z, 0-9, '-')")
        return cfg
    return replace(cfg, build=BUILD_KIND, kind_cluster=cluster)


def _feature_gates(r: _Reader, text: str) -> dict[str, bool]:
    try:
        return featuregates.parse_explicit(text)
    except featuregates.FeatureGateError as exc:
        r.fail("driver.featureGates", text, f"Name=true|false,... with known gates ({exc})")
        return {}


def _sample(r: _Reader) -> SampleConfig:
    cfg = SampleConfig(
        enabled=r.get("sample.enabled"),
        namespace=r.get("sample.namespace"),
        image=r.get("sample.image"),
        command=tuple(r.get("sample.command")),
        args=tuple(r.get("sample.args")),
    )
    if cfg.enabled:
        if not _DNS_LABEL_RE.match(cfg.namespace):
            r.fail("sample.namespace", cfg.namespace, "a namespace name (DNS label: a-z, 0-9, '-')")
        if not cfg.image or any(c.isspace() for c in cfg.image):
            r.fail("sample.image", cfg.image, "a non-empty image reference without spaces")
        if not cfg.command:
            r.fail("sample.command", [], 'a non-empty command, e.g. ["sh"]')
    return cfg


def _volcengine(r: _Reader) -> VolcengineAccess:
    values, env = r.raw.values, r.raw.environ

    def opt_secret(key: str) -> SecretStr | None:
        value = values.get(f"volcengine:{key}")
        return SecretStr(value) if value else None

    region = values.get("volcengine:region") or env.get("VOLCENGINE_REGION", "")
    if not region:
        r.issues.append(
            Issue(
                "(volcengine:region)",
                "''",
                "a region: pulumi config set volcengine:region cn-beijing (or VOLCENGINE_REGION)",
            )
        )
    for key in ("accessKey", "secretKey"):
        full = f"volcengine:{key}"
        if values.get(full) and full not in r.raw.secret_keys:
            r.issues.append(
                Issue(f"({full})", "[secret]", f"a secret value: pulumi config set --secret {full}")
            )
    return VolcengineAccess(
        region=region,
        access_key=opt_secret("accessKey"),
        secret_key=opt_secret("secretKey"),
        session_token=opt_secret("sessionToken"),
        endpoint=values.get("volcengine:endpoint", ""),
    )


def load(raw: RawConfig | None = None) -> StackConfig:
    """Read and validate the whole stack configuration; raise one ConfigError listing every problem."""
    r = _Reader(raw if raw is not None else RawConfig.from_pulumi_runtime())
    r.unknown_keys()
    target = r.get("target")
    _choice(r, "target", target, (TARGET_VKE, TARGET_EXISTING))
    network = _network(r, target)
    cluster = _cluster(r, target, network)
    node_pool = _node_pool(r, target)
    driver = _driver(r)
    driver_image = _driver_image(r, target, driver.implementation)
    sample = _sample(r)
    kubeconfig = _secret(r, "kubeconfig")
    kubeconfig_path = r.get("kubeconfigPath")
    volcengine = None
    if target == TARGET_VKE:
        volcengine = _volcengine(r)
        if kubeconfig or kubeconfig_path:
            r.fail(
                "kubeconfig" if kubeconfig else "kubeconfigPath",
                kubeconfig_path or "[secret]",
                "empty with target=vke (the program reads the new cluster's kubeconfig)",
            )
        if node_pool.taints and driver.implementation == IMPLEMENTATION_NVIDIA:
            r.fail(
                "nodePool.taints",
                [f"{t.key}:{t.effect}" for t in node_pool.taints],
                "no taints with driver.implementation=nvidia (the procedure's values have no "
                "kubelet-plugin tolerations)",
            )
    elif target == TARGET_EXISTING and bool(kubeconfig) == bool(kubeconfig_path):
        r.fail(
            "kubeconfig",
            "[secret]" if kubeconfig else "",
            "exactly one of kubeconfig (secret) and kubeconfigPath with target=existing-cluster",
        )
    name_prefix = r.get("namePrefix")
    if not _DNS_LABEL_RE.match(name_prefix) or len(name_prefix) > 40:
        r.fail("namePrefix", name_prefix, "1-40 characters a-z, 0-9 and '-'")
    production = r.get("production")
    kubeconfig_context = r.get("kubeconfigContext")
    if r.issues:
        raise ConfigError(r.issues)
    return StackConfig(
        target=target,
        production=production,
        name_prefix=name_prefix,
        network=network,
        cluster=cluster,
        node_pool=node_pool,
        driver=driver,
        sample=sample,
        kubeconfig=kubeconfig,
        kubeconfig_path=kubeconfig_path,
        kubeconfig_context=kubeconfig_context,
        volcengine=volcengine,
        driver_image=driver_image,
    )


def raw_from_stack_file(
    stack_config: Mapping[str, Any], secret_value: Callable[[str], str] | None = None
) -> RawConfig:
    """RawConfig from the `config:` mapping of a Pulumi.<stack>.yaml (tests and tooling).

    Values are stringified as the engine does (lists and bools to JSON); `{secure: …}` entries become
    secret keys whose value is `secret_value(key)` (a placeholder by default).
    """
    values: dict[str, str] = {}
    secrets: set[str] = set()
    for key, value in stack_config.items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        if isinstance(value, dict) and "secure" in value:
            secrets.add(full)
            values[full] = secret_value(full) if secret_value else "placeholder-secret"
        elif isinstance(value, str):
            values[full] = value
        else:
            values[full] = json.dumps(value)
    return RawConfig(values=values, secret_keys=frozenset(secrets))


def render_pulumi_yaml() -> str:
    """Pulumi.yaml with the config block generated from KEYS (`python -m components.config`)."""
    project = {
        "name": PROJECT,
        "description": "GPU dynamic resource allocation (DRA) on Volcengine Kubernetes Engine",
        "runtime": {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}},
        "config": pulumi_yaml_config(),
    }
    header = "# Generated by `python -m components.config > Pulumi.yaml` from components/config.py (KEYS).\n"
    return header + yaml.safe_dump(project, sort_keys=False, allow_unicode=True, width=100)


if __name__ == "__main__":
    print(render_pulumi_yaml(), end="")
