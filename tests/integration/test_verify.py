"""`vke-gpu-dra verify` (the CLI process) against the real control plane: the driver deployed from the
chart, its pod Running as kubelet reports it, the sample allocated by the real scheduler."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from .cluster import TEST_LABEL, Cluster
from .controlplane import free_port, wait_until
from .test_driver import claim_template, start_on_node

VKE_GPU_DRA = Path(sys.executable).with_name("vke-gpu-dra")


def verify(kubeconfig: Path, namespace: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    result = subprocess.run(
        [str(VKE_GPU_DRA), "verify", "--kubeconfig", str(kubeconfig), "-n", namespace,
         "--workload-namespace", namespace, "--interval", "1", "-o", "json", *extra],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return result.returncode, json.loads(result.stdout) if result.stdout else {}, result.stderr


def sample_deployment(namespace: str) -> dict[str, Any]:
    """The procedure's sample: Deployment gpu-test with a claim from template single-gpu."""
    labels = {"app": "gpu-test"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gpu-test"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {TEST_LABEL: namespace},
                    "containers": [{"name": "ctr", "image": "busybox", "command": ["nvidia-smi", "-L"],
                                    "resources": {"claims": [{"name": "gpu"}]}}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}],
                },
            },
        },
    }  # fmt: skip


def test_verify_passes_on_a_working_cluster_and_names_what_breaks(cluster: Cluster) -> None:
    _, node = start_on_node(cluster)
    cluster.apply(claim_template("single-gpu"))
    cluster.apply(sample_deployment(cluster.namespace))
    [pod] = wait_until(lambda: [p for p in cluster.pods("app=gpu-test") if p["spec"].get("nodeName")], 60)
    cluster.mark_running(pod)

    code, doc, stderr = verify(cluster.plane.kubeconfig, cluster.namespace, "--timeout", "30")
    assert code == 0, (doc, stderr)
    assert doc["result"] == "pass" and doc["nodeSelector"] == f"{TEST_LABEL}={cluster.namespace}"
    steps = {s["id"]: s for s in doc["steps"]}
    assert {k for k, s in steps.items() if s["status"] == "pass"} == {
        "api-resources", "driver-pods", "device-classes", "resource-slices", "device-health",
        "device-taint-rules", "no-device-plugin-capacity", "sample-claim", "sample-pod",
    }  # fmt: skip
    assert steps["sample-log"]["status"] == "skip" and steps["sample-log"]["waived"]
    assert f"{node['metadata']['name']}: 4 (gpu-0" in steps["resource-slices"]["found"]
    assert f"reserved for {pod['metadata']['name']}" in steps["sample-claim"]["found"]

    # A second GPU node joins without the driver: verify fails, naming it, with exit code 1.
    bare = cluster.add_node("bare")["metadata"]["name"]
    code, doc, stderr = verify(cluster.plane.kubeconfig, cluster.namespace, "--timeout", "0")
    assert code == 1, (doc, stderr)
    assert doc["result"] == "fail"
    steps = {s["id"]: s for s in doc["steps"]}
    assert steps["driver-pods"]["status"] == "fail"
    assert f"node {bare}: no driver pod in namespace {cluster.namespace}" in steps["driver-pods"]["found"]
    assert f"node {bare}: no ResourceSlice of" in steps["resource-slices"]["found"]


def test_verify_exits_2_when_the_cluster_cannot_be_reached(cluster: Cluster) -> None:
    kubeconfig = cluster.tmp / "unreachable"
    cluster.plane.write_kubeconfig(kubeconfig, "no-token")
    text = kubeconfig.read_text().replace(cluster.plane.server, f"https://127.0.0.1:{free_port()}")
    kubeconfig.write_text(text)
    code, doc, stderr = verify(kubeconfig, cluster.namespace, "--timeout", "0")
    assert code == 2
    assert doc["result"] == "error" and doc["error"]
    assert stderr.startswith("vke-gpu-dra verify: error: ")


def test_verify_exits_2_for_a_token_the_server_refuses(cluster: Cluster) -> None:
    kubeconfig = cluster.plane.write_kubeconfig(cluster.tmp / "bad-token", "not-a-token")
    code, doc, stderr = verify(kubeconfig, cluster.namespace, "--timeout", "0")
    assert code == 2, (doc, stderr)
    assert doc["result"] == "error" and "401" in doc["error"]
