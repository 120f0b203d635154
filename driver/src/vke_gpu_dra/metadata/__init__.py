"""Device metadata for containers (KEP-5304, feature gate DeviceMetadata): pure builders, no I/O.

A claim prepared with the gate on gets, for each of its requests, one JSON file that lists the request's
devices of this driver with their attributes as the ResourceSlice publishes them. The file is mounted
read-only into the containers that use the request, at the path Kubernetes defines
(k8s.io/dynamic-resource-allocation `api/metadata`, `ResourceClaimFilePath` /
`ResourceClaimTemplateFilePath`):

* a claim the pod names (`resourceClaimName`):
  `/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json`;
* a claim made from the pod's template (the claim has the annotation
  `resource.kubernetes.io/pod-claim-name`): `.../resourceclaimtemplates/<pod claim name>/<request>/...`.

`<request>` is the request without its `/subrequest` part (a prioritized list); the document names the
request as the allocation result does, subrequest included. The file is a stream of JSON objects, the same
`DeviceMetadata` once per API version this driver writes, newest first (`VERSIONS`): readers take the first
object whose `apiVersion` they know. On the host each file is
`<plugin data dir>/dra-device-metadata/<claim uid>/<request>[/<subrequest>]/metadata.json` (`host_path`):
the request as the allocation names it, so the mount in the claim's CDI spec still tells it when the file
is lost.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, Device, render_attribute
from vke_gpu_dra_core.object_names import is_dns_label
from vke_gpu_dra_core.objects import lookup

#: The metadata API group (k8s.io/dynamic-resource-allocation `api/metadata`).
GROUP: Final = "metadata.resource.k8s.io"
KIND: Final = "DeviceMetadata"
#: The versions written, newest first: v1beta1 (Kubernetes 1.37) and v1alpha1 for readers built against
#: 1.36 (KubeVirt 1.8), as NVIDIA's plugin writes them. Both have the same fields.
VERSIONS: Final = (f"{GROUP}/v1beta1", f"{GROUP}/v1alpha1")

#: Where the files are mounted in containers, and the two directories under it.
CONTAINER_DIR: Final = "/var/run/kubernetes.io/dra-device-attributes"
CLAIMS_SUBDIR: Final = "resourceclaims"
TEMPLATES_SUBDIR: Final = "resourceclaimtemplates"
#: Appended to the driver name to name the file in a container.
FILE_SUFFIX: Final = "-metadata.json"

#: The directory of the files on the host, under the plugin data directory, and each file's name.
HOST_SUBDIR: Final = "dra-device-metadata"
HOST_FILE: Final = "metadata.json"

#: The mount options of a metadata file (read-only bind mount, as Kubernetes' helper writes it).
MOUNT_OPTIONS: Final = ("ro", "bind")


@dataclass(frozen=True)
class RequestDevices:
    """One request of a claim with its devices of this driver, in allocation order."""

    #: The request as the allocation result names it (`<request>/<subrequest>` for a prioritized list).
    request: str
    #: Device names, one per allocation result (a device allocated as two shares appears twice).
    devices: tuple[str, ...]

    @property
    def base(self) -> str:
        """The request without its subrequest: the directory of its file in containers."""
        return base_request(self.request)


def base_request(request: str) -> str:
    return request.split("/", 1)[0]


def pod_claim_name(ref: ClaimRef, claim: Mapping[str, Any]) -> str | None:
    """The pod's name for a claim made from its template (the claim's annotation), else None; ClaimError
    when the annotation is not a DNS label (it becomes a directory in the container)."""
    annotations = lookup(claim, "metadata", "annotations")
    if not isinstance(annotations, Mapping):
        return None
    value = annotations.get(facts.POD_CLAIM_NAME_ANNOTATION)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not is_dns_label(value):
        raise ClaimError(
            f"claim {ref.namespace}/{ref.name}: annotation {facts.POD_CLAIM_NAME_ANNOTATION}={value!r} "
            "must be a DNS label (the pod's name for the claim)"
        )
    return value


def requests_of(ref: ClaimRef, results: Iterable[tuple[str, str]]) -> list[RequestDevices]:
    """The claim's requests from its allocation results as (request, device name) pairs, in order; a
    ClaimError names a request that is not `<DNS label>` or `<DNS label>/<DNS label>` (each names a
    directory)."""
    names: dict[str, str] = {}
    devices: dict[str, list[str]] = {}
    for request, device in results:
        base = base_request(request)
        if not all(is_dns_label(part) for part in request.split("/")) or request.count("/") > 1:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name}: request {request!r} must be a DNS label, or two "
                "separated by '/' (request/subrequest), to name its device metadata directory"
            )
        names.setdefault(base, request)
        devices.setdefault(base, []).append(device)
    return [RequestDevices(names[b], tuple(devices[b])) for b in names]


# ------------------------------------------------------------------------------------------- paths


def container_path(driver_name: str, claim_name: str, pod_claim: str | None, request: str) -> str:
    """Where a request's file is in a container (`request` without its subrequest)."""
    subdir, name = (TEMPLATES_SUBDIR, pod_claim) if pod_claim else (CLAIMS_SUBDIR, claim_name)
    return str(PurePosixPath(CONTAINER_DIR, subdir, name, request, driver_name + FILE_SUFFIX))


