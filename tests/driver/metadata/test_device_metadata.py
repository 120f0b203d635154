"""Device metadata for containers (KEP-5304, feature gate DeviceMetadata): the files, their paths and mounts,
through the claim lifecycle as DeviceState runs it (allocation, sharing, metadata, CDI), and each hook."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra import cdi
from vke_gpu_dra import metadata as dm
from vke_gpu_dra.allocation import allocated_devices
from vke_gpu_dra.claims import reboot
from vke_gpu_dra.claims.batch import BatchRunner, Op
from vke_gpu_dra.claims.checkpoint import CheckpointStore, ClaimState
from vke_gpu_dra.claims.lifecycle import ClaimLifecycle
from vke_gpu_dra.claims.step import ClaimWork, Node
from vke_gpu_dra.metadata.step import MetadataStep
from vke_gpu_dra.nodelock import LOCK_FILE, NodeLock
from vke_gpu_dra.state import default_steps
from vke_gpu_dra_core import facts, featuregates
from vke_gpu_dra_core.device_model import ClaimError, ClaimRef, PreparedDevice
from vke_gpu_dra_core.discovery.simulated import SimulatedSource
from vke_gpu_dra_testing.cdi_check import container_env, resolve, specs_in

from tests.driver.claim_objects import claim, result

POOL = "node-a"
DEVICES = SimulatedSource(4, "NVIDIA A30", POOL).discover().devices
BY_NAME = {d.name: d for d in DEVICES}
IN_CONTAINER = "/var/run/kubernetes.io/dra-device-attributes"


class Pipeline:
    """The claim lifecycle with the steps DeviceState gives it (`default_steps`: no takeover, no dynamic
    MIG manager)."""

    def __init__(self, root: Path, *, enabled: bool = True, boot_id: str | None = None) -> None:
        self.cdi_root, self.data = root / "cdi", root / "plugin"
        self.data.mkdir(parents=True, exist_ok=True)
        store = CheckpointStore(self.data)
        gates = featuregates.parse(f"DeviceMetadata={str(enabled).lower()}")
        steps = default_steps(devices=DEVICES, cdi_root=self.cdi_root, plugin_data_dir=self.data, gates=gates)
        [self.metadata] = [s for s in steps if isinstance(s, MetadataStep)]
        self.lifecycle = ClaimLifecycle(
            driver_name=facts.DRIVER_NAME,
            pool_name=POOL,
            devices=BY_NAME,
            store=store,
            cdi_root=self.cdi_root,
            steps=steps,
        )
        lock = NodeLock(self.data / LOCK_FILE)
        self.runner = BatchRunner(lock, self.lifecycle, lambda: str(store.path))
        with lock.held(time.monotonic() + 10):
            self.started = reboot.start(self.lifecycle, self.data, boot_id=boot_id, restore_wait=5.0)

    def prepare(self, ref: ClaimRef, obj: dict[str, Any]) -> list[PreparedDevice]:
        op = self.runner.submit(Op("prepare", ref, obj, time.monotonic() + 10))
        assert op.result is not None
        return op.result

    def unprepare(self, ref: ClaimRef) -> None:
        self.runner.submit(Op("unprepare", ref, None, time.monotonic() + 10))

    def container(self, prepared: list[PreparedDevice], request: str | None = None) -> dict[str, list[Any]]:
        """What a container using the claim (or only `request`) gets, as a CDI runtime applies it."""
        ids = [i for d in prepared if request in (None, *d.request_names) for i in d.cdi_device_ids]
        return resolve(self.cdi_root, ids)

    def file(self, uid: str, request: str) -> Path:
        """The file on the host: under the request as the allocation names it (subrequest included)."""
        return self.data / "dra-device-metadata" / uid / request / "metadata.json"


REF = ClaimRef("default", "c", "uid-1")


def two_requests(uid: str = "uid-1", **kwargs: Any) -> dict[str, Any]:
    """Request `gpu` with gpu-0 and gpu-1; `extra` (prioritized list, subrequest `large`) with gpu-2."""
    return claim(uid, result("gpu-0"), result("gpu-1"), result("gpu-2", request="extra/large"), **kwargs)


def mounts_in(edits: dict[str, list[Any]]) -> dict[str, str]:
    """containerPath -> hostPath of the metadata files among a container's mounts."""
    return {
        m["containerPath"]: m["hostPath"]
        for m in edits["mounts"]
        if m["containerPath"].startswith(IN_CONTAINER)
    }


