"""The key table: every config key declared once, with its type, default, description and constraints.

A row names the key (`nodePool.minReplicas`; provider keys with their namespace, `volcengine:region`)
and the field it fills: `section.field` derived from the name (`nodePool` -> `node_pool`, camelCase ->
snake_case) unless the row names them. Its own constraints (`checks` on the value, `each` on every item
of a list) are checked when `when` holds; `convert` builds a field's typed value. Rules between keys are
written by hand in `reader.py`. `Pulumi.yaml` and the key tables of docs/configuration.md are generated
from this table (`render.py`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from vke_gpu_dra_core import facts, vke_releases
from vke_gpu_dra_core.facts import DEVICE_SOURCES
from vke_gpu_dra_core.object_names import DNS_LABEL_RE, DNS_SUBDOMAIN_RE
from vke_gpu_dra_core.versions import format_version

from .constraints import (
    FEATURE_GATES,
    LABELS,
    TAINTS,
    AnyCidr,
    Choices,
    Constraint,
    Convert,
    IntRange,
    MinVersion,
    OfferedKubernetesLine,
    Pattern,
    PrivateCidr,
    Required,
)
from .stack_config import BUILD_CR, PROJECT, TARGET_EXISTING, TARGET_VKE

ConfigType = Literal["string", "integer", "boolean", "array"]

IMPLEMENTATION_PYTHON: Final = "python"
IMPLEMENTATION_NVIDIA: Final = "nvidia"
DEFAULT_SAMPLE_IMAGE: Final = "doc-cn-beijing.cr.volces.com/vke/gpu-burn:1.0"

NAT_SPECS: Final = ("Small", "Medium", "Large", "Extra_Large_1", "Extra_Large_2")
EIP_BILLING_TYPES: Final = ("PostPaidByBandwidth", "PostPaidByTraffic")
POD_NETWORK_MODES: Final = ("VpcCniShared", "Flannel")
MAX_PODS_CHOICES: Final = (16, 32, 64, 128, 256)
VOLUME_TYPES: Final = ("ESSD_PL0", "ESSD_FlexPL", "PTSSD")
CHARGE_TYPES: Final = ("PostPaid", "PrePaid")
PULL_POLICIES: Final = ("Always", "IfNotPresent", "Never")
XID_LIST_RE: Final = re.compile(r"^ *([0-9]+ *(, *[0-9]+ *)*)?$")
#: Each XID short enough for the plugin, which refuses one above 4294967295 (NVML's unsigned int).
XID_LIST_SHORT_RE: Final = re.compile(r"^ *([0-9]{1,9} *(, *[0-9]{1,9} *)*)?$")
REGISTRY_EDITIONS: Final = ("Enterprise", "Micro")
#: driver.extendedResource: map nvidia.com/gpu on clusters that serve it by default, always, or never.
EXTENDED_RESOURCE_AUTO: Final = "auto"
EXTENDED_RESOURCE_MODES: Final = (EXTENDED_RESOURCE_AUTO, "on", "off")
#: sample.classicDeployment: deploy gpu-test-classic when the pool has room for it, always, or never.
CLASSIC_SAMPLE_AUTO: Final = "auto"
CLASSIC_SAMPLE_ON: Final = "on"
CLASSIC_SAMPLE_OFF: Final = "off"
CLASSIC_SAMPLE_MODES: Final = (CLASSIC_SAMPLE_AUTO, CLASSIC_SAMPLE_ON, CLASSIC_SAMPLE_OFF)
#: Keys that were replaced, and by what.
REPLACED_KEYS: Final = {"driver.imageRepository": "driver.image", "driver.imageTag": "driver.image"}

INSTANCE_TYPE_RE: Final = re.compile(r"^ecs\.[a-z0-9-]+\.[a-z0-9-]+$")
#: Node pool names: VKE's name rule intersected with Kubernetes label values (the pool label's value).
POOL_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,61}[A-Za-z0-9]$")
CLUSTER_NAME_RE: Final = re.compile(r"^[A-Za-z0-9\u4e00-\u9fa5][A-Za-z0-9\u4e00-\u9fa5-]{1,63}$")
CHART_VERSION_RE: Final = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")
#: CR instance names: lower-case letters, digits and '-', 3-30 characters, starting with a letter.
CR_INSTANCE_RE: Final = re.compile(r"^[a-z][a-z0-9-]{1,28}[a-z0-9]$")
CR_NAME_RE: Final = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
ABSOLUTE_PATH_RE: Final = re.compile(r"^/[^\n]*\Z")
NO_SPACE_RE: Final = re.compile(r"^\S+\Z")
CR_NAME: Final = Pattern(
    CR_NAME_RE, "2-90 lower-case letters and digits, separated by '.', '_' or '-'", min_len=2, max_len=90
)


@dataclass(frozen=True)
class When:
    """The condition under which a key's own constraints are checked, over the values read (by key)."""

    doc: str
    holds: Callable[[Mapping[str, Any]], bool]


