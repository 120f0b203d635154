"""Reading a stack's raw config into a `StackConfig`: generically from the key table, then the rules
between keys (written here by hand).

`load()` returns the validated, frozen config or raises one `StackConfigError` that lists every problem, each
naming the key, the value and what is allowed; `read()` returns the config as far as it can be read
(a bad value replaced by its default) together with the problems, for tools that judge them.
"""

from __future__ import annotations

import contextlib
import difflib
import ipaddress
import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from vke_gpu_dra_core import imageref, vke_releases

from .constraints import private_network
from .keys import (
    ALL_KEYS,
    CLASSIC_SAMPLE_ON,
    IMPLEMENTATION_NVIDIA,
    IMPLEMENTATION_PYTHON,
    KEYS_BY_NAME,
    REPLACED_KEYS,
    Key,
)
from .raw import BOOLEAN_ALLOWED, RawConfig, parse_bool
from .stack_config import (
    BUILD_CR,
    BUILD_KIND,
    PROJECT,
    SECTIONS,
    TARGET_EXISTING,
    TARGET_VKE,
    ClusterConfig,
    DriverConfig,
    DriverImageConfig,
    Issue,
    NetworkConfig,
    NodePoolConfig,
    SampleConfig,
    SecretStr,
    StackConfig,
    StackConfigError,
    VolcengineAccess,
    maps_gpu_extended_resource,
)

#: Fields no row fills: a cross-field rule computes them (their value until it does).
DERIVED: Final[Mapping[tuple[str, str], Any]] = {("driver_image", "kind_cluster"): ""}
#: StackConfig fields that hold a section.
SECTION_FIELDS: Final = tuple(s for s in SECTIONS if s)

_ALL_BY_NAME: Final = {k.name: k for k in ALL_KEYS}
_KIND_CLUSTER_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,48}[a-z0-9])?$")


def _show(key: Key | None, raw: object) -> str:
    if key is not None and key.secret:
        return "[secret]"
    return json.dumps(raw) if not isinstance(raw, str) else repr(raw)


class _Reader:
    def __init__(self, raw: RawConfig) -> None:
        self.raw = raw
        self.issues: list[Issue] = []
        #: Key name -> its parsed value (the default where it is unset or not of its type).
        self.values: dict[str, Any] = {}
        self.fields: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
        for (section, name), value in DERIVED.items():
            self.fields[section][name] = value

    def fail(self, name: str, value: object, allowed: str) -> None:
        key = _ALL_BY_NAME.get(name)
        self.issues.append(Issue(key.shown if key else name, _show(key, value), allowed))

    def unknown_keys(self) -> None:
        prefix = f"{PROJECT}:"
        for full in sorted(self.raw.values):
            if not full.startswith(prefix):
                continue
            name = full[len(prefix) :]
            if name in REPLACED_KEYS:
                self.issues.append(Issue(name, "(set)", f"unset: replaced by {REPLACED_KEYS[name]}"))
            elif name not in KEYS_BY_NAME:
                self.issues.append(_unknown_key(name, self.raw.values[full]))

    def read(self, key: Key) -> None:
        """Parse the key's value by its type and fill its field (secret, converted, lists as tuples)."""
        raw = self.raw.values.get(key.full)
        if not raw and key.env:
            raw = self.raw.environ.get(key.env) or raw
        value = key.default_value() if raw is None else self._parse(key, raw)
        self.values[key.name] = value
        if key.secret:
            field: Any = SecretStr(value) if value else None
        elif key.convert is not None:
            field = key.convert.function(value, lambda v, allowed: self.fail(key.name, v, allowed))
        elif key.type == "array":
            field = tuple(value)
        else:
            field = value
        section, name = key.target
        self.fields[section][name] = field

    def check(self, key: Key) -> None:
        """The key's own constraints, when its condition holds; the first broken one is reported."""
        if key.when is not None and not key.when.holds(self.values):
            return
        value = self.values[key.name]
        in_stack = bool(self.raw.values.get(key.full))  # not from the key's environment variable
        if key.secret and key.secret_required and value and in_stack and key.full not in self.raw.secret_keys:
            command = f"pulumi config set --secret {key.name}" + (" ..." if key.declared else "")
            self.fail(key.name, value, f"a secret value: {command}")
        for constraint in key.checks:
            problem = constraint.problem(value)
            if problem is not None:
                self.fail(key.name, value, problem)
                return
        for item in value if key.each else ():
            for constraint in key.each:
                problem = constraint.problem(item)
                if problem is not None:
                    self.fail(key.name, item, problem)
                    break

    def _parse(self, key: Key, raw: Any) -> Any:  # noqa: PLR0911 (one return per config type)
        default = key.default_value()
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
            given = raw if value is None else value
            self.fail(key.name, raw, f"a list of strings, as JSON: {_list_command(key.name, given)}")
            return default
        return value


