"""A damaged checkpoint against the real API server: the plugin process (simulated GPUs) with kubelet's
stand-ins (the DRA client, its PodResources API). Claim a lives only in the checkpoint file (prepared before
a clean restart folded it), claim b only in the journal (prepared after it, then kill -9). Whatever the
damage, neither GPU is ever prepared for a second exclusive claim: a corrupt file is read from its copy and
keeps both; with the copy gone too, claim a is recovered through kubelet and the API server before any new
claim is prepared, and holds its GPU."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from vke_gpu_dra.claims.checkpoint import BACKUP_FILE, CHECKPOINT_FILE, LOST_FILE
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.fake_pod_resources import FakePodResources, UsedClaim
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import CORRUPTIONS

from .cluster import Cluster
from .controlplane import wait_until

JSON = dict[str, Any]


def allocated_claim(cluster: Cluster, name: str, node: str, device: str) -> JSON:
    """A ResourceClaim allocated `device` of `node`'s pool, its allocation written as the scheduler would."""
    request = {"name": "gpu", "exactly": {"deviceClassName": facts.DEVICE_CLASS_GPU.name, "count": 1}}
    result = {"request": "gpu", "driver": facts.DRIVER_NAME, "pool": node, "device": device}
    return cluster.allocated_claim(name, node, [request], [result])


class Node:
    """One node: the plugin process with kubelet's DRA client and PodResources API beside it."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.pod_resources = FakePodResources(cluster.tmp / "pod-resources.sock").start()
        self.objects = cluster.install_chart()
        self.plugin, node = cluster.driver_on_new_node(
            objects=self.objects, extra_args=["--pod-resources-socket", str(self.pod_resources.socket)]
        )
        self.name = node["metadata"]["name"]
        self.data = self.plugin.root / "plugins" / facts.DRIVER_NAME
        self.kubelet = Kubelet(self.plugin.registration_socket)
        self.kubelet.register()
        #: The logs of the plugin's earlier runs, oldest first.
        self.logs: list[str] = []

    def restart(self, *, kill: bool, while_down: Callable[[], None] | None = None) -> None:
        """Stop the plugin (SIGTERM: a clean stop that folds the journal; or kill -9), do `while_down`
        (damage its files, as a bad day does while nothing runs), start it again on the same node and
        directories and wait until it serves kubelet's calls."""
        self.kubelet.close()
        if kill:
            self.plugin.process.send_signal(signal.SIGKILL)
            self.plugin.process.wait(timeout=30)
        else:
            code, log = self.plugin.stop()
            assert code == 0, log
        self.logs.append(self.plugin.log)
        if while_down is not None:
            while_down()
        self.plugin = self.cluster.restart_plugin(self.plugin)
        serving = wait_until(
            lambda: "serving kubelet's calls" in self.plugin.log or self.plugin.process.poll() is not None,
            timeout=60,
        )
        assert serving and self.plugin.process.poll() is None, self.plugin.log
        self.kubelet = Kubelet(self.plugin.registration_socket)
        self.kubelet.register()

    def prepare(self, claim: JSON) -> str:
        """The error of kubelet's prepare of `claim` ("" when it was prepared)."""
        uid = claim["metadata"]["uid"]
        answer = self.kubelet.prepare([(self.cluster.namespace, claim["metadata"]["name"], uid)])
        return str(answer[uid]["error"])

    def close(self) -> None:
        self.kubelet.close()
        self.pod_resources.stop()


@pytest.fixture
def node(cluster: Cluster) -> Iterator[Node]:
    made = Node(cluster)
    try:
        yield made
    finally:
        made.close()


def a_in_the_file_b_in_the_journal(node: Node) -> tuple[JSON, JSON]:
    a = allocated_claim(node.cluster, "a", node.name, "gpu-0")
    b = allocated_claim(node.cluster, "b", node.name, "gpu-1")
    assert node.prepare(a) == "", node.plugin.log
    node.restart(kill=False)  # the clean stop folds claim a into the file
    assert node.prepare(b) == "", node.plugin.log  # claim b: a journal record only
    node.pod_resources.add_pod(node.cluster.namespace, "pod-a", ctr=[UsedClaim("a", [(node.name, "gpu-0")])])
    node.pod_resources.add_pod(node.cluster.namespace, "pod-b", ctr=[UsedClaim("b", [(node.name, "gpu-1")])])
    return a, b