def _vke(v: Mapping[str, Any]) -> bool:
    return bool(v["target"] == TARGET_VKE)


def _new_network(v: Mapping[str, Any]) -> bool:
    existing = ("network.existingVpcId", "network.existingSubnetIds", "network.existingSecurityGroupId")
    return _vke(v) and not all(v[k] for k in existing)


def _cr_build(v: Mapping[str, Any]) -> bool:
    return (
        _vke(v)
        and v["driver.implementation"] == IMPLEMENTATION_PYTHON
        and not v["driver.image"]
        and v["driver.image.build"] in ("", BUILD_CR)
    )


VKE: Final = When("target=vke", _vke)
NEW_NETWORK: Final = When("target=vke, a new VPC (no network.existing*)", _new_network)
FLANNEL: Final = When(
    "target=vke, cluster.podNetworkMode=Flannel",
    lambda v: _vke(v) and v["cluster.podNetworkMode"] == "Flannel",
)
NVIDIA: Final = When(
    "driver.implementation=nvidia", lambda v: v["driver.implementation"] == IMPLEMENTATION_NVIDIA
)
SAMPLE: Final = When("sample.enabled", lambda v: bool(v["sample.enabled"]))
CR_BUILD: Final = When("a CR build (target=vke, no driver.image)", _cr_build)
CR_CREATE: Final = When(
    "a CR build with driver.registry.create",
    lambda v: _cr_build(v) and bool(v["driver.registry.create"]),
)

#: Key prefix -> section (a field of StackConfig); keys without a prefix are StackConfig's own fields.
SECTION_OF_PREFIX: Final = {
    "network": "network",
    "cluster": "cluster",
    "nodePool": "node_pool",
    "driver": "driver",
    "sample": "sample",
    "volcengine": "volcengine",
}


def snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name.replace(".", "_")).lower()


@dataclass(frozen=True)
class Key:
    """One config key: a project key declared in Pulumi.yaml, or a provider key (`volcengine:...`)."""

    name: str
    type: ConfigType
    default: Any
    description: str
    secret: bool = False
    checks: tuple[Constraint, ...] = ()
    each: tuple[Constraint, ...] = ()
    when: When | None = None
    convert: Convert | None = None
    section: str | None = None
    field: str | None = None
    #: Environment variable read when the key is not set (provider keys).
    env: str = ""
    #: A set value must be a Pulumi secret (for secret keys).
    secret_required: bool = True
    #: Only deploying reads it (cloud access, node login, the HPC cluster, an existing cluster's kubeconfig,
    #: where the driver image comes from): `vke-gpu-dra plan` does not stop at a problem with it, as a
    #: stack file often leaves it to `pulumi config set`.
    deploy_only: bool = False

    @property
    def declared(self) -> bool:
        """A project key (declared in Pulumi.yaml), not a provider's."""
        return ":" not in self.name

    @property
    def full(self) -> str:
        return f"{PROJECT}:{self.name}" if self.declared else self.name

    @property
    def shown(self) -> str:
        """The key as an issue names it: project keys bare, provider keys in parentheses."""
        return self.name if self.declared else f"({self.name})"

    @property
    def target(self) -> tuple[str, str]:
        """(section, field) this key fills."""
        head, sep, rest = self.name.replace(":", ".", 1).partition(".")
        if not sep:
            head, rest = "", head
        section = self.section if self.section is not None else SECTION_OF_PREFIX.get(head, "")
        return section, self.field if self.field is not None else snake_case(rest)

    def default_value(self) -> Any:
        return list(self.default) if self.type == "array" else self.default


def _string(name: str, default: str, description: str, **kw: Any) -> Key:
    return Key(name, "string", default, description, **kw)