def parse_container_path(driver_name: str, path: str) -> tuple[str | None, str] | None:
    """(pod claim name or None, request) of a path `container_path` made for `driver_name`; None for
    any other path."""
    parts = PurePosixPath(path).parts
    root = PurePosixPath(CONTAINER_DIR).parts
    if len(parts) != len(root) + 4 or parts[: len(root)] != root:
        return None
    subdir, name, request, file = parts[len(root) :]
    if file != driver_name + FILE_SUFFIX or subdir not in (CLAIMS_SUBDIR, TEMPLATES_SUBDIR):
        return None
    return (name if subdir == TEMPLATES_SUBDIR else None), request


def host_root(plugin_data_dir: Path) -> Path:
    """The directory of every claim's metadata files."""
    return plugin_data_dir / HOST_SUBDIR


def host_dir(plugin_data_dir: Path, claim_uid: str) -> Path:
    """The directory of one claim's files (removed whole when the claim is unprepared)."""
    if claim_uid in ("", ".", ".."):
        raise ValueError(f"claim uid {claim_uid!r} cannot name a directory")
    return host_root(plugin_data_dir) / claim_uid.replace("/", "_")


def host_path(plugin_data_dir: Path, claim_uid: str, request: str) -> Path:
    """`<plugin data dir>/dra-device-metadata/<claim uid>/<request>[/<subrequest>]/metadata.json`
    (`request` as the allocation names it)."""
    return host_dir(plugin_data_dir, claim_uid).joinpath(*request.split("/"), HOST_FILE)


def host_files(plugin_data_dir: Path, claim_uid: str, base: str) -> list[Path]:
    """The files on the host of request `base` (without a subrequest, or with one)."""
    directory = host_dir(plugin_data_dir, claim_uid) / base
    return [p for p in (directory / HOST_FILE, *sorted(directory.glob(f"*/{HOST_FILE}"))) if p.is_file()]


def request_of_host_path(plugin_data_dir: Path, claim_uid: str, path: str | Path) -> str | None:
    """The request (subrequest included) of a path `host_path` made for the claim, else None."""
    try:
        parts = Path(path).relative_to(host_dir(plugin_data_dir, claim_uid)).parts
    except ValueError:
        return None
    if not 2 <= len(parts) <= 3 or parts[-1] != HOST_FILE:
        return None
    return "/".join(parts[:-1])


def mount(host: Path, container: str) -> dict[str, Any]:
    """The CDI mount of one file."""
    return {"hostPath": str(host), "containerPath": container, "options": list(MOUNT_OPTIONS)}


# ---------------------------------------------------------------------------------------- documents


def document(
    ref: ClaimRef,
    pod_claim: str | None,
    request: RequestDevices,
    *,
    driver_name: str,
    pool_name: str,
    devices: Mapping[str, Device],
    generation: int = 1,
) -> dict[str, Any]:
    """The `DeviceMetadata` of one request, without `apiVersion` (`encode` adds it per version).
    `devices`: the claim's devices by name, as set up (a created MIG device with its own attributes)."""
    doc: dict[str, Any] = {
        "kind": KIND,
        "metadata": {
            "name": ref.name,
            "namespace": ref.namespace,
            "uid": ref.uid,
            "generation": generation,
        },
    }
    if pod_claim:
        doc["podClaimName"] = pod_claim
    doc["requests"] = [
        {
            "name": request.request,
            "devices": [_device(driver_name, pool_name, devices[name]) for name in request.devices],
        }
    ]
    return doc


def _device(driver_name: str, pool_name: str, device: Device) -> dict[str, Any]:
    entry: dict[str, Any] = {"driver": driver_name, "pool": pool_name, "name": device.name}
    if device.attributes:
        entry["attributes"] = {k: render_attribute(v) for k, v in sorted(device.attributes.items())}
    return entry


def encode(doc: Mapping[str, Any], versions: Sequence[str] = VERSIONS) -> bytes:
    """The file's bytes: `doc` once per version in `versions` order, each an indented JSON object
    followed by a newline."""
    objects = []
    for version in versions:
        versioned = {
            "kind": doc["kind"],
            "apiVersion": version,
            **{k: v for k, v in doc.items() if k != "kind"},
        }
        objects.append(json.dumps(versioned, indent=2) + "\n")
    return "".join(objects).encode()


def decode(data: bytes) -> list[dict[str, Any]]:
    """The objects of a metadata file, in order; ValueError when it is not a stream of JSON objects."""
    text = data.decode()
    decoder = json.JSONDecoder()
    objects: list[dict[str, Any]] = []
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return objects
        obj, at = decoder.raw_decode(text, at)
        if not isinstance(obj, dict):
            raise ValueError(f"a metadata file holds JSON objects, found {type(obj).__name__}")
        objects.append(obj)


def first_known(objects: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first object in a version this driver writes (what a reader does), else None."""
    return next((o for o in objects if o.get("apiVersion") in VERSIONS and o.get("kind") == KIND), None)