def objects(path: Path) -> list[dict[str, Any]]:
    """A metadata file as a reader decodes it: a stream of JSON objects."""
    decoder, text, at, found = json.JSONDecoder(), path.read_text(), 0, []
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        obj, at = decoder.raw_decode(text, at)
        found.append(obj)
    return found


# ---------------------------------------------------------------------------------- the gate


def test_gate_is_nvidias_name_off_by_default() -> None:
    assert featuregates.FeatureGates().device_metadata is False
    assert featuregates.parse("DeviceMetadata=true").device_metadata is True
    assert featuregates.DEVICE_METADATA == "DeviceMetadata"


# -------------------------------------------------------------------------- prepare, gate on


def test_each_request_gets_its_file_mounted_where_kubernetes_says(tmp_path: Path) -> None:
    p = Pipeline(tmp_path)
    prepared = p.prepare(REF, two_requests())
    assert all(cdi.names_claim_spec(d.cdi_device_ids) for d in prepared)  # a spec of the claim's own
    specs_in(p.cdi_root)  # every spec valid CDI

    gpu_path = f"{IN_CONTAINER}/resourceclaims/c/gpu/gpu.nvidia.com-metadata.json"
    extra_path = f"{IN_CONTAINER}/resourceclaims/c/extra/gpu.nvidia.com-metadata.json"
    whole = p.container(prepared)
    assert mounts_in(whole) == {
        gpu_path: str(p.file("uid-1", "gpu")),
        extra_path: str(p.file("uid-1", "extra/large")),
    }
    mount = next(m for m in whole["mounts"] if m["containerPath"] == gpu_path)
    assert mount["options"] == ["ro", "bind"]
    # a container that uses one request sees that request's file only
    assert list(mounts_in(p.container(prepared, "gpu"))) == [gpu_path]
    assert list(mounts_in(p.container(prepared, "extra"))) == [extra_path]
    # the devices' own edits are still there
    assert container_env(p.container(prepared, "gpu"))["NVIDIA_VISIBLE_DEVICES"]


def test_file_is_the_same_document_in_v1beta1_then_v1alpha1(tmp_path: Path) -> None:
    p = Pipeline(tmp_path)
    p.prepare(REF, two_requests())
    beta, alpha = objects(p.file("uid-1", "gpu"))
    assert (beta["apiVersion"], alpha["apiVersion"]) == (
        "metadata.resource.k8s.io/v1beta1",
        "metadata.resource.k8s.io/v1alpha1",
    )
    assert beta["kind"] == alpha["kind"] == "DeviceMetadata"
    assert {k: v for k, v in beta.items() if k != "apiVersion"} == {
        k: v for k, v in alpha.items() if k != "apiVersion"
    }
    assert beta["metadata"] == {"name": "c", "namespace": "default", "uid": "uid-1", "generation": 1}
    assert "podClaimName" not in beta
    (request,) = beta["requests"]
    assert request["name"] == "gpu"
    assert [(d["driver"], d["pool"], d["name"]) for d in request["devices"]] == [
        ("gpu.nvidia.com", POOL, "gpu-0"),
        ("gpu.nvidia.com", POOL, "gpu-1"),
    ]
    # the attributes exactly as the ResourceSlice publishes them
    assert request["devices"][0]["attributes"] == BY_NAME["gpu-0"].slice_entry()["attributes"]
    assert request["devices"][0]["attributes"]["uuid"] == {"string": BY_NAME["gpu-0"].uuid}
    # the prioritized list's request is named with its subrequest, in the directory of the request
    (extra,) = objects(p.file("uid-1", "extra/large"))[0]["requests"]
    assert extra["name"] == "extra/large" and [d["name"] for d in extra["devices"]] == ["gpu-2"]