#: The project's keys, in the order Pulumi.yaml and the reference declare them.
KEYS: Final[tuple[Key, ...]] = (
    # --- stack-wide ---
    _string(
        "target",
        TARGET_VKE,
        "What the stack deploys into: 'vke' creates network, VKE cluster and GPU node pool; "
        "'existing-cluster' creates no Volcengine resources and uses the kubeconfig below.",
        checks=(Choices((TARGET_VKE, TARGET_EXISTING)),),
    ),
    Key(
        "production",
        "boolean",
        False,
        "Marks a production stack: cluster and node pool are protected (pulumi protect).",
    ),
    _string(
        "gpuInstanceTypes",
        "",
        "Extra GPU instance types for the capacity check and the policy pack, a JSON or YAML map shaped like "
        "the catalog's instanceTypes (core/src/vke_gpu_dra_core/gpu_catalog.yaml); validated there.",
    ),
    _string(
        "namePrefix",
        "vke-gpu-dra",
        "Prefix of the names of the Volcengine resources (VPC, subnets, NAT, EIP, security group).",
        checks=(Pattern(DNS_LABEL_RE, "1-40 characters a-z, 0-9 and '-'", max_len=40),),
    ),
    _string(
        "kubeconfig",
        "",
        "target=existing-cluster: kubeconfig text of the cluster (set it with --secret).",
        secret=True,
        deploy_only=True,
    ),
    _string(
        "kubeconfigPath",
        "",
        "target=existing-cluster: path of a kubeconfig file (alternative to kubeconfig).",
        deploy_only=True,
    ),
    _string(
        "kubeconfigContext",
        "",
        "target=existing-cluster: kubeconfig context to use (empty: the current context).",
        deploy_only=True,
    ),
    # --- network ---
    _string(
        "network.existingVpcId",
        "",
        "Use this VPC instead of creating one (set with existingSubnetIds and existingSecurityGroupId).",
    ),
    Key(
        "network.existingSubnetIds",
        "array",
        [],
        "Use these subnets (node and control-plane subnets) instead of creating them.",
    ),
    _string(
        "network.existingSecurityGroupId",
        "",
        "Use this security group for the nodes instead of creating one.",
    ),
    _string(
        "network.vpcCidr",
        "192.168.0.0/16",
        "CIDR of the VPC that is created.",
        checks=(PrivateCidr(),),
        when=NEW_NETWORK,
    ),
    Key(
        "network.zoneIds",
        "array",
        ["cn-beijing-a"],
        "Availability zones, one subnet per zone (same order as subnetCidrs).",
        checks=(Required("at least one availability zone ID, e.g. cn-beijing-a"),),
        when=NEW_NETWORK,
    ),
    Key(
        "network.subnetCidrs",
        "array",
        ["192.168.0.0/20"],
        "Subnet CIDRs inside vpcCidr, one per zone in zoneIds.",
        each=(PrivateCidr(),),
        when=NEW_NETWORK,
    ),
    _string(
        "network.natSpec",
        "Small",
        "NAT gateway specification.",
        checks=(Choices(NAT_SPECS),),
        when=NEW_NETWORK,
    ),
    Key(
        "network.eipBandwidth",
        "integer",
        10,
        "Bandwidth of the NAT gateway's EIP in Mbit/s.",
        checks=(IntRange(1, 500),),
        when=NEW_NETWORK,
    ),
    _string(
        "network.eipBillingType",
        "PostPaidByTraffic",
        "Billing type of the NAT gateway's EIP.",
        checks=(Choices(EIP_BILLING_TYPES),),
        when=NEW_NETWORK,
    ),
    Key(
        "network.sshIngressCidrs",
        "array",
        [],
        "CIDRs allowed to reach the nodes on TCP 22 (empty: no SSH rule).",
        each=(AnyCidr(),),
        when=NEW_NETWORK,
    ),
    # --- cluster ---
    _string(
        "cluster.name",
        "vke-gpu-dra",
        "Name of the VKE cluster.",
        checks=(Pattern(CLUSTER_NAME_RE, "2-64 letters, digits or '-', not starting with '-'"),),
        when=VKE,
    ),
    _string(
        "cluster.kubernetesVersion",
        format_version(vke_releases.DEFAULT),
        "Kubernetes line of the cluster (major.minor); VKE runs its newest patch build. Changing it on a "
        "running cluster replaces the cluster: upgrade in VKE first (docs/upgrading.md). With "
        "target=existing-cluster, the cluster's line (the 'auto' defaults follow it).",
        checks=(OfferedKubernetesLine(),),
        when=VKE,
    ),
    Key(
        vke_releases.FORCE_KEY,
        "boolean",
        False,
        "target=vke: ask VKE for a cluster.kubernetesVersion line (1.34 or later) that VKE's docs do not "
        "list yet (docs/environments.md); the policy pack warns about it (kubernetes-version-forced).",
    ),
    _string(
        "cluster.podNetworkMode",
        "VpcCniShared",
        "Pod network: VpcCniShared or Flannel.",
        checks=(Choices(POD_NETWORK_MODES),),
        when=VKE,
    ),
    Key(
        "cluster.podCidrs",
        "array",
        ["172.20.0.0/16"],
        "Flannel only: pod CIDRs.",
        checks=(Required("at least one pod CIDR with podNetworkMode=Flannel"),),
        each=(PrivateCidr(),),
        when=FLANNEL,
    ),
    Key(
        "cluster.maxPodsPerNode",
        "integer",
        64,
        "Flannel only: pods per node (16, 32, 64, 128 or 256).",
        checks=(Choices(MAX_PODS_CHOICES),),
        when=FLANNEL,
    ),
    _string(
        "cluster.serviceCidr",
        "172.30.0.0/18",
        "Service CIDR of the cluster.",
        checks=(PrivateCidr(),),
        when=VKE,
    ),
    Key(
        "cluster.apiServerPublicAccess",
        "boolean",
        True,
        "Give the API server a public endpoint (the kubeconfig is then of type Public).",
    ),
    Key(
        "cluster.apiServerBandwidth",
        "integer",
        10,
        "Bandwidth of the API server's public EIP in Mbit/s.",
        checks=(IntRange(1, 500),),
        when=VKE,
    ),
    _string(
        "cluster.apiServerBillingType",
        "PostPaidByTraffic",
        "Billing type of the API server's public EIP: PostPaidByTraffic or PostPaidByBandwidth.",
        checks=(Choices(EIP_BILLING_TYPES),),
        when=VKE,
    ),
    Key("cluster.deleteProtection", "boolean", False, "Turn on VKE delete protection for the cluster."),
    Key(
        "cluster.kubeconfigValidHours",
        "integer",
        8760,
        "Validity of the generated kubeconfig in hours.",
        checks=(IntRange(1, 43800),),
        when=VKE,
    ),
    # --- GPU node pool ---
    _string(
        "nodePool.name",
        "gpu-dra",
        "Name of the GPU node pool (2-63 ASCII letters, digits or '-'; the nodes carry it as a label value).",
        checks=(
            Pattern(
                POOL_NAME_RE,
                "2-63 ASCII letters, digits or '-', starting and ending with a letter or digit "
                "(a VKE node pool name that is also a Kubernetes label value: the nodes carry it)",
            ),
        ),
        when=VKE,
    ),
    Key(
        "nodePool.instanceTypes",
        "array",
        ["ecs.gni2.3xlarge"],
        "GPU ECS instance types of the pool.",
        checks=(Required("at least one GPU ECS instance type, e.g. ecs.gni2.3xlarge"),),
        each=(Pattern(INSTANCE_TYPE_RE, "a non-empty ECS instance type ID such as ecs.gni2.3xlarge"),),
        when=VKE,
    ),
    _string(
        "nodePool.containerdVersion",
        "2.1",
        "containerd version pinned on the pool, 2.1 or later.",
        checks=(
            MinVersion(
                facts.MIN_CONTAINERD_VERSION, "a containerd version {minimum} or later (e.g. 2.1)", patch=True
            ),
        ),
        when=VKE,
    ),
    _string(
        "nodePool.keyPairName",
        "",
        "Log in to nodes with this ECS key pair (or set password).",
        deploy_only=True,
    ),
    _string(
        "nodePool.password",
        "",
        "Log in to nodes with this password (set it with --secret; alternative to keyPairName).",
        secret=True,
        deploy_only=True,
    ),
    _string("nodePool.imageId", "", "Node image ID (empty: VKE's default image)."),
    _string(
        "nodePool.instanceChargeType",
        "PostPaid",
        "PostPaid or PrePaid.",
        checks=(Choices(CHARGE_TYPES),),
        when=VKE,
    ),
    _string(
        "nodePool.systemVolumeType",
        "ESSD_PL0",
        "System disk type.",
        checks=(Choices(VOLUME_TYPES),),
        when=VKE,
    ),
    Key(
        "nodePool.systemVolumeSize",
        "integer",
        100,
        "System disk size in GiB (20-2048).",
        checks=(IntRange(20, 2048),),
        when=VKE,
    ),
    _string(
        "nodePool.dataVolumeType", "ESSD_PL0", "Data disk type.", checks=(Choices(VOLUME_TYPES),), when=VKE
    ),
    Key(
        "nodePool.dataVolumeSize",
        "integer",
        200,
        "Data disk size in GiB (0: none; else 20-32768); it holds /var/lib/containerd.",
        checks=(IntRange(20, 32768, also=0),),
        when=VKE,
    ),
    Key(
        "nodePool.minReplicas",
        "integer",
        1,
        "Auto-scaling minimum number of nodes.",
        checks=(IntRange(0),),
        when=VKE,
    ),
    Key(
        "nodePool.maxReplicas",
        "integer",
        1,
        "Auto-scaling maximum number of nodes.",
        checks=(IntRange(1, 2000),),
        when=VKE,
    ),
    Key("nodePool.desiredReplicas", "integer", 1, "Desired number of nodes (between min and max)."),
    Key(
        "nodePool.labels",
        "array",
        [],
        "Extra node labels as key=value (the DRA labels are always set).",
        convert=LABELS,
    ),
    Key("nodePool.taints", "array", [], "Node taints as key=value:Effect or key:Effect.", convert=TAINTS),
    _string(
        "nodePool.hpcClusterId",
        "",
        "HPC cluster ID (needed by ecs.hpcpni* types).",
        deploy_only=True,
    ),
    Key(
        "nodePool.readinessTimeoutMinutes",
        "integer",
        30,
        "How long to wait for the pool's nodes to be Ready with containerd 2.1+.",
        checks=(IntRange(1, 240),),
        when=VKE,
    ),
    # --- DRA driver ---
    _string(
        "driver.implementation",
        IMPLEMENTATION_PYTHON,
        "DRA driver: 'python' (this repository's chart driver/chart) or 'nvidia' (NVIDIA's chart).",
        checks=(Choices((IMPLEMENTATION_PYTHON, IMPLEMENTATION_NVIDIA)),),
    ),
    _string(
        "driver.imagePullPolicy",
        "IfNotPresent",
        "python: Always, IfNotPresent or Never.",
        checks=(Choices(PULL_POLICIES),),
    ),
    Key(
        "driver.imagePullSecrets",
        "array",
        [],
        "python: names of image pull secrets.",
        each=(Pattern(DNS_SUBDOMAIN_RE, "names of Secrets (DNS subdomain names)"),),
    ),
    _string(
        "driver.deviceSource",
        "nvml",
        "python: 'nvml' (real GPUs) or 'simulated'.",
        checks=(Choices(DEVICE_SOURCES),),
    ),
    Key(
        "driver.simulatedGpus",
        "integer",
        8,
        "python, simulated: number of simulated GPUs per node.",
        checks=(IntRange(1, 64),),
    ),
    _string("driver.simulatedProduct", "NVIDIA A30", "python, simulated: product name of simulated GPUs."),
    Key(
        "driver.kubeletPluginOnAllNodes",
        "boolean",
        False,
        "python: run the kubelet plugin on every node instead of nodes labelled "
        "vke.node.gpu.schedule=nvidia-dra (demo clusters).",
    ),
    _string(
        "driver.nvidiaDriverRoot",
        "/",
        "Host root of the NVIDIA driver ('/', or '/run/nvidia/driver' for a driver container); "
        "its libraries and nvidia-smi go into GPU containers through CDI.",
        checks=(Pattern(ABSOLUTE_PATH_RE, "an absolute host path such as / or /run/nvidia/driver"),),
    ),
    Key(
        "driver.claimReconcileIntervalSeconds",
        "integer",
        600,
        "python: seconds between two checks of each node's prepared claims against the API server (one "
        "cached GET per claim; claims deleted without an unprepare are cleaned); the chart's "
        "claimReconcileIntervalSeconds. 600 keeps 1,000 nodes with 8 claims each at about 13 requests/s.",
        checks=(IntRange(10, 86400),),
    ),
    _string(
        "driver.additionalXidsToIgnore",
        "",
        "python: comma-separated XIDs treated as application errors (the GPU stays healthy) on top of "
        "NVIDIA's list 13,31,43,45,68,109 (docs/health.md).",
        checks=(
            Pattern(XID_LIST_RE, "a comma-separated list of XID numbers such as 74,79"),
            Pattern(XID_LIST_SHORT_RE, "XID numbers of at most 9 digits each (NVIDIA's are such as 79)"),
        ),
    ),
    Key(
        "driver.healthRecoveryWindowSeconds",
        "integer",
        300,
        "python: seconds an unhealthy GPU must answer NVML without a fatal event before it is published "
        "healthy again.",
        checks=(IntRange(0, 86400),),
    ),
    _string(
        "driver.nvidiaChartVersion",
        "25.8.1",
        "nvidia: version of NVIDIA's chart.",
        checks=(Pattern(CHART_VERSION_RE, "a chart version such as 25.8.1"),),
        when=NVIDIA,
    ),
    Key(
        "driver.timeoutSeconds",
        "integer",
        600,
        "How long Helm waits for the driver release.",
        checks=(IntRange(60, 3600),),
    ),
    # --- driver image supply chain (components/driver_image.py, docs/image-supply-chain.md) ---
    _string(
        "driver.image",
        "",
        "python: deploy this image (registry/path:tag or registry/path@sha256:<64 hex>) and build "
        "nothing (empty: build driver/Dockerfile, see driver.image.build).",
        section="driver_image",
        deploy_only=True,
    ),
    _string(
        "driver.image.build",
        "",
        "python: where the program builds the image: 'cr' (push to the Volcengine CR instance "
        "driver.registry.name; the default with target=vke) or 'kind:<cluster>' (local Docker "
        "daemon, then kind load docker-image).",
        section="driver_image",
        field="build",
        deploy_only=True,
    ),
    _string(
        "driver.registry.name",
        "",
        "build=cr: name of the Volcengine CR instance the image is pushed to (an existing one, or "
        "the one created with driver.registry.create).",
        checks=(
            Required(
                "the Volcengine CR instance the driver image is pushed to: pulumi config set "
                "driver.registry.name <instance> (and driver.registry.create true to create it), "
                "or set driver.image to an image the nodes can pull"
            ),
            Pattern(
                CR_INSTANCE_RE,
                "3-30 lower-case letters, digits or '-', starting with a letter (a CR instance name)",
            ),
        ),
        when=CR_BUILD,
        section="driver_image",
        deploy_only=True,
    ),
    Key(
        "driver.registry.create",
        "boolean",
        False,
        "build=cr: create the CR instance driver.registry.name (it is billed; off: use an existing one).",
        section="driver_image",
        deploy_only=True,
    ),
    _string(
        "driver.registry.edition",
        "Enterprise",
        "build=cr, create: CR edition of the new instance: Enterprise or Micro.",
        checks=(Choices(REGISTRY_EDITIONS),),
        when=CR_BUILD,
        section="driver_image",
        deploy_only=True,
    ),
    _string(
        "driver.registry.project",
        "default",
        "build=cr, create: Volcengine project of the new instance (pulumi-volcengine 0.0.47 takes no "
        "charge type: the instance's chargeType is an output).",
        checks=(Required("a Volcengine project name, e.g. default"),),
        when=CR_CREATE,
        section="driver_image",
        deploy_only=True,
    ),
    _string(
        "driver.registry.namespace",
        "vke-gpu-dra",
        "build=cr: CR namespace the stack creates for the image.",
        checks=(CR_NAME,),
        when=CR_BUILD,
        section="driver_image",
        deploy_only=True,
    ),
    _string(
        "driver.registry.repository",
        "dra-gpu-kubelet-plugin",
        "build=cr: CR repository the stack creates in that namespace.",
        checks=(CR_NAME,),
        when=CR_BUILD,
        section="driver_image",
        deploy_only=True,
    ),
    # --- driver feature gates (GPU sharing) ---
    _string(
        "driver.featureGates",
        "",
        "Driver feature gates, Kubernetes syntax 'TimeSlicingSettings=true,MPSSupport=true' "
        "(NVIDIA's alpha gates for GpuConfig.sharing; both off by default; ConsumableShares=true: "
        "GPUs shared by memory between claims on Kubernetes 1.36+, not with MPSSupport; DynamicMIG=true: "
        "MIG devices created when a claim asks for a MIG profile, Kubernetes 1.36+, not with MPSSupport; "
        "DeviceMetadata=true: a JSON file of each request's devices and attributes mounted into the "
        "containers using it, KEP-5304); the chart's featureGates.",
        convert=FEATURE_GATES,
    ),
    # --- nvidia.com/gpu through DRA (DeviceClass extendedResourceName) ---
    _string(
        "driver.extendedResource",
        EXTENDED_RESOURCE_AUTO,
        "python: the gpu.nvidia.com DeviceClass maps the extended resource nvidia.com/gpu (a pod asking "
        "nvidia.com/gpu: 1 and no claim gets one of its GPUs): 'auto' (on when cluster.kubernetesVersion "
        "is 1.36 or later), 'on' (older servers drop the field unless their DRAExtendedResource gate is on) "
        "or 'off'. The sample's classic Deployment can run only when it is on (sample.classicDeployment).",
        checks=(Choices(EXTENDED_RESOURCE_MODES),),
    ),
    # --- sample workload ---
    Key("sample.enabled", "boolean", True, "Deploy the sample ResourceClaimTemplate and Deployment."),
    _string(
        "sample.namespace",
        "default",
        "Namespace of the sample (created unless 'default').",
        checks=(Pattern(DNS_LABEL_RE, "a namespace name (DNS label: a-z, 0-9, '-')"),),
        when=SAMPLE,
    ),
    _string(
        "sample.image",
        DEFAULT_SAMPLE_IMAGE,
        "Image of the sample container.",
        checks=(Pattern(NO_SPACE_RE, "a non-empty image reference without spaces"),),
        when=SAMPLE,
    ),
    Key(
        "sample.command",
        "array",
        ["sh"],
        "Command of the sample container.",
        checks=(Required('a non-empty command, e.g. ["sh"]'),),
        when=SAMPLE,
    ),
    Key("sample.args", "array", ["-c", "nvidia-smi -L; sleep 600"], "Arguments of the sample container."),
    _string(
        "sample.classicDeployment",
        CLASSIC_SAMPLE_AUTO,
        "The sample's second Deployment gpu-test-classic (nvidia.com/gpu: 1, no claim; one more GPU "
        "beside gpu-test), where gpu.nvidia.com maps nvidia.com/gpu (driver.extendedResource): 'auto' "
        "(deployed when the stack's GPU node pool has a GPU for each sample at nodePool.maxReplicas "
        "nodes; otherwise left out, also with target=existing-cluster, and the stack output "
        "sample.classicDeploymentSkipped says why), 'on' (always; an error unless the mapping is on; "
        "the capacity policy fails a pool too small for both) or 'off' (never).",
        checks=(Choices(CLASSIC_SAMPLE_MODES),),
        when=SAMPLE,
    ),
)

