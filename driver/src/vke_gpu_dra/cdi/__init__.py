"""CDI specs: the node's base spec and per-claim specs. Build (lowest `cdiVersion` needed), write atomically,
list, delete.

The base spec, `<cdi_root>/k8s.gpu.nvidia.com-base_node.json`, kind `k8s.gpu.nvidia.com/base`, has one CDI
device per device of the node, named as the device (`k8s.gpu.nvidia.com/base=gpu-0`). It is written at
start (and again when a control or DRM node appears later) and answers every claim without edits of its
own, as NVIDIA's base spec does: such a prepare writes no spec. Its names never collide with NVIDIA's
base spec (`k8s.gpu.nvidia.com/device=gpu-N`) that may be left in the same directory.

A claim whose devices carry edits of their own (MPS pipe and shm, MIG devices created for it, consumable
shares, a claim adopted from NVIDIA's plugin) gets a transient spec,
`<cdi_root>/k8s.gpu.nvidia.com-claim_<claimUID>.yaml`, kind `k8s.gpu.nvidia.com/claim`, one CDI device
`<claimUID>-<deviceName>` per allocated device, removed at unprepare. Claims prepared by an earlier
release all have one; their CDI ids keep naming it.

What a container sees is what its own CDI devices carry. A CDI runtime applies a spec's
`containerEdits` once and then the `containerEdits` of each device the container gets, and for an
environment variable set twice the later value wins. So nothing that tells devices apart is a
spec-level edit: `NVIDIA_VISIBLE_DEVICES` is `void` for the whole spec (as NVIDIA writes it, so an
NVIDIA runtime in legacy mode adds no GPU), a real GPU is its device nodes and a simulated one its
`GPU_DEVICE_<n>=gpu-<n>` and `GPU_DEVICE_<n>_UUID=<uuid>`, names of their own so that a container
given two devices of the claim has both. Two containers naming different requests of one claim
each see only their own request's GPUs. A claim spec also sets `DRA_RESOURCE_CLAIM_UID`; a claim answered
from the base spec has no spec of its own, so its containers get no `DRA_RESOURCE_CLAIM_UID` (NVIDIA's
plugin sets it for no claim: its specs carry no claim UID).

The specs are built from known parts, so they are not validated at every prepare: the tests check
every spec they produce against the CDI 1.1.0 format rules (`vke_gpu_dra_testing.cdi_check`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device

from ..fsutil import atomic_write, remove_durably
from ..userspace.edits import ENV_VISIBLE_DEVICES_VOID

if TYPE_CHECKING:
    from ..userspace import DriverEdits

CLAIM_KIND: Final = f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_CLAIM}"
BASE_KIND: Final = f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_BASE}"
_SPEC_PREFIX: Final = f"{facts.CDI_VENDOR}-{facts.CDI_CLASS_CLAIM}_"
SPEC_SUFFIX: Final = ".yaml"
#: The base spec's file name (CDI's transient spec name of class "base", name "node"). JSON, which a CDI
#: runtime reads as it reads YAML: a plugin whose claims need no spec of their own never loads a YAML library.
BASE_SPEC_NAME: Final = f"{facts.CDI_VENDOR}-{facts.CDI_CLASS_BASE}_node.json"

#: Node every CUDA process needs, and nodes added when present on the host (nvidia-uvm is created lazily).
CONTROL_NODE: Final = "/dev/nvidiactl"
OPTIONAL_CONTROL_NODES: Final = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")

ENV_CLAIM_UID: Final = "DRA_RESOURCE_CLAIM_UID"
ENV_GPU_DEVICE_PREFIX: Final = "GPU_DEVICE_"
ENV_GPU_DEVICE_UUID_SUFFIX: Final = "_UUID"


class CdiSpecError(ValueError):
    """A CDI spec that cannot be built or read, or that a CDI runtime would refuse to load."""


# ----------------------------------------------------------------------------------------------- names


def claim_spec_path(cdi_root: Path, claim_uid: str) -> Path:
    """`<cdi_root>/k8s.gpu.nvidia.com-claim_<uid>.yaml` (CDI's transient spec name; '/' in the id -> '_')."""
    return cdi_root / f"{_SPEC_PREFIX}{claim_uid.replace('/', '_')}{SPEC_SUFFIX}"


def claim_device_name(claim_uid: str, device_name: str, share_id: str | None = None) -> str:
    """`<uid>-<device>`; a consumable share of the device (its allocation's `shareID`) gets its own
    name, `<uid>-<device>-share-<share id>`."""
    if share_id:
        return f"{claim_uid}-{device_name}-share-{share_id}"
    return f"{claim_uid}-{device_name}"


def claim_device_id(claim_uid: str, device_name: str, share_id: str | None = None) -> str:
    """Fully qualified CDI device ID, e.g. `k8s.gpu.nvidia.com/claim=<uid>-gpu-0`."""
    return f"{CLAIM_KIND}={claim_device_name(claim_uid, device_name, share_id)}"


def base_spec_path(cdi_root: Path) -> Path:
    return cdi_root / BASE_SPEC_NAME


def base_device_id(device_name: str) -> str:
    """The device's CDI ID in the base spec, e.g. `k8s.gpu.nvidia.com/base=gpu-0`."""
    return f"{BASE_KIND}={device_name}"


def names_claim_spec(cdi_device_ids: Iterable[str]) -> bool:
    """True when one of the ids names a device of a claim spec (not of the base spec)."""
    return any(i.startswith(f"{CLAIM_KIND}=") for i in cdi_device_ids)


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


def _simulated_device_env(device: Device) -> list[str]:
    """A simulated device's own variables: `GPU_DEVICE_<n>=gpu-<n>`, `GPU_DEVICE_<n>_UUID=<uuid>`."""
    name = f"{ENV_GPU_DEVICE_PREFIX}{_env_suffix(device.name)}"
    return [f"{name}={device.name}", f"{name}{ENV_GPU_DEVICE_UUID_SUFFIX}={device.uuid}"]


def device_edits(device: Device, driver: DriverEdits | None = None) -> dict[str, Any]:
    """The device's own edits; CdiSpecError for a device no spec can describe (a real GPU without nodes)."""
    if device.simulated:
        return {"env": _simulated_device_env(device)}
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
    legacy: dict[str, Any] = {"env": [ENV_VISIBLE_DEVICES_VOID, f"{ENV_CLAIM_UID}={claim_uid}"]}
    if any(not d.simulated for d in devices):
        legacy["deviceNodes"] = [{"path": p} for p in (CONTROL_NODE, *optional_nodes)]
    return legacy


def _merged_edits(
    device: Device, driver: DriverEdits | None, extra: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, Any]:
    edits = device_edits(device, driver)
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
    shares: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The claim's CDI spec.

    With `driver`, its common edits (the driver's user-space, `NVIDIA_VISIBLE_DEVICES=void`, hooks)
    are the spec-level edits and device nodes carry host paths. Without it (simulated mode with no
    fake driver root) the spec sets environment variables and the bare device nodes only, with
    `optional_nodes` the OPTIONAL_CONTROL_NODES present on the host. Either way what tells the
    devices apart is in each device's edits, never spec-wide (see the module's docstring).

    `extra_device_edits` (device name -> env/mounts) are per-claim edits such as MPS's pipe and shm.
    `shares` (device name -> share ids): a device allocated as consumable shares gets one CDI device
    per share (`claim_device_name`), each with the device's edits.
    """
    if not devices:
        raise CdiSpecError(f"claim {claim_uid}: a CDI spec needs at least one device")
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": CLAIM_KIND,
        "devices": [
            {
                "name": claim_device_name(claim_uid, d.name, share),
                "containerEdits": _merged_edits(d, driver, extra_device_edits),
            }
            for d in devices
            for share in (shares or {}).get(d.name) or (None,)
        ],
        "containerEdits": _common_edits(claim_uid, devices, optional_nodes, driver),
    }
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def build_base_spec(
    devices: Sequence[Device], *, optional_nodes: Iterable[str] = (), driver: DriverEdits | None = None
) -> dict[str, Any]:
    """The node's base spec: one CDI device per device, named as the device, with the driver's common
    edits (or, without `driver`, the legacy ones) at spec level and no claim UID."""
    if not devices:
        raise CdiSpecError("the base spec needs at least one device")
    common = _common_edits("", devices, optional_nodes, driver)
    common["env"] = [e for e in common["env"] if not e.startswith(f"{ENV_CLAIM_UID}=")]
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": BASE_KIND,
        "devices": [{"name": d.name, "containerEdits": device_edits(d, driver)} for d in devices],
        "containerEdits": common,
    }
    spec["cdiVersion"] = minimum_version(spec)
    return spec


# ------------------------------------------------------------------------------------- cdiVersion


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


# ------------------------------------------------------------------------------------------------ I/O


def write_claim_spec(cdi_root: Path, claim_uid: str, spec: Mapping[str, Any]) -> Path:
    """Atomically write the claim's spec; returns its path."""
    path = claim_spec_path(cdi_root, claim_uid)
    atomic_write(path, encode_spec(spec))
    return path


def encode_spec(spec: Mapping[str, Any]) -> bytes:
    """A claim spec as YAML (libyaml's safe dumper when PyYAML has it: `yaml.safe_dump`'s output, about 5x
    faster). YAML loads with the first spec of its own a plugin writes."""
    import yaml  # noqa: PLC0415

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(dict(spec), Dumper=dumper, sort_keys=False).encode()


def write_base_spec(cdi_root: Path, spec: Mapping[str, Any]) -> bool:
    """Atomically write the base spec (JSON) unless the file holds it already; True when it was written."""
    path = base_spec_path(cdi_root)
    data = json.dumps(dict(spec), indent=2).encode() + b"\n"
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass  # missing or unreadable: written below
    atomic_write(path, data)
    return True


def delete_claim_spec(cdi_root: Path, claim_uid: str) -> bool:
    """Remove the claim's spec; False when there was none."""
    return remove_durably(claim_spec_path(cdi_root, claim_uid))


def load_spec(path: Path) -> dict[str, Any]:
    """Read a spec file (YAML or JSON): an object with at least one device, or CdiSpecError."""
    import yaml  # noqa: PLC0415  (orphans at start and inspection only)

    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise CdiSpecError(f"CDI spec {path.name}: not valid YAML/JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CdiSpecError(f"{path.name}: CDI spec top level: must be an object, got {type(data).__name__}")
    if not isinstance(data.get("devices"), list) or not data["devices"]:
        raise CdiSpecError(f"{path.name}: CDI spec devices: at least one device is required")
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


def is_spec_name(name: str) -> bool:
    """True for the file name of a spec this driver writes: the base spec or a claim spec."""
    return name == BASE_SPEC_NAME or is_claim_spec_name(name)


def is_claim_spec_name(name: str) -> bool:
    """True for the file name of a claim spec this driver writes (`claim_spec_path`)."""
    fixed = len(_SPEC_PREFIX) + len(SPEC_SUFFIX)
    return name.startswith(_SPEC_PREFIX) and name.endswith(SPEC_SUFFIX) and len(name) > fixed
