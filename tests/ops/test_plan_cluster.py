"""`vke-gpu-dra plan` of a stack on an existing cluster (the `local` stack): the GPU nodes and the
Kubernetes version are read from the cluster (a loopback API server answering as the cluster would),
not invented from node-pool defaults."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from vke_gpu_dra_core import facts
from vke_gpu_dra_ops.__main__ import main
from vke_gpu_dra_ops.cluster_pools import ClusterReadError, pools_from_objects

from . import fake_kube

ROOT = Path(__file__).resolve().parents[2]
A30 = "NVIDIA A30"


def local_stack(tmp_path: Path, kubeconfig: Path) -> Path:
    """The repository's local stack file, its kubeconfigPath aimed at `kubeconfig`."""
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    data = yaml.safe_load((ROOT / "Pulumi.local.yaml").read_text())
    data["config"]["vke-gpu-dra:kubeconfigPath"] = str(kubeconfig)
    path = tmp_path / "Pulumi.local.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def kind_cluster(version: str = "v1.37.2") -> fake_kube.FakeCluster:
    cluster = fake_kube.local_cluster()
    cluster.version = version
    cluster.resource_slices = [fake_kube.resource_slice("kind-control-plane", devices=4, product=A30)]
    return cluster


def plan(
    tmp_path: Path, cluster: fake_kube.FakeCluster, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    with fake_kube.serve(cluster) as url:
        kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig", url, context="kind-vke-gpu-dra")
        code = main(["plan", "--stack-config", str(local_stack(tmp_path, kubeconfig))])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_local_stack_is_planned_on_the_clusters_nodes_and_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = plan(tmp_path, kind_cluster(), capsys)
    assert code == 0, out
    assert out.startswith("Kubernetes 1.37 (")
    assert "  kind-control-plane: nodes of the cluster = 4x NVIDIA A30, 1..1 nodes" in out
    assert "read from the cluster: kind-control-plane publish 4x NVIDIA A30 each" in out
    assert "Deployment default/gpu-test: FITS" in out
    # Nothing invented: no VKE node pool, no instance type of the catalog, no assumed 1.34.
    assert "ecs." not in out and "gpu-dra:" not in out and "1.34" not in out


def test_a_cluster_of_another_version_is_planned_with_its_gates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = plan(tmp_path, kind_cluster("v1.34.4"), capsys)
    assert code == 0, out
    assert out.startswith("Kubernetes 1.34 (")


def test_a_cluster_without_gpus_is_one_error_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = kind_cluster()
    cluster.resource_slices = []
    code, out = plan(tmp_path, cluster, capsys)
    assert code == 2, out
    [line] = out.splitlines()
    assert f"publishes {facts.DRIVER_NAME} devices (ResourceSlices): nothing to plan on" in line


def test_a_cluster_that_cannot_be_reached_is_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9", "kind-vke-gpu-dra")
    code = main(["plan", "--stack-config", str(local_stack(tmp_path, kubeconfig))])
    err = capsys.readouterr().err
    assert code == 2
    [line] = err.splitlines()
    assert line.startswith(f"error: {tmp_path / 'Pulumi.local.yaml'}: the stack's cluster cannot be read: ")
    assert "127.0.0.1:9" in line


def test_nodes_alike_are_one_pool_with_their_shared_labels_and_taints() -> None:
    nodes = [
        fake_kube.node("a", labels={"pool": "gpu", "zone": "1", "node.kubernetes.io/instance-type": "g.x"}),
        fake_kube.node("b", labels={"pool": "gpu", "zone": "2", "node.kubernetes.io/instance-type": "g.x"}),
        fake_kube.node("c", labels={"pool": "big"}),
    ]
    nodes[0]["spec"] = {"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]}
    slices = [
        fake_kube.resource_slice("a", devices=2, product=A30),
        fake_kube.resource_slice("b", devices=2, product=A30),
        fake_kube.resource_slice("c", devices=8, product="NVIDIA H20"),
        fake_kube.resource_slice("c", devices=3, driver="other.example.com", product="X"),
    ]
    [alike, big] = pools_from_objects(nodes, slices)
    assert (alike.name, alike.instance_type, alike.gpus_per_node, alike.min_nodes) == (
        "a and 1 alike",
        "g.x",
        2,
        2,
    )
    assert dict(alike.labels) == {"pool": "gpu", "node.kubernetes.io/instance-type": "g.x"}
    assert alike.taints == (("gpu", "true", "NoSchedule"),)
    assert (big.name, big.product, big.gpus_per_node, big.max_nodes) == ("c", "NVIDIA H20", 8, 1)


def test_devices_without_a_known_product_are_refused_naming_the_node() -> None:
    with pytest.raises(ClusterReadError, match=f"node n: its {facts.DRIVER_NAME} devices name no single"):
        pools_from_objects([], [fake_kube.resource_slice("n", devices=1)])
    with pytest.raises(ClusterReadError, match="node n: unknown GPU product 'NVIDIA Z9'"):
        pools_from_objects([], [fake_kube.resource_slice("n", devices=1, product="NVIDIA Z9")])
