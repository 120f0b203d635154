"""Dynamic MIG against the real 1.37 and 1.38 API servers and kube-schedulers (DRAPartitionableDevices beta
and on in 1.37, GA and locked on in 1.38): the
plugin process (one simulated H100 80GB, feature gate DynamicMIG) publishes its counter set and every MIG
placement in slices the server accepts, the scheduler allocates a placement for a claim asking `1g.10gb` by
CEL on the profile attribute, the claim prepares (its simulated MIG device created) and unprepares
(destroyed), and placements that overlap an allocated one are never allocated. On 1.34 (the gate alpha, off)
the GPU is published whole."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from vke_gpu_dra.partitions.backends import SIMULATED_STATE_FILE
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.mig_partitions import MigPlacement, mig_product
from vke_gpu_dra_testing.kubelet_client import Kubelet

from .cluster import Cluster, Plugin
from .controlplane import wait_until
from .test_driver import gpu_pod

H100 = "NVIDIA H100 80GB HBM3"
SAMPLE = Path(__file__).resolve().parents[2] / "driver" / "docs" / "samples" / "dynamic-mig-1g10gb.yaml"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{}/resourceclaims/"


def mig_template(name: str, profile: str) -> dict[str, Any]:
    """The sample ResourceClaimTemplate (driver/docs/samples), renamed and for `profile`."""
    [template, _pod] = yaml.safe_load_all(SAMPLE.read_text())
    template = copy.deepcopy(template)
    template["metadata"]["name"] = name
    [request] = template["spec"]["spec"]["devices"]["requests"]
    selector = request["exactly"]["selectors"][0]["cel"]
    selector["expression"] = selector["expression"].replace("'1g.10gb'", f"'{profile}'")
    return dict(template)


def start_dynamic(cluster: Cluster, monkeypatch: pytest.MonkeyPatch, slices: int = 2) -> Plugin:
    monkeypatch.setenv("FEATURE_GATES", "DynamicMIG=true")
    objects = cluster.install_chart()
    node = cluster.add_node("mig")
    name = node["metadata"]["name"]
    pod = cluster.plugin_pod(objects, name)
    [service_account] = [o for o in objects if o["kind"] == "ServiceAccount"]
    plugin = cluster.start_plugin(
        name, cluster.token(service_account["metadata"]["name"], pod), gpus=1, product=H100
    )
    published = wait_until(
        lambda: len(cluster.slices_of(name)) == slices or plugin.process.poll() is not None, timeout=60
    )
    assert published and plugin.process.poll() is None, f"no slices published:\n{plugin.log}"
    return plugin


def allocated(cluster: Cluster, pod: str) -> tuple[dict[str, Any], str]:
    scheduled = cluster.wait_scheduled(cluster.namespace, pod)
    [status] = scheduled["status"]["resourceClaimStatuses"]
    claim = cluster.api.get(CLAIMS.format(cluster.namespace) + status["resourceClaimName"])
    [result] = claim["status"]["allocation"]["devices"]["results"]
    return claim, str(result["device"])


def placement(device: str) -> MigPlacement:
    """gpu-0-mig-<profile>-<id>-<start> -> its placement, from the catalog."""
    *_, profile_id, start = device.split("-")
    [profile] = [p for p in mig_product(H100).profiles if p.profile_id == int(profile_id)]
    [found] = [p for p in profile.placements if p.start == int(start)]
    return found


def test_the_scheduler_allocates_mig_placements_that_never_overlap(
    newest_clusters: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = newest_clusters
    plugin = start_dynamic(cluster, monkeypatch)
    slices = cluster.slices_of(plugin.node)
    [counters] = [s for s in slices if s["spec"].get("sharedCounters")]
    assert [c["name"] for c in counters["spec"]["sharedCounters"]] == ["gpu-0-counter-set"]
    [devices] = [s["spec"]["devices"] for s in slices if s["spec"].get("devices")]
    names = [d["name"] for d in devices]
    assert names[0] == "gpu-0" and "gpu-0-mig-1g10gb-19-0" in names and "gpu-0-mig-7g80gb-0-0" in names
    assert all(d["consumesCounters"][0]["counterSet"] == "gpu-0-counter-set" for d in devices)

    # a claim for 1g.10gb gets one of its placements, prepared through the kubelet client
    cluster.apply(mig_template("mig-1g", "1g.10gb"))
    cluster.apply(gpu_pod("small", cluster.namespace, "mig-1g"))
    claim, first = allocated(cluster, "small")
    assert first.startswith("gpu-0-mig-1g10gb-19-")
    kubelet = Kubelet(plugin.registration_socket)
    try:
        kubelet.register()
        uid = claim["metadata"]["uid"]
        prepared = kubelet.prepare([(cluster.namespace, claim["metadata"]["name"], uid)])
        assert prepared[uid]["error"] == "", plugin.log
        assert [d["device_name"] for d in prepared[uid]["devices"]] == [first]
        state_file = plugin.root / "plugins" / facts.DRIVER_NAME / SIMULATED_STATE_FILE
        [instances] = json.loads(state_file.read_text())["gpus"].values()
        assert [(i["profileId"], i["start"]) for i in instances] == [(19, placement(first).start)]

        # a 3g.40gb claim gets the placement that does not overlap the 1g.10gb one
        cluster.apply(mig_template("mig-3g", "3g.40gb"))
        cluster.apply(gpu_pod("medium", cluster.namespace, "mig-3g"))
        _, second = allocated(cluster, "medium")
        assert second.startswith("gpu-0-mig-3g40gb-9-")
        assert not placement(second).overlaps(placement(first))

        # the whole GPU (7g.80gb) overlaps both: never allocated, the pod stays pending
        cluster.apply(mig_template("mig-7g", "7g.80gb"))
        cluster.apply(gpu_pod("large", cluster.namespace, "mig-7g"))
        pending = wait_until(
            lambda: "Unschedulable" in cluster.why_pending(cluster.namespace, "large"), timeout=60
        )
        assert pending, cluster.why_pending(cluster.namespace, "large")
        assert "cannot allocate all claims" in cluster.why_pending(cluster.namespace, "large")
        assert (
            cluster.api.get(f"/api/v1/namespaces/{cluster.namespace}/pods/large")["spec"].get("nodeName")
            is None
        )

        assert kubelet.unprepare([(cluster.namespace, claim["metadata"]["name"], uid)]) == {uid: ""}
        [instances] = json.loads(state_file.read_text())["gpus"].values()
        assert instances == []
    finally:
        kubelet.close()
    code, log = plugin.stop()
    assert code == 0, log
    assert log.count("publishing resource slices") == 1, log  # what the server stored counts as in sync


def test_a_server_without_shared_counters_gets_whole_gpus(
    cluster_134: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1.34 keeps shared counters only behind its alpha gate DRAPartitionableDevices (off by default): the
    dry-run shows they are dropped, so the GPU is published as without DynamicMIG, and the log says why."""
    plugin = start_dynamic(cluster_134, monkeypatch, slices=1)
    [published] = cluster_134.slices_of(plugin.node)
    assert [d["name"] for d in published["spec"]["devices"]] == ["gpu-0"]
    assert "sharedCounters" not in published["spec"]
    assert "keeps no shared counters" in plugin.log
    code, log = plugin.stop()
    assert code == 0, log
