"""What each container of a pod gets from a claim's CDI spec when containers name different requests.

NVIDIA's quickstart `gpu-test5.yaml` is the input: one claim with two requests (`ts-gpu`, `mps-gpu`)
and four containers, two naming each request. The plugin runs as a process in simulated mode and
prepares the claim through the kubelet client; each container's CDI device IDs are picked from the
answer as kubelet picks them (`container_cdi_device_ids`) and the specs on disk are applied as a CDI
runtime applies them (`cdi_check.inject`, `cdi_check.container_env`).

In simulated mode a container sees the GPUs its `GPU_DEVICE_<n>_UUID` variables name (with
`GPU_DEVICE_<n>=gpu-<n>`), and `NVIDIA_VISIBLE_DEVICES` is `void`. With real GPUs it sees its
devices' nodes (`/dev/nvidia<minor>`), the same split per device.
"""

from __future__ import annotations

import copy
import re
import signal
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from vke_gpu_dra import cdi
from vke_gpu_dra.claims.checkpoint import CheckpointStore, ClaimEntry, ClaimState
from vke_gpu_dra.userspace.edits import ENV_VISIBLE_DEVICES
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device, PreparedDevice
from vke_gpu_dra_core.discovery.simulated import SimulatedSource
from vke_gpu_dra_testing import cdi_check
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet, container_cdi_device_ids
from vke_gpu_dra_testing.plugin_env import NODE, plugin_args, plugin_config, wait_until

from tests.driver.devices import full_gpu
from tests.driver.plugin.test_plugin_process import launch

GPU_TEST5 = Path(__file__).parent.parent / "quickstart" / "gpu-test5.yaml"
CLAIM_UID = "5e0c7a21-9d3b-4f6a-8c1e-2b4d6f8a0c13"
GPUS = 4
#: What the scheduler allocated: one GPU per request.
ALLOCATED = {"ts-gpu": "gpu-0", "mps-gpu": "gpu-1"}
_UUID_VAR = re.compile(rf"^{cdi.ENV_GPU_DEVICE_PREFIX}[0-9A-Z_]+{cdi.ENV_GPU_DEVICE_UUID_SUFFIX}$")


def quickstart() -> tuple[dict[str, Any], dict[str, Any]]:
    """gpu-test5's ResourceClaimTemplate and Pod."""
    docs = {d["kind"]: d for d in yaml.safe_load_all(GPU_TEST5.read_text()) if d}
    return docs["ResourceClaimTemplate"], docs["Pod"]


def allocated_claim(template: Mapping[str, Any], pod: Mapping[str, Any]) -> dict[str, Any]:
    """The claim the control plane makes from the pod's template, allocated on NODE."""
    [pod_claim] = pod["spec"]["resourceClaims"]
    spec = copy.deepcopy(template["spec"]["spec"])
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "namespace": pod["metadata"]["namespace"],
            "name": f"{pod['metadata']['name']}-{pod_claim['name']}-x7k2p",
            "uid": CLAIM_UID,
        },
        "spec": spec,
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": r["name"],
                            "driver": facts.DRIVER_NAME,
                            "pool": NODE,
                            "device": ALLOCATED[r["name"]],
                        }
                        for r in spec["devices"]["requests"]
                    ],
                    "config": [{"source": "FromClaim", **c} for c in spec["devices"]["config"]],
                }
            }
        },
    }


def seen_gpus(env: Mapping[str, str]) -> set[str]:
    """The simulated GPUs (UUIDs) a container's environment names."""
    return {value for name, value in env.items() if _UUID_VAR.match(name)}


def node_specs(cdi_root: Path) -> list[dict[str, Any]]:
    """Every spec a runtime would read from `cdi_root` (the base spec and the claim specs)."""
    return cdi_check.specs_in(cdi_root)


@contextmanager
def running_plugin(root: Path) -> Iterator[Kubelet]:
    """The plugin in simulated mode with both sharing gates (gpu-test5 configures both), registered."""
    args = [
        *plugin_args(root, gpus=GPUS),
        "--feature-gates", "TimeSlicingSettings=true,MPSSupport=true",
        "--image-name", "registry.example.com/vke-gpu-dra:test",
    ]  # fmt: skip
    reg = root / "registry" / f"{facts.DRIVER_NAME}-reg.sock"
    proc = launch(args, module=True)
    try:
        assert wait_until(lambda: reg.exists() or proc.poll() is not None, timeout=30), "no socket"
        assert proc.poll() is None, proc.communicate()
        kubelet = Kubelet(reg)
        kubelet.register()
        yield kubelet
        kubelet.close()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.fixture
def plugin(short_tmp: Path, fake_api: FakeAPIServer) -> Iterator[Kubelet]:
    fake_api.add_node(NODE)
    with running_plugin(short_tmp) as kubelet:
        yield kubelet