#: Where every key is listed: the dotted ones are not declared in Pulumi.yaml (its header says why).
KEYS_DOC: Final = "docs/configuration.md"


def _config_set(name: str, value: Any) -> str:
    shown = value if isinstance(value, str) else json.dumps(value)
    return f"pulumi config set {name} {shlex.quote(shown)}"


def _list_command(name: str, value: Any) -> str:
    """The command that sets `name` to the list a wrongly typed value most likely meant."""
    if isinstance(value, list):
        items = [v if isinstance(v, str) else json.dumps(v) for v in value]
    elif isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    else:
        items = [] if value is None else [json.dumps(value)]
    return f"pulumi config set {name} {shlex.quote(json.dumps(items))}"


def _leaves(prefix: str, value: Any) -> list[tuple[str, Any]]:
    """`{"a": {"b": 1}, "c": [2]}` under `p` -> [("p.a.b", 1), ("p.c", [2])]."""
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in _leaves(f"{prefix}.{k}", v)]
    return [(prefix, value)]


def _unknown_key(name: str, raw: str) -> Issue:
    """An unknown key; an object under the first part of dotted keys (what `pulumi config set --path
    nodePool.instanceTypes[0] x` writes) with the commands that set those keys whole."""
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        value = None
    below = [k for k in KEYS_BY_NAME if k.startswith(f"{name}.")]
    if isinstance(value, dict | list) and below:
        sets = []
        for path, leaf in _leaves(name, value):
            key = KEYS_BY_NAME.get(path)
            if key is None:
                close = difflib.get_close_matches(path, below, n=1, cutoff=0.6)
                sets.append(f"({path} is no key{f'; did you mean {close[0]}?' if close else ''})")
            elif key.type == "array":
                sets.append(_list_command(path, leaf))
            else:
                sets.append(_config_set(path, leaf))
        return Issue(
            name,
            f"{json.dumps(value)} (set with --path)",
            f"the keys under {name}. are whole dotted keys, set without --path: "
            f"pulumi config rm {name}, then " + "; ".join(sets),
        )
    close = difflib.get_close_matches(name, list(KEYS_BY_NAME), n=1, cutoff=0.8)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return Issue(name, "(set)", f"a key listed in {KEYS_DOC}{hint}")


# --- rules between keys ---------------------------------------------------------------------------


def _network_rules(r: _Reader) -> None:
    v = r.values
    existing = {
        "network.existingVpcId": bool(v["network.existingVpcId"]),
        "network.existingSubnetIds": bool(v["network.existingSubnetIds"]),
        "network.existingSecurityGroupId": bool(v["network.existingSecurityGroupId"]),
    }
    if any(existing.values()) and not all(existing.values()):
        for key, given in existing.items():
            if not given:
                r.fail(key, "", "set together with the other network.existing* keys (all three or none)")
    if all(existing.values()):
        if len(v["network.existingSubnetIds"]) > 6:
            r.fail("network.existingSubnetIds", v["network.existingSubnetIds"], "1 to 6 subnet IDs")
        return
    zones, subnets, vpc_cidr = v["network.zoneIds"], v["network.subnetCidrs"], v["network.vpcCidr"]
    if len(subnets) != len(zones):
        r.fail("network.subnetCidrs", subnets, f"exactly one CIDR per zone in network.zoneIds ({len(zones)})")
    vpc = private_network(vpc_cidr)
    nets: list[ipaddress.IPv4Network] = []
    for s in subnets:
        net = private_network(s)
        if net is None:  # reported by the key's own check
            continue
        if vpc is not None and not net.subnet_of(vpc):
            r.fail("network.subnetCidrs", s, f"a CIDR inside network.vpcCidr ({vpc_cidr})")
        if any(net.overlaps(o) for o in nets):
            r.fail("network.subnetCidrs", s, "subnet CIDRs that do not overlap each other")
        nets.append(net)


def _cluster_rules(r: _Reader) -> None:
    v = r.values
    version = v["cluster.kubernetesVersion"]
    # the key's own check took the line's form; a line VKE does not document needs the force key
    if vke_releases.problem(version, forced=True) is None and not v[vke_releases.FORCE_KEY]:
        problem = vke_releases.problem(version)
        if problem is not None:
            r.fail("cluster.kubernetesVersion", version, problem)
    taken: list[tuple[str, ipaddress.IPv4Network]] = []
    if not v["network.existingVpcId"]:
        with contextlib.suppress(ValueError):  # a malformed vpcCidr is reported by its own check
            taken.append(("network.vpcCidr", ipaddress.IPv4Network(v["network.vpcCidr"])))
    service_cidr = v["cluster.serviceCidr"]
    service = private_network(service_cidr)
    if service is not None:
        for other_key, other in taken:
            if service.overlaps(other):
                r.fail("cluster.serviceCidr", service_cidr, f"a CIDR that does not overlap {other_key}")
        taken.append(("cluster.serviceCidr", service))
    if v["cluster.podNetworkMode"] == "Flannel":
        for c in v["cluster.podCidrs"]:
            net = private_network(c)
            if net is None:
                continue
            for other_key, other in taken:
                if net.overlaps(other):
                    r.fail("cluster.podCidrs", c, f"a CIDR that does not overlap {other_key}")