def test_claim_from_a_template_is_under_the_pods_name_for_it(tmp_path: Path) -> None:
    p = Pipeline(tmp_path)
    obj = claim("uid-t", result("gpu-0"), name="pod-gpu-x7k2q")
    obj["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    prepared = p.prepare(ClaimRef("default", "pod-gpu-x7k2q", "uid-t"), obj)
    assert list(mounts_in(p.container(prepared))) == [
        f"{IN_CONTAINER}/resourceclaimtemplates/gpu/gpu/gpu.nvidia.com-metadata.json"
    ]
    doc = objects(p.file("uid-t", "gpu"))[0]
    assert doc["podClaimName"] == "gpu" and doc["metadata"]["name"] == "pod-gpu-x7k2q"


@pytest.mark.parametrize(
    ("results", "annotations", "message"),
    [
        (
            [result("gpu-0", request="Bad_Request")],
            None,
            "request 'Bad_Request' must be a DNS label, or two separated by '/'",
        ),
        (
            [result("gpu-0")],
            {"resource.kubernetes.io/pod-claim-name": "../etc"},
            "annotation resource.kubernetes.io/pod-claim-name='../etc' must be a DNS label",
        ),
    ],
)
def test_names_that_cannot_be_directories_are_refused_before_anything_is_written(
    tmp_path: Path, results: list[dict[str, Any]], annotations: dict[str, str] | None, message: str
) -> None:
    p = Pipeline(tmp_path)
    obj = claim("uid-1", *results)
    if annotations:
        obj["metadata"]["annotations"] = annotations
    with pytest.raises(ClaimError, match=message.replace("(", r"\(")):
        p.prepare(REF, obj)
    assert not (p.data / "dra-device-metadata").exists()
    assert not cdi.claim_spec_path(p.cdi_root, "uid-1").exists()


# ------------------------------------------------------------------------------- gate off


def test_gate_off_no_files_and_the_base_spec_answers(tmp_path: Path) -> None:
    p = Pipeline(tmp_path, enabled=False)
    prepared = p.prepare(REF, two_requests())
    assert not any(cdi.names_claim_spec(d.cdi_device_ids) for d in prepared)
    assert mounts_in(p.container(prepared)) == {}
    assert not (p.data / "dra-device-metadata").exists()


def test_files_of_a_claim_prepared_with_the_gate_on_go_at_unprepare_with_it_off(tmp_path: Path) -> None:
    Pipeline(tmp_path).prepare(REF, two_requests())
    off = Pipeline(tmp_path, enabled=False)
    assert off.file("uid-1", "gpu").is_file()
    off.unprepare(REF)
    assert not (off.data / "dra-device-metadata" / "uid-1").exists()
    assert not cdi.claim_spec_path(off.cdi_root, "uid-1").exists()


# ------------------------------------------------------------------------------- unprepare


def test_unprepare_removes_the_claims_files_only(tmp_path: Path) -> None:
    p = Pipeline(tmp_path)
    p.prepare(REF, two_requests())
    other = ClaimRef("default", "d", "uid-2")
    p.prepare(other, claim("uid-2", result("gpu-3"), name="d"))
    p.unprepare(REF)
    assert not (p.data / "dra-device-metadata" / "uid-1").exists()
    assert p.file("uid-2", "gpu").is_file()
    p.unprepare(REF)  # again: nothing left, no error


# ---------------------------------------------------------------------------------- restore


def test_a_lost_file_is_written_again_at_the_next_prepare(tmp_path: Path) -> None:
    p = Pipeline(tmp_path)
    first = p.prepare(REF, two_requests())
    content = p.file("uid-1", "extra/large").read_bytes()
    p.file("uid-1", "extra/large").unlink()
    assert p.prepare(REF, two_requests()) == first
    assert p.file("uid-1", "extra/large").read_bytes() == content  # subrequest and all, from nothing but disk


def test_a_lost_directory_comes_back_from_the_mounts_of_the_claims_spec(tmp_path: Path) -> None:
    p = Pipeline(tmp_path)
    obj = claim("uid-t", result("gpu-0"), name="pod-gpu-x7k2q")
    obj["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    ref = ClaimRef("default", "pod-gpu-x7k2q", "uid-t")
    p.prepare(ref, obj)
    content = p.file("uid-t", "gpu").read_bytes()
    for path in sorted((p.data / "dra-device-metadata" / "uid-t").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    (p.data / "dra-device-metadata" / "uid-t").rmdir()
    p.prepare(ref, obj)
    assert p.file("uid-t", "gpu").read_bytes() == content  # podClaimName from the mount's path


def test_after_a_reboot_the_rewritten_spec_mounts_the_files_again(tmp_path: Path) -> None:
    p = Pipeline(tmp_path, boot_id="boot-1")
    prepared = p.prepare(REF, two_requests())
    before = mounts_in(p.container(prepared))
    for spec in p.cdi_root.iterdir():  # a reboot empties /var/run/cdi; the plugin data dir stays
        spec.unlink()
    again = Pipeline(tmp_path, boot_id="boot-2")
    assert again.started.reboot is not None and again.started.reboot.restored == ("uid-1",)
    assert mounts_in(again.container(prepared)) == before
    assert objects(again.file("uid-1", "gpu"))[0]["metadata"]["generation"] == 1  # unchanged: not rewritten


def test_a_completed_claim_without_metadata_is_not_given_any(tmp_path: Path) -> None:
    Pipeline(tmp_path, enabled=False, boot_id="boot-1").prepare(REF, two_requests())
    on = Pipeline(tmp_path, boot_id="boot-2")
    assert on.started.reboot is not None and on.started.reboot.restored == ("uid-1",)
    assert not (on.data / "dra-device-metadata").exists()


# ---------------------------------------------------------------------- the hooks on their own


def node() -> Node:
    return Node(facts.DRIVER_NAME, POOL, BY_NAME)


def work_for(obj: dict[str, Any], ref: ClaimRef = REF) -> ClaimWork:
    work = ClaimWork(ref, obj, time.monotonic() + 10)
    work.allocated = allocated_devices(
        ref, obj, driver_name=facts.DRIVER_NAME, pool_name=POOL, devices=BY_NAME
    )
    work.devices = list({a.device.name: a.device for a in work.allocated}.values())
    return work


def test_mounts_are_added_after_the_edits_earlier_steps_gave(tmp_path: Path) -> None:
    step = MetadataStep(tmp_path, tmp_path / "cdi", enabled=True)
    work = work_for(claim("uid-1", result("gpu-0"), result("gpu-1")))
    mps_mount = {"hostPath": "/mps/shm", "containerPath": "/dev/shm", "options": ["rw", "bind"]}
    work.edits = {"gpu-0": {"env": ["CUDA_MPS_PIPE_DIRECTORY=/mps"], "mounts": [mps_mount]}}
    step.admit(work, node())
    assert work.own_spec
    step.set_up(work, node())
    assert work.edits["gpu-0"]["env"] == ["CUDA_MPS_PIPE_DIRECTORY=/mps"]
    assert work.edits["gpu-0"]["mounts"] == [
        mps_mount,
        {
            "hostPath": str(tmp_path / "dra-device-metadata" / "uid-1" / "gpu" / "metadata.json"),
            "containerPath": f"{IN_CONTAINER}/resourceclaims/c/gpu/gpu.nvidia.com-metadata.json",
            "options": ["ro", "bind"],
        },
    ]
    assert "gpu-1" not in work.edits  # one mount per request, on its first device


def test_a_claim_an_earlier_step_answered_gets_nothing(tmp_path: Path) -> None:
    step = MetadataStep(tmp_path, tmp_path / "cdi", enabled=True)
    work = work_for(claim("uid-1", result("gpu-0")))
    work.decided = True  # adopted from NVIDIA's plugin
    step.admit(work, node())
    step.set_up(work, node())
    assert not work.own_spec and work.edits == {}
    assert not (tmp_path / "dra-device-metadata").exists()


def test_restore_rewrites_a_file_whose_devices_changed_with_the_next_generation(tmp_path: Path) -> None:
    step = MetadataStep(tmp_path, tmp_path / "cdi", enabled=True)
    work = work_for(claim("uid-1", result("gpu-0")))
    step.admit(work, node())
    step.set_up(work, node())
    entry = work.entry(ClaimState.PREPARE_COMPLETED)
    path = tmp_path / "dra-device-metadata" / "uid-1" / "gpu" / "metadata.json"
    assert not step.lost(replace(entry, devices=_prepared("gpu-0")), node())
    # a device created again with a new uuid (a dynamic MIG device after a reboot)
    recreated = replace(BY_NAME["gpu-0"], attributes={**BY_NAME["gpu-0"].attributes, "uuid": "GPU-new"})
    restoring = ClaimWork(
        REF,
        {},
        time.monotonic() + 10,
        devices=[recreated],
        restoring=replace(entry, devices=_prepared("gpu-0")),
    )
    step.restore(restoring, node(), time.monotonic() + 10)
    doc = objects(path)[0]
    assert doc["metadata"]["generation"] == 2
    assert doc["requests"][0]["devices"][0]["attributes"]["uuid"] == {"string": "GPU-new"}
    assert [m["hostPath"] for m in restoring.edits["gpu-0"]["mounts"]] == [str(path)]
    # lost: a file of a request is missing
    path.unlink()
    assert step.lost(replace(entry, devices=_prepared("gpu-0")), node())


def test_start_removes_temp_files_of_interrupted_writes_only(tmp_path: Path) -> None:
    request_dir = tmp_path / "dra-device-metadata" / "uid-1" / "gpu"
    request_dir.mkdir(parents=True)
    leftover = request_dir / ".metadata.json.abcd1234.tmp"
    leftover.write_text("{")
    kept = [request_dir / "metadata.json", request_dir / ".other.json.abcd1234.tmp"]
    for path in kept:
        path.write_text("{}")
    step = MetadataStep(tmp_path, tmp_path / "cdi", enabled=False)
    step.start(node())
    assert step.removed_leftovers == [leftover] and not leftover.exists()
    assert all(path.exists() for path in kept)


def test_start_removes_the_directories_of_claims_the_checkpoint_does_not_have(tmp_path: Path) -> None:
    p = Pipeline(tmp_path)
    p.prepare(REF, two_requests())
    stray = p.data / "dra-device-metadata" / "uid-gone" / "gpu"
    stray.mkdir(parents=True)
    (stray / "metadata.json").write_text("{}")
    nvidias = p.data / "dra-device-metadata" / "default_c" / "gpu" / "metadata.json"  # the helper's layout
    nvidias.parent.mkdir(parents=True)
    nvidias.write_text("{}")
    again = Pipeline(tmp_path)
    assert not stray.parent.exists()
    assert again.file("uid-1", "gpu").is_file()
    assert nvidias.is_file()  # NVIDIA's, still mounted for a claim taken over from it


# ------------------------------------------------------------------------------ the pure part


def test_paths_as_kubernetes_builds_them() -> None:
    assert dm.container_path("gpu.nvidia.com", "c", None, "gpu") == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c/gpu/gpu.nvidia.com-metadata.json"
    )
    assert dm.container_path("gpu.nvidia.com", "pod-x", "my-gpu", "gpu") == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/my-gpu/gpu/gpu.nvidia.com-metadata.json"
    )
    for pod_claim in (None, "my-gpu"):
        path = dm.container_path("gpu.nvidia.com", "c", pod_claim, "gpu")
        assert dm.parse_container_path("gpu.nvidia.com", path) == (pod_claim, "gpu")
        assert dm.parse_container_path("other.example.com", path) is None
    assert dm.parse_container_path("gpu.nvidia.com", "/dev/shm") is None
    with pytest.raises(ValueError, match=r"claim uid '\.\.' cannot name a directory"):
        dm.host_dir(Path("/p"), "..")


def test_decode_reads_the_stream_and_refuses_anything_else() -> None:
    doc = {"kind": "DeviceMetadata", "metadata": {"name": "c"}, "requests": []}
    decoded = dm.decode(dm.encode(doc))
    assert [o["apiVersion"] for o in decoded] == list(dm.VERSIONS)
    assert dm.first_known(decoded) == decoded[0]
    assert dm.first_known([{"kind": "DeviceMetadata", "apiVersion": "metadata.resource.k8s.io/v2"}]) is None
    with pytest.raises(ValueError, match="holds JSON objects, found list"):
        dm.decode(b"[1]")


# --------------------------------------------------------------------------------- helpers


def _prepared(*names: str, request: str = "gpu") -> tuple[PreparedDevice, ...]:
    return tuple(PreparedDevice((request,), POOL, n, (f"{cdi.CLAIM_KIND}=uid-1-{n}",)) for n in names)