def simulated_uuids(root: Path) -> dict[str, str]:
    """Device name -> UUID of the plugin's simulated GPUs (seeded by the node name)."""
    product = plugin_config(root, gpus=GPUS).simulated_product
    return {d.name: d.uuid for d in SimulatedSource(GPUS, product, NODE).discover().devices}


def test_gpu_test5_gives_each_container_one_gpu_of_its_own_request(
    short_tmp: Path, fake_api: FakeAPIServer, plugin: Kubelet
) -> None:
    template, pod = quickstart()
    claim = allocated_claim(template, pod)
    fake_api.add_claim(claim)
    namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
    answer = plugin.prepare([(namespace, name, CLAIM_UID)])[CLAIM_UID]
    assert answer["error"] == ""
    assert [(d["request_names"], d["device_name"]) for d in answer["devices"]] == [
        (["ts-gpu"], "gpu-0"),
        (["mps-gpu"], "gpu-1"),
    ]
    uuids = simulated_uuids(short_tmp)
    specs = node_specs(short_tmp / "cdi")
    [pod_claim] = pod["spec"]["resourceClaims"]
    prepared = {pod_claim["name"]: answer["devices"]}

    seen = {}
    for container in pod["spec"]["containers"]:
        ids = container_cdi_device_ids(container, prepared)
        assert len(ids) == 1, (container["name"], ids)
        env = cdi_check.container_env(cdi_check.inject(specs, ids))
        assert env[ENV_VISIBLE_DEVICES] == "void"
        seen[container["name"]] = seen_gpus(env)
    assert seen == {
        "ts-ctr0": {uuids["gpu-0"]},
        "ts-ctr1": {uuids["gpu-0"]},
        "mps-ctr0": {uuids["gpu-1"]},
        "mps-ctr1": {uuids["gpu-1"]},
    }

    # A container naming the claim without a request gets both devices, and sees both GPUs.
    whole = {"name": "all", "resources": {"claims": [{"name": pod_claim["name"]}]}}
    env = cdi_check.container_env(cdi_check.inject(specs, container_cdi_device_ids(whole, prepared)))
    assert seen_gpus(env) == {uuids["gpu-0"], uuids["gpu-1"]}
    assert (env["GPU_DEVICE_0"], env["GPU_DEVICE_1"]) == ("gpu-0", "gpu-1")

    assert plugin.unprepare([(namespace, name, CLAIM_UID)]) == {CLAIM_UID: ""}
    assert cdi.list_claim_specs(short_tmp / "cdi") == {}


def two_request_claim_spec(devices: list[Device]) -> tuple[dict[str, Any], dict[str, str]]:
    """A claim spec of two devices, and each request's CDI device ID."""
    spec = cdi.build_claim_spec(CLAIM_UID, devices)
    cdi_check.validate_spec(spec)
    ids = {
        request: cdi.claim_device_id(CLAIM_UID, d.name)
        for request, d in zip(("a", "b"), devices, strict=True)
    }
    return spec, ids


def test_real_gpus_split_by_device_nodes_and_never_by_the_environment() -> None:
    gpus = [
        full_gpu(0, "GPU-aaaa", {facts.ATTR_TYPE: "gpu"}),
        full_gpu(3, "GPU-bbbb", {facts.ATTR_TYPE: "gpu"}),
    ]
    spec, ids = two_request_claim_spec(gpus)
    for request, node in (("a", "/dev/nvidia0"), ("b", "/dev/nvidia3")):
        edits = cdi_check.inject([spec], [ids[request]])
        assert cdi_check.container_device_nodes(edits) == [cdi.CONTROL_NODE, node]
        assert cdi_check.container_env(edits)[ENV_VISIBLE_DEVICES] == "void"
    both = cdi_check.inject([spec], [ids["a"], ids["b"]])
    assert cdi_check.container_device_nodes(both) == [cdi.CONTROL_NODE, "/dev/nvidia0", "/dev/nvidia3"]


def test_a_simulated_container_given_both_devices_of_a_request_sees_both() -> None:
    devices = list(SimulatedSource(2, "NVIDIA A30", NODE).discover().devices)
    spec, ids = two_request_claim_spec(devices)
    for order in ([ids["a"], ids["b"]], [ids["b"], ids["a"]]):
        env = cdi_check.container_env(cdi_check.inject([spec], order))
        assert seen_gpus(env) == {d.uuid for d in devices}
    assert spec["devices"][0]["containerEdits"] == {
        "env": ["GPU_DEVICE_0=gpu-0", f"GPU_DEVICE_0_UUID={devices[0].uuid}"]
    }