def _node_pool_rules(r: _Reader) -> None:
    v = r.values
    if bool(v["nodePool.keyPairName"]) == bool(v["nodePool.password"]):
        r.fail(
            "nodePool.keyPairName",
            v["nodePool.keyPairName"],
            "exactly one of nodePool.keyPairName and nodePool.password (secret)",
        )
    low, high, desired = v["nodePool.minReplicas"], v["nodePool.maxReplicas"], v["nodePool.desiredReplicas"]
    if low > high:
        r.fail("nodePool.minReplicas", low, f"at most nodePool.maxReplicas ({high})")
    elif not low <= desired <= high:
        r.fail(
            "nodePool.desiredReplicas",
            desired,
            f"between nodePool.minReplicas ({low}) and nodePool.maxReplicas ({high})",
        )
    if v["nodePool.instanceChargeType"] == "PrePaid":
        r.fail("nodePool.instanceChargeType", "PrePaid", "PostPaid (VKE rejects PrePaid with auto-scaling)")
    if any(t.startswith("ecs.hpc") for t in v["nodePool.instanceTypes"]) and not v["nodePool.hpcClusterId"]:
        r.fail(
            "nodePool.hpcClusterId", "", "an HPC cluster ID when nodePool.instanceTypes has ecs.hpc* types"
        )


def _driver_rules(r: _Reader) -> None:
    v = r.values
    if v["driver.implementation"] != IMPLEMENTATION_NVIDIA:
        return
    if v["driver.deviceSource"] != "nvml":
        r.fail("driver.deviceSource", v["driver.deviceSource"], "nvml with driver.implementation=nvidia")
    if v["driver.kubeletPluginOnAllNodes"]:
        r.fail(
            "driver.kubeletPluginOnAllNodes",
            True,
            "false with driver.implementation=nvidia (the procedure's node affinity)",
        )
    for name in (  # settings of the python driver's chart only: NVIDIA's would not get them
        "driver.claimReconcileIntervalSeconds",
        "driver.additionalXidsToIgnore",
        "driver.healthRecoveryWindowSeconds",
    ):
        default = _ALL_BY_NAME[name].default_value()
        if v[name] != default:
            r.fail(name, v[name], "unset with driver.implementation=nvidia (a setting of the python driver)")


def _sample_rule(r: _Reader) -> None:
    """sample.classicDeployment=on needs the program's gpu.nvidia.com to map nvidia.com/gpu."""
    v = r.values
    if not v["sample.enabled"] or v["sample.classicDeployment"] != CLASSIC_SAMPLE_ON:
        return
    if v["driver.implementation"] == IMPLEMENTATION_NVIDIA:
        r.fail(
            "sample.classicDeployment",
            CLASSIC_SAMPLE_ON,
            "auto or off with driver.implementation=nvidia (NVIDIA's chart owns the DeviceClasses, "
            "so the program does not know whether gpu.nvidia.com maps nvidia.com/gpu)",
        )
        return
    mode, version = v["driver.extendedResource"], v["cluster.kubernetesVersion"]
    if not maps_gpu_extended_resource(mode, version):
        r.fail(
            "sample.classicDeployment",
            CLASSIC_SAMPLE_ON,
            f"auto or off while gpu.nvidia.com does not map nvidia.com/gpu (driver.extendedResource={mode} "
            f"with cluster.kubernetesVersion={version}; the mapping is on with driver.extendedResource=on, "
            "or auto on 1.36 and later)",
        )


