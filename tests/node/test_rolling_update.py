"""A rolling update of the driver's DaemonSet while a GPU pod runs, on the real kubelets 1.34.4 and 1.37.2:
`helm upgrade` to another image digest (the same recipe with another revision label). With the chart's
seamless upgrades (kubelet 1.33+: sockets named after the pod, maxSurge 1) the new plugin pod starts beside
the old one and registers, the old one goes; the GPU pod's container runs on untouched (same container, no
restart), and the next claim is prepared by the new plugin.
"""

from __future__ import annotations

import json
from typing import Any

from components import manifests
from tests.integration.cluster import Cluster
from tests.integration.controlplane import wait_until
from tools import driver_image as driver_image_tool

from .chart import CHART, container_id, driver_image, driver_root, helm, release
from .kube import NodePlane, get_or_none, join, kubelet_of
from .node import FIGURES, Node
from .test_chart_daemonset import PLUGIN_LABEL, plugin_log, plugin_pod, sample, sample_pods
from .test_containerd_cdi import probe_image


def ready_plugins(cluster: Cluster) -> list[dict[str, Any]]:
    return [
        p
        for p in cluster.pods(PLUGIN_LABEL)
        if "deletionTimestamp" not in p["metadata"]
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    ]


def test_a_rolling_update_keeps_gpu_pods_and_the_new_plugin_serves_the_next_claim(
    node: Node, plane: NodePlane
) -> None:
    kubelet_of(plane.kubelet)  # skips (one line) before anything is built where it is not there
    first = driver_image()
    second = driver_image_tool.build(revision="rolling-update")  # the same code, another digest
    assert second.digest != first.digest
    for image in (first, second):
        node.import_image(image)
    root = driver_root(node)
    node.import_image(probe_image(node.base / "images" / "probe.tar", root.local("/usr/bin/nvidia-smi")))
    join(node, plane)
    with Cluster.for_test(plane, "rolling-update") as cluster:
        namespace = cluster.namespace

        def values(digest: str) -> dict[str, Any]:
            return {
                "image": {"repository": first.repository, "digest": digest},
                "deviceSource": {"type": "nvml"},
                "nvidiaDriverRoot": str(root.path),
            }

        with release(plane, node, namespace, values(first.digest)):
            old = plugin_pod(cluster, node)
            template, deployment = sample(namespace, replicas=1)
            cluster.apply(template)
            cluster.apply(deployment)
            [gpu_pod] = sample_pods(cluster, node, 1)
            name = gpu_pod["metadata"]["name"]
            cid = container_id(node, namespace, name, manifests.SAMPLE_CONTAINER)

            home = node.base / "helm"
            (home / "upgrade.yaml").write_text(json.dumps(values(second.digest)))
            helm(plane, home, "upgrade", "driver", str(CHART), "--namespace", namespace,
                 "--values", str(home / "upgrade.yaml"))  # fmt: skip

            def rolled() -> dict[str, Any] | None:
                pods = ready_plugins(cluster)
                done = [p for p in pods if p["spec"]["containers"][0]["image"].endswith(second.digest)]
                gone = get_or_none(plane, f"/api/v1/namespaces/{namespace}/pods/{old['metadata']['name']}")
                return done[0] if len(pods) == 1 and done and gone is None else None

            new = wait_until(rolled, timeout=180)
            assert new, f"the rollout did not finish: {[p['status'] for p in cluster.pods(PLUGIN_LABEL)]}"
            assert new["metadata"]["uid"] != old["metadata"]["uid"]
            # the GPU pod ran through it: the same container, never restarted
            [state] = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["status"][
                "containerStatuses"
            ]
            assert state["restartCount"] == 0 and state["containerID"] == f"containerd://{cid}"
            assert container_id(node, namespace, name, manifests.SAMPLE_CONTAINER) == cid
            # the next claim: a second sample pod, prepared by the new plugin
            path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{manifests.SAMPLE_DEPLOYMENT}"
            cluster.api.patch(path, {"spec": {"replicas": 2}})
            pods = sample_pods(cluster, node, 2)
            assert {p["metadata"]["name"] for p in pods} > {name}
            log = plugin_log(node, new)
            assert log.count('"msg": "prepared claim"') == 1, log[-3000:]
            claims = {
                cluster.claim_of(p)["status"]["allocation"]["devices"]["results"][0]["device"] for p in pods
            }
            assert len(claims) == 2, "each pod its own GPU"
    FIGURES.append(f"{plane.label}: a rolling update of the plugin left a GPU pod running")
