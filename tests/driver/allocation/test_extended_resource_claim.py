"""A pod that asks `nvidia.com/gpu` and no claim: the claim the 1.36 scheduler makes for it prepares.

With the DeviceClass gpu.nvidia.com mapping nvidia.com/gpu (`extendedResourceName`), kube-scheduler's
dynamicresources plugin (KEP-5004) creates one ResourceClaim for the pod's extended resources: named
`<pod>-extended-resources-<random>`, annotated `resource.kubernetes.io/extended-resource-claim: "true"`,
controlled by the pod, one ExactCount request per container and extended resource named
`container-<i>-request-<j>` (i: the container's index in initContainers + containers, j: the resource's
index among the container's sorted request names), and records it in the pod's
`status.extendedResourceClaimStatus`. kubelet hands that claim to the driver like any other.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from vke_gpu_dra.plugin import Plugin
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing import cdi_check
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import NODE, plugin_config

POD = "gpu-test-classic-7c9d8b6f4-x2lqz"
POD_UID = "2f6c1d1e-8a4b-4c1e-9f1a-6d3b2a1c0e9f"
CLAIM = f"{POD}-extended-resources-k8p4t"
CLAIM_UID = "9b0e4a52-3c1d-4f7e-8a2b-5c6d7e8f9a01"
#: The classic sample's one container (index 0), whose only request is nvidia.com/gpu (index 0).
REQUEST = "container-0-request-0"
#: A sidecar-style pod: an init container first, then a container requesting cpu and nvidia.com/gpu
#: (sorted: cpu, nvidia.com/gpu), so the GPU request is container 1's request 1.
REQUEST_AFTER_INIT = "container-1-request-1"


def scheduler_pod(container_requests: dict[str, str], *, init: bool, request: str) -> dict[str, Any]:
    """The pod as the API server holds it once the scheduler has bound it and recorded its claim."""
    worker: dict[str, Any] = {
        "name": "test",
        "image": "doc-cn-beijing.cr.volces.com/vke/gpu-burn:1.0",
        "resources": {"limits": {facts.GPU_EXTENDED_RESOURCE: "1"}, "requests": dict(container_requests)},
    }
    spec: dict[str, Any] = {"containers": [worker], "nodeName": NODE}
    if init:
        spec["initContainers"] = [{"name": "setup", "image": "busybox:1.36"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": "default", "uid": POD_UID},
        "spec": spec,
        "status": {
            "extendedResourceClaimStatus": {
                "resourceClaimName": CLAIM,
                "requestMappings": [
                    {
                        "containerName": "test",
                        "resourceName": facts.GPU_EXTENDED_RESOURCE,
                        "requestName": request,
                    }
                ],
            }
        },
    }


def scheduler_claim(request: str, device: str) -> dict[str, Any]:
    """The ResourceClaim kube-scheduler creates for the pod's nvidia.com/gpu, allocated and reserved."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": CLAIM,
            "generateName": f"{POD}-extended-resources-",
            "namespace": "default",
            "uid": CLAIM_UID,
            "annotations": {facts.EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": POD,
                    "uid": POD_UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": request,
                        "exactly": {
                            "deviceClassName": facts.DEVICE_CLASS_GPU.name,
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": request, "driver": facts.DRIVER_NAME, "pool": NODE, "device": device}
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": POD, "uid": POD_UID}],
        },
    }


@pytest.fixture
def plugin(short_tmp: Path, fake_api: FakeAPIServer) -> Iterator[Plugin]:
    fake_api.add_node(NODE)
    p = Plugin(plugin_config(short_tmp), stop_grace=5)
    p.start()
    yield p
    p.stop()


@pytest.fixture
def kubelet(plugin: Plugin) -> Iterator[Kubelet]:
    k = Kubelet(plugin.registration_socket)
    k.register()
    yield k
    k.close()


@pytest.mark.parametrize(
    ("requests", "init", "request_name"), [({}, False, REQUEST), ({"cpu": "100m"}, True, REQUEST_AFTER_INIT)]
)
def test_the_shapes_pass_the_136_schemas(requests: dict[str, str], init: bool, request_name: str) -> None:
    """The objects this test builds are valid 1.36 API objects (the pod's status field is new in 1.34)."""
    kubernetes_validate.validate(scheduler_claim(request_name, "gpu-0"), "1.36", strict=True)
    pod = scheduler_pod(requests, init=init, request=request_name)
    kubernetes_validate.validate(pod, "1.36", strict=True)
    # the scheduler's naming: the container's index in initContainers + containers, the resource's
    # index among the container's sorted request names
    containers = pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
    index = next(i for i, c in enumerate(containers) if c["name"] == "test")
    names = sorted({**containers[index]["resources"]["requests"], **containers[index]["resources"]["limits"]})
    assert request_name == f"container-{index}-request-{names.index(facts.GPU_EXTENDED_RESOURCE)}"


@pytest.mark.parametrize(
    "case",
    [(v, n) for v in ("v1", "v1beta1") for n in (REQUEST, REQUEST_AFTER_INIT)],
    ids="-".join,
)
def test_scheduler_made_claim_prepares_and_unprepares(
    plugin: Plugin, kubelet: Kubelet, fake_api: FakeAPIServer, short_tmp: Path, case: tuple[str, str]
) -> None:
    version, request_name = case
    fake_api.add_claim(scheduler_claim(request_name, "gpu-3"))
    result = kubelet.prepare([("default", CLAIM, CLAIM_UID)], version=version)
    assert result[CLAIM_UID]["error"] == ""
    (device,) = result[CLAIM_UID]["devices"]
    assert (device["pool_name"], device["device_name"]) == (NODE, "gpu-3")
    assert device["request_names"] == [request_name]
    assert device["cdi_device_ids"] and all(
        i.startswith(f"{facts.CDI_VENDOR}/") for i in device["cdi_device_ids"]
    )
    assert plugin.state is not None and CLAIM_UID in plugin.state.prepared()
    env = cdi_check.container_env(cdi_check.resolve(short_tmp / "cdi", device["cdi_device_ids"]))
    assert env["GPU_DEVICE_3"] == "gpu-3"  # the ids resolve to the device on the node
    assert kubelet.unprepare([("default", CLAIM, CLAIM_UID)], version=version) == {CLAIM_UID: ""}
    assert plugin.state.prepared() == {}
    assert not list((short_tmp / "cdi").glob(f"*{CLAIM_UID}*"))
