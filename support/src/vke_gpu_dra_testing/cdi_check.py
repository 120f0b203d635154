"""The CDI 1.1.0 format rules, checked on every CDI spec the tests produce.

The driver builds its claim specs from known parts and does not validate them at prepare time; the
tests hold it to what a CDI runtime (container-device-interface 1.1.0) accepts when it loads a
spec: required fields, kind and device-name syntax, no unknown fields, non-empty device edits, and a
`cdiVersion` at least the one the fields used need (the driver's `cdi.minimum_version`).
`validate_spec` raises the driver's `CdiSpecError` naming the field.

`inject` and `container_env` apply specs to one container as a CDI runtime does
(container-device-interface's `Cache.InjectDevices` and runtime-tools' `AddMultipleProcessEnv`), so
tests can say what each container of a pod gets.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml
from vke_gpu_dra.cdi import CdiSpecError, minimum_version

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
    if VERSIONS.index(required) > VERSIONS.index(version):
        raise _fail("cdiVersion", f"{version} is too old for the fields used; needs at least {required}")


def load_and_validate(path: Path) -> dict[str, Any]:
    """Read a spec file (YAML or JSON) and validate it; CdiSpecError names the file."""
    data = yaml.safe_load(path.read_text())
    try:
        validate_spec(data)
    except CdiSpecError as exc:
        raise CdiSpecError(f"{path.name}: {exc}") from None
    return data


# ------------------------------------------------------------------- applying specs to one container

_MERGED_LISTS: Final = ("env", "deviceNodes", "mounts", "hooks", "additionalGids", "netDevices")


def _qualified(spec: Mapping[str, Any], device: Mapping[str, Any]) -> str:
    return f"{spec['kind']}={device['name']}"


def inject(specs: Iterable[Mapping[str, Any]], device_ids: Sequence[str]) -> dict[str, list[Any]]:
    """The container edits a CDI runtime applies for `device_ids` (fully qualified, in the order given).

    As container-device-interface's `Cache.InjectDevices`: for each device, its spec's own
    `containerEdits` the first time a device of that spec is met, then the device's
    `containerEdits`; the lists are concatenated in that order (`ContainerEdits.Append`). An id no
    spec defines raises CdiSpecError, as the runtime refuses the container.
    """
    by_id: dict[str, tuple[int, Mapping[str, Any], Mapping[str, Any]]] = {}
    for index, spec in enumerate(specs):
        for device in spec.get("devices") or []:
            by_id[_qualified(spec, device)] = (index, spec, device)
    unresolved = [d for d in device_ids if d not in by_id]
    if unresolved:
        raise CdiSpecError(f"unresolvable CDI devices {', '.join(unresolved)}")
    merged: dict[str, list[Any]] = {key: [] for key in _MERGED_LISTS}
    seen: set[int] = set()
    for device_id in device_ids:
        index, spec, device = by_id[device_id]
        parts = [device.get("containerEdits") or {}]
        if index not in seen:
            seen.add(index)
            parts.insert(0, spec.get("containerEdits") or {})
        for edits in parts:
            for key in _MERGED_LISTS:
                merged[key].extend(edits.get(key) or [])
    return merged


def specs_in(cdi_root: Path) -> list[dict[str, Any]]:
    """Every spec of a CDI directory as a runtime reads it (`*.yaml` and `*.json`, hidden temp files
    skipped), each validated."""
    paths = sorted(
        p for p in cdi_root.glob("*") if p.suffix in (".yaml", ".json") and not p.name.startswith(".")
    )
    return [load_and_validate(p) for p in paths]


def resolve(cdi_root: Path, device_ids: Sequence[str]) -> dict[str, list[Any]]:
    """The container edits a runtime applies for `device_ids` from the specs in `cdi_root` (`inject`)."""
    return inject(specs_in(cdi_root), device_ids)


def container_env(edits: Mapping[str, Sequence[str]], base: Sequence[str] = ()) -> dict[str, str]:
    """The container's environment after `edits` (from `inject`) are applied over `base`.

    As runtime-tools' `AddMultipleProcessEnv`: a variable set again takes the later value in the
    place where it was first set, so of several devices setting one name only the last counts.
    """
    env: dict[str, str] = {}
    for entry in [*base, *edits.get("env", [])]:
        name, _, value = entry.partition("=")
        env[name] = value
    return env


def container_device_nodes(edits: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """The container paths of the device nodes `edits` add (a path added again replaces the earlier one)."""
    paths: dict[str, None] = {}
    for node in edits.get("deviceNodes", []):
        paths.pop(node["path"], None)
        paths[node["path"]] = None
    return list(paths)