#: The Volcengine provider's keys the program reads (for target=vke only; not declared in Pulumi.yaml).
PROVIDER_KEYS: Final[tuple[Key, ...]] = (
    _string(
        "volcengine:region",
        "",
        "Region of the stack's Volcengine resources (or the environment variable VOLCENGINE_REGION).",
        checks=(Required("a region: pulumi config set volcengine:region cn-beijing (or VOLCENGINE_REGION)"),),
        when=VKE,
        env="VOLCENGINE_REGION",
        deploy_only=True,
    ),
    _string(
        "volcengine:accessKey",
        "",
        "Access key (set it with --secret, or the environment variable VOLCENGINE_ACCESS_KEY).",
        secret=True,
        env="VOLCENGINE_ACCESS_KEY",
        when=VKE,
        deploy_only=True,
    ),
    _string(
        "volcengine:secretKey",
        "",
        "Secret key (set it with --secret, or the environment variable VOLCENGINE_SECRET_KEY).",
        secret=True,
        env="VOLCENGINE_SECRET_KEY",
        when=VKE,
        deploy_only=True,
    ),
    _string(
        "volcengine:sessionToken",
        "",
        "Session token of temporary credentials (or the environment variable VOLCENGINE_SESSION_TOKEN).",
        secret=True,
        env="VOLCENGINE_SESSION_TOKEN",
        secret_required=False,
        when=VKE,
        deploy_only=True,
    ),
    _string(
        "volcengine:endpoint",
        "",
        "API endpoint (empty: the provider's default).",
        when=VKE,
        deploy_only=True,
    ),
)

KEYS_BY_NAME: Final = {k.name: k for k in KEYS}
#: Every key the program reads: the project's (KEYS) and the provider's.
ALL_KEYS: Final = KEYS + PROVIDER_KEYS