def test_the_runtime_emulation_lets_a_later_device_override_an_earlier_one() -> None:
    spec = {
        "cdiVersion": "0.3.0",
        "kind": "example.com/x",
        "containerEdits": {"env": ["SHARED=spec", "KEEP=1"]},
        "devices": [
            {"name": "d0", "containerEdits": {"env": ["SHARED=d0"]}},
            {"name": "d1", "containerEdits": {"env": ["SHARED=d1"]}},
        ],
    }
    edits = cdi_check.inject([spec], ["example.com/x=d1", "example.com/x=d0"])
    assert edits["env"] == ["SHARED=spec", "KEEP=1", "SHARED=d1", "SHARED=d0"]  # spec edits once, first
    assert list(cdi_check.container_env(edits, base=["PATH=/bin"]).items()) == [
        ("PATH", "/bin"),
        ("SHARED", "d0"),
        ("KEEP", "1"),
    ]
    with pytest.raises(cdi.CdiSpecError, match=r"unresolvable CDI devices example\.com/x=d2"):
        cdi_check.inject([spec], ["example.com/x=d2"])


def test_kubelet_picks_the_ids_of_the_named_request_or_of_the_whole_claim() -> None:
    devices = [
        {"request_names": ["a"], "cdi_device_ids": ["k/c=1"]},
        {"request_names": ["b/small"], "cdi_device_ids": ["k/c=2"]},
        {"request_names": ["a", "b/small"], "cdi_device_ids": ["k/c=3"]},
    ]

    def ids(*refs: dict[str, str]) -> list[str]:
        return container_cdi_device_ids({"resources": {"claims": list(refs)}}, {"c": devices})

    assert ids({"name": "c", "request": "a"}) == ["k/c=1", "k/c=3"]
    assert ids({"name": "c", "request": "b"}) == ["k/c=2", "k/c=3"]  # a subrequest counts for its request
    assert ids({"name": "c"}) == ["k/c=1", "k/c=2", "k/c=3"]
    assert container_cdi_device_ids({"name": "no-claims"}, {"c": devices}) == []


#: A claim spec as the previous version wrote it: the claim's GPUs in a spec-wide NVIDIA_VISIBLE_DEVICES.
PREVIOUS_SPEC = """\
cdiVersion: 0.5.0
kind: k8s.gpu.nvidia.com/claim
devices:
- name: {uid}-gpu-0
  containerEdits:
    env:
    - GPU_DEVICE_0=gpu-0
- name: {uid}-gpu-1
  containerEdits:
    env:
    - GPU_DEVICE_1=gpu-1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES={uuid0},{uuid1}
  - DRA_RESOURCE_CLAIM_UID={uid}
"""


def test_a_spec_of_the_previous_version_keeps_its_ids_and_is_removed_on_unprepare(
    short_tmp: Path, fake_api: FakeAPIServer
) -> None:
    # What the previous version left on the node: the claim's spec and its completed checkpoint entry.
    template, pod = quickstart()
    claim = allocated_claim(template, pod)
    namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
    uuids = simulated_uuids(short_tmp)
    path = cdi.claim_spec_path(short_tmp / "cdi", CLAIM_UID)
    path.parent.mkdir(parents=True)
    path.write_text(PREVIOUS_SPEC.format(uid=CLAIM_UID, uuid0=uuids["gpu-0"], uuid1=uuids["gpu-1"]))
    previous = cdi_check.load_and_validate(path)
    devices = tuple(
        PreparedDevice((request,), NODE, device, (cdi.claim_device_id(CLAIM_UID, device),))
        for request, device in ALLOCATED.items()
    )
    entry = ClaimEntry(CLAIM_UID, namespace, name, ClaimState.PREPARE_COMPLETED, devices=devices)
    CheckpointStore(short_tmp / "plugins" / facts.DRIVER_NAME).save({CLAIM_UID: entry})
    fake_api.add_node(NODE)
    fake_api.add_claim(claim)

    with running_plugin(short_tmp) as kubelet:
        # kubelet's repeated prepare gets the same CDI IDs, and the spec stays as it was: the claim's
        # containers, also when they restart, get what they got before the upgrade
        answer = kubelet.prepare([(namespace, name, CLAIM_UID)])[CLAIM_UID]
        assert answer["error"] == ""
        assert [d["cdi_device_ids"] for d in answer["devices"]] == [list(d.cdi_device_ids) for d in devices]
        assert cdi_check.load_and_validate(path) == previous
        env = cdi_check.container_env(cdi_check.inject([previous], list(devices[0].cdi_device_ids)))
        assert env[ENV_VISIBLE_DEVICES] == f"{uuids['gpu-0']},{uuids['gpu-1']}"  # the previous layout

        assert kubelet.unprepare([(namespace, name, CLAIM_UID)]) == {CLAIM_UID: ""}
        assert not path.exists()
        # prepared again, the claim gets this version's spec
        answer = kubelet.prepare([(namespace, name, CLAIM_UID)])[CLAIM_UID]
        assert answer["error"] == ""
        env = cdi_check.container_env(
            cdi_check.inject(node_specs(short_tmp / "cdi"), answer["devices"][0]["cdi_device_ids"])
        )
        assert (env[ENV_VISIBLE_DEVICES], seen_gpus(env)) == ("void", {uuids["gpu-0"]})
        assert kubelet.unprepare([(namespace, name, CLAIM_UID)]) == {CLAIM_UID: ""}
