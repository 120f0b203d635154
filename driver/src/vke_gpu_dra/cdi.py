"""CDI specs for prepared claims: build, validate (CDI 1.1.0 format rules), write atomically, list, delete.

One transient spec per claim, `<cdi_root>/k8s.gpu.nvidia.com-claim_<claimUID>.yaml`, kind
`k8s.gpu.nvidia.com/claim`, one CDI device `<claimUID>-<deviceName>` per allocated device. The
per-claim names never collide with NVIDIA's base spec (`k8s.gpu.nvidia.com/device=gpu-N`) that may be
left in the same directory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device

from .fsutil import atomic_write, remove_durably

if TYPE_CHECKING:
    from .cdi_edits import DriverEdits

CLAIM_KIND: Final = f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_CLAIM}"
_SPEC_PREFIX: Final = f"{facts.CDI_VENDOR}-{facts.CDI_CLASS_CLAIM}_"
SPEC_SUFFIX: Final = ".yaml"

#: Node every CUDA process needs, and nodes added when present on the host (nvidia-uvm is created lazily).
CONTROL_NODE: Final = "/dev/nvidiactl"
OPTIONAL_CONTROL_NODES: Final = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")

ENV_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
ENV_CLAIM_UID: Final = "DRA_RESOURCE_CLAIM_UID"
ENV_GPU_DEVICE_PREFIX: Final = "GPU_DEVICE_"

#: libyaml's safe dumper when PyYAML has it (same output as `yaml.safe_dump`, about 5x faster).
_SAFE_DUMPER: Final = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class CdiSpecError(ValueError):
    """A CDI spec that a CDI runtime would refuse to load."""


# ----------------------------------------------------------------------------------------------- names


def claim_spec_path(cdi_root: Path, claim_uid: str) -> Path:
    """`<cdi_root>/k8s.gpu.nvidia.com-claim_<uid>.yaml` (CDI's transient spec name; '/' in the id -> '_')."""
    return cdi_root / f"{_SPEC_PREFIX}{claim_uid.replace('/', '_')}{SPEC_SUFFIX}"


def claim_device_name(claim_uid: str, device_name: str) -> str:
    return f"{claim_uid}-{device_name}"


def claim_device_id(claim_uid: str, device_name: str) -> str:
    """Fully qualified CDI device ID, e.g. `k8s.gpu.nvidia.com/claim=<uid>-gpu-0`."""
    return f"{CLAIM_KIND}={claim_device_name(claim_uid, device_name)}"


def device_name_from_cdi(claim_uid: str, cdi_device_name: str) -> str:
    prefix = f"{claim_uid}-"
    if not cdi_device_name.startswith(prefix):
        raise CdiSpecError(f"CDI device {cdi_device_name!r} does not belong to claim {claim_uid}")
    return cdi_device_name[len(prefix) :]


# ------------------------------------------------------------------------------------------- building


def _env_suffix(device_name: str) -> str:
    """`gpu-3` -> `3`; other names -> upper-case with non-alphanumerics as `_`."""
    match = re.fullmatch(r"gpu-(\d+)", device_name)
    if match:
        return match.group(1)
    return re.sub(r"[^A-Za-z0-9]", "_", device_name).upper()


def _device_edits(device: Device, driver: DriverEdits | None = None) -> dict[str, Any]:
    if device.simulated:
        return {"env": [f"{ENV_GPU_DEVICE_PREFIX}{_env_suffix(device.name)}={device.name}"]}
    if not device.device_nodes:
        raise CdiSpecError(f"device {device.name} has no device nodes (a real GPU needs /dev/nvidia<N>)")
    if driver is not None:
        return {"deviceNodes": driver.device_nodes(device)}
    return {"deviceNodes": [{"path": node} for node in device.device_nodes]}


def _common_edits(
    claim_uid: str, devices: Sequence[Device], optional_nodes: Iterable[str], driver: DriverEdits | None
) -> dict[str, Any]:
    if driver is not None:
        common = driver.common()
        common["env"] = [*common["env"], f"{ENV_CLAIM_UID}={claim_uid}"]
        return common
    uuids = ",".join(d.uuid for d in devices)
    legacy: dict[str, Any] = {"env": [f"{ENV_VISIBLE_DEVICES}={uuids}", f"{ENV_CLAIM_UID}={claim_uid}"]}
    if any(not d.simulated for d in devices):
        legacy["deviceNodes"] = [{"path": p} for p in (CONTROL_NODE, *optional_nodes)]
    return legacy


def _merged_edits(
    device: Device, driver: DriverEdits | None, extra: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, Any]:
    edits = _device_edits(device, driver)
    for key, values in ((extra or {}).get(device.name) or {}).items():
        edits[key] = [*edits.get(key, []), *values]
    return edits


def build_claim_spec(
    claim_uid: str,
    devices: Sequence[Device],
    *,
    optional_nodes: Iterable[str] = (),
    driver: DriverEdits | None = None,
    extra_device_edits: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The claim's CDI spec.

    With `driver`, its common edits (the driver's user-space, `NVIDIA_VISIBLE_DEVICES=void`, hooks)
    are the spec-level edits and device nodes carry host paths. Without it (simulated mode with no
    fake driver root) the spec sets environment variables and the bare device nodes only, with
    `optional_nodes` the OPTIONAL_CONTROL_NODES present on the host.

    `extra_device_edits` (device name -> env/mounts) are per-claim edits such as MPS's pipe and shm.
    """
    if not devices:
        raise CdiSpecError(f"claim {claim_uid}: a CDI spec needs at least one device")
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": CLAIM_KIND,
        "devices": [
            {
                "name": claim_device_name(claim_uid, d.name),
                "containerEdits": _merged_edits(d, driver, extra_device_edits),
            }
            for d in devices
        ],
        "containerEdits": _common_edits(claim_uid, devices, optional_nodes, driver),
    }
    spec["cdiVersion"] = minimum_version(spec)
    validate_spec(spec)
    return spec


# ----------------------------------------------------------------------------------------- validation

#: Known spec versions, oldest first (CDI 0.3.0 is the earliest a current runtime accepts).
VERSIONS: Final = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")

_SPEC_FIELDS: Final = {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
_DEVICE_FIELDS: Final = {"name", "annotations", "containerEdits"}
_EDIT_FIELDS: Final = {"env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids", "netDevices"}
_NODE_FIELDS: Final = {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
_MOUNT_FIELDS: Final = {"hostPath", "containerPath", "options", "type"}
_HOOK_FIELDS: Final = {"hookName", "path", "args", "env", "timeout"}
_RDT_FIELDS: Final = {"closID", "l3CacheSchema", "memBwSchema", "schemata", "enableMonitoring"}
_NETDEV_FIELDS: Final = {"hostInterfaceName", "name"}
_HOOK_NAMES: Final = {
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
}

_VENDOR_RE: Final = re.compile(r"^[A-Za-z]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
_CLASS_RE: Final = re.compile(r"^[A-Za-z]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_DEVICE_RE: Final = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._:-]*[A-Za-z0-9])?$")
_ENV_RE: Final = re.compile(r"^[^=\x00]+=.*$", re.DOTALL)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The lowest cdiVersion whose fields cover everything `spec` uses (CDI's MinimumRequiredVersion)."""
    devices = spec.get("devices") or []
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in devices]
    kind = str(spec.get("kind", ""))
    required = "0.3.0"

    def need(version: str) -> None:
        nonlocal required
        if _version_key(version) > _version_key(required):
            required = version

    if any(e.get("mounts") and any(m.get("type") for m in e["mounts"]) for e in edits):
        need("0.4.0")
    if any(str(d.get("name", ""))[:1].isdigit() for d in devices) or any(
        n.get("hostPath") for e in edits for n in e.get("deviceNodes") or []
    ):
        need("0.5.0")
    if spec.get("annotations") or any(d.get("annotations") for d in devices) or "." in kind.partition("/")[2]:
        need("0.6.0")
    if any(e.get("intelRdt") is not None or e.get("additionalGids") for e in edits):
        need("0.7.0")
    if any(e.get("netDevices") for e in edits):
        need("1.1.0")
    return required


def _fail(where: str, message: str) -> CdiSpecError:
    return CdiSpecError(f"CDI spec {where}: {message}")


def _check_fields(obj: Any, allowed: set[str], where: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise _fail(where, f"must be an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise _fail(where, f"unknown field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")
    return obj


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(where, f"must be a list of strings, got {value!r}")
    return value


def _string_map(value: Any, where: str) -> None:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _fail(where, f"must be a map of strings, got {value!r}")


def _int(value: Any, where: str, minimum: int = 0) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _fail(where, f"must be an integer >= {minimum}, got {value!r}")


def _validate_node(obj: Any, where: str) -> None:
    node = _check_fields(obj, _NODE_FIELDS, where)
    path = node.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise _fail(where, f"path is required and must be absolute, got {path!r}")
    perms = node.get("permissions", "")
    if not isinstance(perms, str) or set(perms) - set("rwm"):
        raise _fail(where, f"permissions must be a subset of 'rwm', got {perms!r}")
    if node.get("type", "b") not in {"b", "c", "u", "p"}:
        raise _fail(where, f"type must be one of b, c, u, p, got {node.get('type')!r}")
    for key in ("major", "minor", "fileMode", "uid", "gid"):
        if key in node:
            _int(node[key], f"{where}.{key}")


def _validate_mount(obj: Any, where: str) -> None:
    mount = _check_fields(obj, _MOUNT_FIELDS, where)
    for key in ("hostPath", "containerPath"):
        if not isinstance(mount.get(key), str) or not mount[key]:
            raise _fail(where, f"{key} is required")
    _strings(mount.get("options", []), f"{where}.options")


def _validate_hook(obj: Any, where: str) -> None:
    hook = _check_fields(obj, _HOOK_FIELDS, where)
    name = hook.get("hookName")
    if name not in _HOOK_NAMES:
        raise _fail(where, f"hookName must be one of {', '.join(sorted(_HOOK_NAMES))}, got {name!r}")
    if not isinstance(hook.get("path"), str) or not hook["path"].startswith("/"):
        raise _fail(where, f"path is required and must be absolute, got {hook.get('path')!r}")
    _strings(hook.get("args", []), f"{where}.args")
    _strings(hook.get("env", []), f"{where}.env")
    if "timeout" in hook:
        _int(hook["timeout"], f"{where}.timeout", minimum=1)


def _validate_net_device(obj: Any, where: str) -> None:
    net = _check_fields(obj, _NETDEV_FIELDS, where)
    if not net.get("hostInterfaceName") or not net.get("name"):
        raise _fail(where, "hostInterfaceName and name are required")


def _validate_gid(obj: Any, where: str) -> None:
    _int(obj, where)


_LIST_VALIDATORS: Final = {
    "deviceNodes": _validate_node,
    "mounts": _validate_mount,
    "hooks": _validate_hook,
    "netDevices": _validate_net_device,
    "additionalGids": _validate_gid,
}


def _validate_edits(obj: Any, where: str) -> Mapping[str, Any]:
    edits = _check_fields(obj, _EDIT_FIELDS, where)
    for i, env in enumerate(_strings(edits.get("env", []), f"{where}.env")):
        if not _ENV_RE.match(env):
            raise _fail(f"{where}.env[{i}]", f"must be NAME=value, got {env!r}")
    for key, check in _LIST_VALIDATORS.items():
        items = edits.get(key) or []
        if not isinstance(items, list):
            raise _fail(f"{where}.{key}", f"must be a list, got {type(items).__name__}")
        for i, item in enumerate(items):
            check(item, f"{where}.{key}[{i}]")
    if edits.get("intelRdt") is not None:
        _check_fields(edits["intelRdt"], _RDT_FIELDS, f"{where}.intelRdt")
    return edits


def _is_empty(edits: Mapping[str, Any]) -> bool:
    return not any(edits.get(k) for k in _EDIT_FIELDS)


def _validate_kind(kind: Any) -> None:
    vendor, slash, cls = kind.partition("/") if isinstance(kind, str) else ("", "", "")
    if not slash or not _VENDOR_RE.match(vendor) or not _CLASS_RE.match(cls):
        raise _fail("kind", f"must be <vendor>/<class> (letters, digits, '-', '_', '.'), got {kind!r}")
    if len(vendor) > 253 or len(cls) > 63:
        raise _fail("kind", f"vendor must be <= 253 and class <= 63 characters, got {kind!r}")


def _validate_device(obj: Any, where: str, seen: set[str]) -> None:
    device = _check_fields(obj, _DEVICE_FIELDS, where)
    name = device.get("name")
    if not isinstance(name, str) or not _DEVICE_RE.match(name):
        raise _fail(f"{where}.name", f"must be alphanumeric at both ends, '-_.:' inside, got {name!r}")
    if name in seen:
        raise _fail(f"{where}.name", f"duplicate device name {name!r}")
    seen.add(name)
    if "annotations" in device:
        _string_map(device["annotations"], f"{where}.annotations")
    if "containerEdits" not in device:
        raise _fail(where, "containerEdits is required")
    if _is_empty(_validate_edits(device["containerEdits"], f"{where}.containerEdits")):
        raise _fail(f"{where}.containerEdits", "must not be empty")


def validate_spec(obj: Any) -> None:
    """Raise CdiSpecError naming the field when a CDI 1.1.0 runtime would refuse the spec `obj`."""
    spec = _check_fields(obj, _SPEC_FIELDS, "top level")
    version = spec.get("cdiVersion")
    if version not in VERSIONS:
        raise _fail("cdiVersion", f"must be one of {', '.join(VERSIONS)}, got {version!r}")
    _validate_kind(spec.get("kind"))
    if "annotations" in spec:
        _string_map(spec["annotations"], "annotations")
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        raise _fail("devices", "at least one device is required")
    seen: set[str] = set()
    for i, device in enumerate(devices):
        _validate_device(device, f"devices[{i}]", seen)
    if "containerEdits" in spec:
        _validate_edits(spec["containerEdits"], "containerEdits")
    required = minimum_version(spec)
    if _version_key(required) > _version_key(version):
        raise _fail("cdiVersion", f"{version} is too old for the fields used; needs at least {required}")


# ------------------------------------------------------------------------------------------------ I/O


def write_claim_spec(cdi_root: Path, claim_uid: str, spec: Mapping[str, Any]) -> Path:
    """Validate and atomically write the claim's spec; returns its path."""
    validate_spec(spec)
    path = claim_spec_path(cdi_root, claim_uid)
    atomic_write(path, yaml.dump(dict(spec), Dumper=_SAFE_DUMPER, sort_keys=False).encode())
    return path


def delete_claim_spec(cdi_root: Path, claim_uid: str) -> bool:
    """Remove the claim's spec; False when there was none."""
    return remove_durably(claim_spec_path(cdi_root, claim_uid))


def load_spec(path: Path) -> dict[str, Any]:
    """Read and validate a spec file (YAML or JSON)."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise CdiSpecError(f"CDI spec {path.name}: not valid YAML/JSON: {exc}") from None
    try:
        validate_spec(data)
    except CdiSpecError as exc:
        raise CdiSpecError(f"{path.name}: {exc}") from None
    return data


def list_claim_specs(cdi_root: Path) -> dict[str, Path]:
    """Claim UID -> spec path for every claim spec this driver wrote (temp files are skipped)."""
    if not cdi_root.is_dir():
        return {}
    found = {}
    for path in sorted(cdi_root.glob(f"{_SPEC_PREFIX}*{SPEC_SUFFIX}")):
        uid = path.name[len(_SPEC_PREFIX) : -len(SPEC_SUFFIX)]
        if uid:
            found[uid] = path
    return found


def is_claim_spec_name(name: str) -> bool:
    """True for the file name of a claim spec this driver writes (`claim_spec_path`)."""
    fixed = len(_SPEC_PREFIX) + len(SPEC_SUFFIX)
    return name.startswith(_SPEC_PREFIX) and name.endswith(SPEC_SUFFIX) and len(name) > fixed