def held(device: str, holder: str) -> str:
    return f"device(s) {device} are prepared on this node for claim {holder}"


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_checkpoint_never_hands_a_prepared_gpu_to_a_second_claim(
    cluster: Cluster, node: Node, corruption: str
) -> None:
    a, b = a_in_the_file_b_in_the_journal(node)
    ns = cluster.namespace
    c = allocated_claim(cluster, "c", node.name, "gpu-0")  # a's GPU, as an inconsistent API would hand out
    d = allocated_claim(cluster, "d", node.name, "gpu-1")  # b's GPU

    def damage(*names: str) -> Callable[[], None]:
        def run() -> None:
            for name in names:
                path = node.data / name
                damaged = CORRUPTIONS[corruption](path.read_bytes())
                assert damaged != path.read_bytes(), f"{corruption} left {name} as it was"
                path.write_bytes(damaged)

        return run

    # The file corrupt: its copy keeps both claims.
    node.restart(kill=True)  # b still only in the journal; the start folds both into the file
    node.restart(kill=True, while_down=damage(CHECKPOINT_FILE))
    assert "read its copy" in node.plugin.log
    assert held("gpu-0", f"{ns}/a") in node.prepare(c)
    assert held("gpu-1", f"{ns}/b") in node.prepare(d)
    assert not (node.data / LOST_FILE).exists()

    # The file and its copy unusable: claim a (in the file only) is recovered through kubelet and the API
    # server before any new claim is prepared, and holds its GPU; b comes back from the journal.
    node.restart(kill=True, while_down=damage(CHECKPOINT_FILE, BACKUP_FILE))
    assert wait_until(lambda: not (node.data / LOST_FILE).exists(), timeout=30), node.plugin.log
    assert held("gpu-0", f"{ns}/a") in node.prepare(c)
    assert held("gpu-1", f"{ns}/b") in node.prepare(d)
    log = node.plugin.log
    assert "and its copy unusable" in log
    assert "claim recovered after the checkpoint lost it" in log and a["metadata"]["uid"] in log
    # kubelet unprepares a: its GPU serves the next claim
    uid = a["metadata"]["uid"]
    assert node.kubelet.unprepare([(ns, "a", uid)]) == {uid: ""}
    assert node.prepare(c) == "", node.plugin.log
    assert node.prepare(b) == ""  # kubelet's retry of a recovered claim prepares it again


def test_a_new_claim_waits_while_the_lost_claims_cannot_be_recovered(cluster: Cluster, node: Node) -> None:
    a, _ = a_in_the_file_b_in_the_journal(node)

    def down() -> None:
        for name in (CHECKPOINT_FILE, BACKUP_FILE):
            (node.data / name).write_bytes(b"")
        node.pod_resources.stop()  # kubelet's PodResources API does not answer

    node.restart(kill=True, while_down=down)
    e = allocated_claim(cluster, "e", node.name, "gpu-3")
    error = node.prepare(e)
    assert "not prepared while the claims prepared on this node before are recovered" in error
    assert "recovering them failed: which claims the pods of this node use is not known" in error
    assert (node.data / LOST_FILE).exists()
    node.pod_resources = FakePodResources(node.pod_resources.socket).start()  # kubelet is back
    node.pod_resources.add_pod(cluster.namespace, "pod-a", ctr=[UsedClaim("a", [(node.name, "gpu-0")])])
    assert node.prepare(e) == "", node.plugin.log  # kubelet's retry: recovered, then prepared
    f = allocated_claim(cluster, "f", node.name, "gpu-0")
    assert held("gpu-0", f"{cluster.namespace}/a") in node.prepare(f)
    assert a["metadata"]["uid"] in node.plugin.log