def _driver_image_rule(r: _Reader) -> None:  # noqa: PLR0911, PLR0912 (a flat list of independent checks)
    """Where the image comes from: fills driver_image's image, build and kind_cluster."""
    v = r.values
    target, text, build = v["target"], v["driver.image"], v["driver.image.build"]
    fields = r.fields["driver_image"]
    fields.update(image=None, build="", kind_cluster="")
    if target not in (TARGET_VKE, TARGET_EXISTING):  # reported by the target check
        return
    if v["driver.implementation"] != IMPLEMENTATION_PYTHON:
        for key, value in (("driver.image", text), ("driver.image.build", build)):
            if value:
                r.fail(
                    key, value, "empty with driver.implementation=nvidia (NVIDIA's chart brings its image)"
                )
        return
    if text:
        if build:
            r.fail("driver.image.build", build, "empty when driver.image is set (a given image is not built)")
        try:
            image = imageref.parse(text)
        except imageref.ImageReferenceError as error:
            r.fail("driver.image", text, f"an OCI image reference: {error}")
            return
        problem = imageref.domain_problem(image.domain, local_cluster=target != TARGET_VKE)
        if problem:
            r.fail("driver.image", text, f"an image in a registry the nodes can pull from ({problem})")
        fields["image"] = image
        return
    if not build:
        if target != TARGET_VKE:
            r.fail(
                "driver.image",
                "",
                "the python driver's image: set driver.image (registry/path:tag or "
                "registry/path@sha256:<digest>) or driver.image.build=kind:<cluster> "
                "(scripts/kind-up creates the kind cluster vke-gpu-dra)",
            )
            return
        build = BUILD_CR
    if build == BUILD_CR:
        if target != TARGET_VKE:
            r.fail(
                "driver.image.build",
                build,
                "kind:<cluster> with target=existing-cluster (a CR build needs target=vke)",
            )
            return
        fields["build"] = BUILD_CR  # the registry keys' own checks hold this case (keys.CR_BUILD)
        return
    kind, sep, cluster = build.partition(":")
    if kind != BUILD_KIND or not sep:
        r.fail("driver.image.build", build, "cr or kind:<cluster>")
        return
    if target == TARGET_VKE:
        r.fail("driver.image.build", build, "cr or empty with target=vke (VKE nodes cannot pull from kind)")
        return
    if not _KIND_CLUSTER_RE.match(cluster):
        r.fail("driver.image.build", build, "kind:<cluster> with a kind cluster name (a-z, 0-9, '-')")
        return
    fields.update(build=BUILD_KIND, kind_cluster=cluster)


def _stack_rules(r: _Reader) -> None:
    v = r.values
    target, kubeconfig, kubeconfig_path = v["target"], v["kubeconfig"], v["kubeconfigPath"]
    if target == TARGET_VKE:
        if kubeconfig or kubeconfig_path:
            r.fail(
                "kubeconfig" if kubeconfig else "kubeconfigPath",
                kubeconfig_path or "[secret]",
                "empty with target=vke (the program reads the new cluster's kubeconfig)",
            )
        taints = r.fields["node_pool"]["taints"]
        if taints and v["driver.implementation"] == IMPLEMENTATION_NVIDIA:
            r.fail(
                "nodePool.taints",
                [f"{t.key}:{t.effect}" for t in taints],
                "no taints with driver.implementation=nvidia (the procedure's values have no "
                "kubelet-plugin tolerations)",
            )
    elif target == TARGET_EXISTING and bool(kubeconfig) == bool(kubeconfig_path):
        r.fail(
            "kubeconfig",
            "[secret]" if kubeconfig else "",
            "exactly one of kubeconfig (secret) and kubeconfigPath with target=existing-cluster",
        )


@dataclass(frozen=True)
class _Rule:
    run: Callable[[_Reader], None]
    vke_only: bool


#: The rules between keys, in the order their problems are listed.
RULES: Final = (
    _Rule(_network_rules, vke_only=True),
    _Rule(_cluster_rules, vke_only=True),
    _Rule(_node_pool_rules, vke_only=True),
    _Rule(_driver_rules, vke_only=False),
    _Rule(_sample_rule, vke_only=False),
    _Rule(_driver_image_rule, vke_only=False),
    _Rule(_stack_rules, vke_only=False),
)


def read(raw: RawConfig) -> tuple[StackConfig, tuple[Issue, ...]]:
    """The stack config as far as it can be read, and every problem (none: `load` accepts it)."""
    r = _Reader(raw)
    r.unknown_keys()
    for key in ALL_KEYS:
        r.read(key)
    for key in ALL_KEYS:
        r.check(key)
    vke = r.values["target"] == TARGET_VKE
    for rule in RULES:
        if vke or not rule.vke_only:
            rule.run(r)
    f = r.fields
    config = StackConfig(
        **f[""],
        network=NetworkConfig(**f["network"]),
        cluster=ClusterConfig(**f["cluster"]),
        node_pool=NodePoolConfig(**f["node_pool"]),
        driver=DriverConfig(**f["driver"]),
        sample=SampleConfig(**f["sample"]),
        volcengine=VolcengineAccess(**f["volcengine"]) if vke else None,
        driver_image=DriverImageConfig(**f["driver_image"]),
    )
    return config, tuple(r.issues)


def load(raw: RawConfig) -> StackConfig:
    """Read and validate the whole stack configuration; raise one StackConfigError listing every problem."""
    config, issues = read(raw)
    if issues:
        raise StackConfigError(issues)
    return config
