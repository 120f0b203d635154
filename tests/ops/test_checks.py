"""The procedure's checks as pure functions over hand-built objects (no HTTP)."""

from __future__ import annotations

import copy
import json
from typing import Any

import kubernetes_validate
import yaml
from vke_gpu_dra_core import facts
from vke_gpu_dra_ops import procedure
from vke_gpu_dra_ops.procedure import Settings, Snapshot, Status

from tests.ops import fake_kube

DRA_LABEL = f"{facts.LABEL_GPU_SCHEDULE}={facts.LABEL_GPU_SCHEDULE_DRA}"
CLASS_NAMES = ", ".join(spec.name for spec in facts.DEVICE_CLASSES)


def snapshot(cluster: fake_kube.FakeCluster | None = None, **changes: Any) -> Snapshot:
    c = cluster or fake_kube.healthy_cluster()
    base = {
        "api_resources": frozenset(c.resource_v1),
        "nodes": [
            n
            for n in c.nodes
            if n["metadata"]["labels"].get(facts.LABEL_GPU_SCHEDULE) == facts.LABEL_GPU_SCHEDULE_DRA
        ],
        "driver_pods": [p for p in c.pods if p["metadata"]["namespace"] == facts.DRIVER_NAMESPACE],
        "device_classes": c.device_classes,
        "resource_slices": c.resource_slices,
        "sample_deployment": c.deployments[0],
        "sample_pods": [p for p in c.pods if p["metadata"]["labels"].get("app") == "gpu-test"],
        "claims": c.claims,
        "pod_logs": c.logs,
        "classic_deployment": next(
            (d for d in c.deployments if d["metadata"]["name"] == "gpu-test-classic"), None
        ),
        "classic_pods": [p for p in c.pods if p["metadata"]["labels"].get("app") == "gpu-test-classic"],
    }
    base.update(changes)
    return Snapshot(**base)  # type: ignore[arg-type]


def by_id(snap: Snapshot, settings: Settings | None = None) -> dict[str, procedure.StepResult]:
    return {r.id: r for r in procedure.run_checks(snap, settings or Settings())}


def test_healthy_snapshot_passes() -> None:
    results = by_id(snapshot())
    assert all(r.status is Status.PASS for r in results.values())
    assert results["resource-slices"].found == "192.168.2.8: 1 (gpu-0)"


def test_only_the_newest_pool_generation_counts() -> None:
    old = fake_kube.resource_slice(devices=3)
    new = fake_kube.resource_slice(devices=2)
    new["spec"]["pool"]["generation"] = 2
    result = by_id(snapshot(resource_slices=[old, new]), Settings(expected_devices_per_node=2))
    assert result["resource-slices"].status is Status.PASS
    assert "2 (gpu-0; gpu-1)" in result["resource-slices"].found


def test_slices_of_one_pool_are_summed() -> None:
    a, b = fake_kube.resource_slice(devices=1), fake_kube.resource_slice(devices=1)
    b["spec"]["devices"][0]["name"] = "gpu-1"
    result = by_id(snapshot(resource_slices=[a, b]), Settings(expected_devices_per_node=2))
    assert result["resource-slices"].status is Status.PASS


def test_no_dra_nodes_fails_with_the_label_to_set() -> None:
    results = by_id(snapshot(nodes=[]))
    assert results["driver-pods"].status is Status.FAIL
    assert f"no node labelled {DRA_LABEL}" in results["driver-pods"].found
    assert f"{facts.LABEL_GPU_PRESENT}={facts.LABEL_GPU_PRESENT_VALUE}" in results["driver-pods"].hint
    assert results["no-device-plugin-capacity"].status is Status.SKIP


def test_node_without_a_driver_pod_is_named() -> None:
    extra = fake_kube.node("192.168.2.10")
    snap = snapshot()
    result = by_id(snapshot(nodes=[*snap.nodes, extra]))["driver-pods"]
    assert result.status is Status.FAIL
    assert result.found == f"node 192.168.2.10: no driver pod in namespace {facts.DRIVER_NAMESPACE}"
    assert "node affinity" in result.hint


def test_running_but_unready_driver_pod_fails() -> None:
    c = fake_kube.healthy_cluster()
    c.pod(fake_kube.DRIVER_POD)["status"]["containerStatuses"][0]["ready"] = False
    result = by_id(snapshot(c))["driver-pods"]
    assert result.status is Status.FAIL
    assert "Running but not Ready (containers not ready: main)" in result.found


def test_terminating_sample_pods_are_ignored() -> None:
    c = fake_kube.healthy_cluster()
    old = copy.deepcopy(c.pod(fake_kube.SAMPLE_POD))
    old["metadata"].update(name="gpu-test-old", deletionTimestamp="2026-01-01T00:00:00Z")
    old["status"]["phase"] = "Failed"
    snap = snapshot(c)
    results = by_id(snapshot(c, sample_pods=[*snap.sample_pods, old]))
    assert results["sample-pod"].status is Status.PASS


def test_missing_sample_deployment_fails_claim_and_pod_and_skips_log() -> None:
    results = by_id(snapshot(sample_deployment=None, sample_pods=[]))
    assert results["sample-claim"].found == "Deployment default/gpu-test not found"
    assert "ResourceClaimTemplate single-gpu" in results["sample-claim"].hint
    assert results["sample-pod"].status is Status.FAIL
    assert results["sample-log"].status is Status.SKIP


def test_claim_allocated_but_reserved_for_another_pod() -> None:
    c = fake_kube.healthy_cluster()
    c.claims[0]["status"]["reservedFor"] = [{"resource": "pods", "name": "other", "uid": "x"}]
    result = by_id(snapshot(c))["sample-claim"]
    assert result.status is Status.FAIL
    assert "allocated but not reserved for pod gpu-test-5c47d94bf9-fbx2k" in result.found


def test_pod_without_claim_status_yet() -> None:
    c = fake_kube.healthy_cluster()
    c.pod(fake_kube.SAMPLE_POD)["status"].pop("resourceClaimStatuses")
    result = by_id(snapshot(c))["sample-claim"]
    assert result.status is Status.FAIL
    assert "no ResourceClaim generated for 'gpu' yet" in result.found


def test_log_line_must_be_a_whole_gpu_line() -> None:
    logs = {fake_kube.SAMPLE_POD: "  MIG 1g.10gb Device 0: (UUID: MIG-0123)\nGPU: none\n"}
    result = by_id(snapshot(pod_logs=logs))["sample-log"]
    assert result.status is Status.FAIL
    assert "log starts 'MIG 1g.10gb Device 0: (UUID: MIG-0123)'" in result.found
    assert by_id(snapshot(pod_logs={}))["sample-log"].found.endswith("(log is empty)")


def test_step_results_serialise_to_json() -> None:
    result = by_id(snapshot(device_classes=[]))["device-classes"]
    assert result.as_json() == {
        "id": "device-classes",
        "title": f"DeviceClasses {CLASS_NAMES}",
        "status": "fail",
        "found": f"missing DeviceClass {CLASS_NAMES} (present: none)",
        "hint": result.hint,
        "waived": False,
    }


def test_step_ids_are_the_checklist_order() -> None:
    assert tuple(r.id for r in procedure.run_checks(snapshot(), Settings())) == procedure.STEP_IDS


def test_skipped_steps_are_waived_not_passed() -> None:
    results = by_id(snapshot(pod_logs={}), Settings(skip=frozenset({"sample-log"})))
    log = results["sample-log"]
    assert (log.status, log.waived, log.ok, log.passed) == (Status.SKIP, True, True, False)
    assert log.found == "skipped on request (--skip)"


# --- the classic sample (nvidia.com/gpu: 1 through DRA, Kubernetes 1.36) ---------------------------


def test_classic_sample_passes_with_its_scheduler_made_claim() -> None:
    results = by_id(snapshot(fake_kube.classic_cluster()))
    assert all(r.status is Status.PASS for r in results.values())
    claim = results["sample-claim"]
    assert "the claim the scheduler made for Deployment default/gpu-test-classic" in claim.title
    assert (
        f"{fake_kube.CLASSIC_CLAIM}: allocated gpu-1@{fake_kube.NODE}, reserved for {fake_kube.CLASSIC_POD}"
        in (claim.found)
    )
    assert fake_kube.CLASSIC_POD in results["sample-pod"].found
    assert "GPU-0d1e2f3a" in results["sample-log"].found


def test_without_the_classic_sample_the_checklist_is_unchanged() -> None:
    results = by_id(snapshot())
    assert "gpu-test-classic" not in results["sample-claim"].title + results["sample-pod"].title


def test_classic_pod_on_a_server_that_dropped_the_mapping() -> None:
    """A 1.34 server keeps no extendedResourceName: the pod stays Pending without a claim."""
    cluster = fake_kube.classic_cluster()
    cluster.device_classes = [spec.manifest() for spec in facts.DEVICE_CLASSES]
    pending = fake_kube.classic_pod(claim=None)
    pending["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "message": "0/2 nodes are available: Insufficient nvidia.com/gpu.",
            }
        ],
    }
    cluster.pods[-1] = pending
    results = by_id(snapshot(cluster))
    claim = results["sample-claim"]
    assert claim.status is Status.FAIL
    assert "the scheduler has made no claim for it" in claim.found
    assert "maps no extended resource" in claim.hint and "DRAExtendedResource" in claim.hint
    pod = results["sample-pod"]
    assert pod.status is Status.FAIL and "Insufficient nvidia.com/gpu" in pod.found


def test_classic_claim_not_allocated_and_deployment_without_pods() -> None:
    cluster = fake_kube.classic_cluster()
    del cluster.claims[-1]["status"]["allocation"]
    assert "is not allocated" in by_id(snapshot(cluster))["sample-claim"].found
    no_pods = snapshot(fake_kube.classic_cluster(), classic_pods=[])
    results = by_id(no_pods)
    assert "Deployment default/gpu-test-classic has no pods" in results["sample-claim"].found
    assert "Deployment default/gpu-test-classic has no pods" in results["sample-pod"].found


# --------------------------------------------------------------------------- device health

NOTE = f"{facts.DRIVER_NAME}/device-health"


def tainted_slice(effect: str = "NoSchedule") -> dict[str, Any]:
    s = fake_kube.resource_slice(devices=2)
    s["spec"]["devices"][1]["taints"] = [
        {"key": "gpu.nvidia.com/xid", "value": "79", "effect": effect, "timeAdded": "2026-12-01T20:00:00Z"}
    ]
    return s


def test_a_tainted_device_fails_with_its_xid_and_since() -> None:
    result = by_id(snapshot(resource_slices=[tainted_slice()]))["device-health"]
    assert result.status is Status.FAIL
    assert result.found == "192.168.2.8: gpu-1 xid 79 since 2026-12-01T20:00:00Z (taint NoSchedule)"
    assert "DeviceTaintRule" in result.hint
    _assert_prints_a_drain_rule_with_its_selector(result.hint)
    assert result.as_json()["details"] == [
        {
            "node": "192.168.2.8",
            "device": "gpu-1",
            "reason": "xid",
            "xid": 79,
            "since": "2026-12-01T20:00:00Z",
            "effect": "NoSchedule",
            "blocking": True,
        }
    ]


def test_a_device_left_out_is_found_through_the_annotation() -> None:
    s = fake_kube.resource_slice(devices=1)
    problem = {"reason": "gpu-lost", "since": "2026-12-01T20:00:05Z"}
    s["metadata"]["annotations"] = {
        NOTE: json.dumps([{"device": "gpu-1", "health": "unhealthy", "problems": [problem]}])
    }
    result = by_id(snapshot(resource_slices=[s]))["device-health"]
    assert result.status is Status.FAIL
    assert result.found == "192.168.2.8: gpu-1 gpu-lost since 2026-12-01T20:00:05Z (left out of the slice)"


def test_an_unmonitored_device_is_reported_but_passes() -> None:
    s = fake_kube.resource_slice(devices=1)
    s["spec"]["devices"][0]["taints"] = [
        {"key": "gpu.nvidia.com/unmonitored", "effect": "None", "timeAdded": "2026-12-01T20:00:00Z"}
    ]
    result = by_id(snapshot(resource_slices=[s]))["device-health"]
    assert result.status is Status.PASS
    assert (
        result.found
        == "none unhealthy; 192.168.2.8: gpu-0 unmonitored since 2026-12-01T20:00:00Z (taint None)"
    )


def test_healthy_devices_pass_with_no_details() -> None:
    result = by_id(snapshot())["device-health"]
    assert (result.status, result.found) == (Status.PASS, "none")
    assert "details" not in result.as_json()


def test_a_taint_of_another_key_is_reported_by_its_key_and_value() -> None:
    s = fake_kube.resource_slice(devices=1)
    s["spec"]["devices"][0]["taints"] = [
        {
            "key": "example.com/maintenance",
            "value": "bios",
            "effect": "NoSchedule",
            "timeAdded": "2026-12-01T20:00:00Z",
        }
    ]
    result = by_id(snapshot(resource_slices=[s]))["device-health"]
    assert result.status is Status.FAIL
    assert result.found == (
        "192.168.2.8: gpu-0 example.com/maintenance=bios since 2026-12-01T20:00:00Z (taint NoSchedule)"
    )


# --------------------------------------------------------------------------- DeviceTaintRules

V1 = "resource.k8s.io/v1"


def taint_rule(
    name: str, effect: str, selector: dict[str, Any] | None, *, eviction: tuple[str, str] | None = None
) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "apiVersion": V1,
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {"taint": {"key": "example.com/drain", "value": "gpu-1", "effect": effect}},
    }
    if selector is not None:
        rule["spec"]["deviceSelector"] = selector
    if eviction is not None:
        status, message = eviction
        rule["status"] = {
            "conditions": [
                {"type": "EvictionInProgress", "status": status, "message": message, "reason": "Any",
                 "lastTransitionTime": "2026-12-01T20:00:00Z"}
            ]
        }  # fmt: skip
    return rule


def rules_snapshot(*rules: dict[str, Any]) -> Snapshot:
    return snapshot(
        resource_slices=[fake_kube.resource_slice(devices=2)],
        device_taint_rules=list(rules),
        taint_rules_source=V1,
    )


GPU_1 = {"driver": facts.DRIVER_NAME, "pool": fake_kube.NODE, "device": "gpu-1"}


def test_a_noexecute_rule_on_a_gpu_fails_with_its_eviction_status() -> None:
    rule = taint_rule("drain-gpu-1", "NoExecute", GPU_1, eviction=("True", "1 pod needs to be evicted"))
    result = by_id(rules_snapshot(rule))["device-taint-rules"]
    assert result.status is Status.FAIL
    assert result.found == (
        "DeviceTaintRule drain-gpu-1: example.com/drain=gpu-1 NoExecute on 192.168.2.8/gpu-1; "
        "EvictionInProgress=True: 1 pod needs to be evicted"
    )
    assert "kubectl get devicetaintrules" in result.hint and "delete the rule" in result.hint
    assert result.as_json()["details"] == [
        {
            "rule": "drain-gpu-1",
            "key": "example.com/drain",
            "value": "gpu-1",
            "effect": "NoExecute",
            "devices": ["192.168.2.8/gpu-1"],
            "unevaluated": False,
            "evictionInProgress": "True",
            "evictionMessage": "1 pod needs to be evicted",
            "blocking": True,
        }
    ]


def test_a_dry_run_rule_is_reported_and_passes() -> None:
    rule = taint_rule("try", "None", {}, eviction=("False", "0 pods would be evicted"))
    result = by_id(rules_snapshot(rule))["device-taint-rules"]
    assert result.status is Status.PASS
    assert result.found == (
        "none blocking; DeviceTaintRule try: example.com/drain=gpu-1 None on 192.168.2.8/gpu-0, "
        "192.168.2.8/gpu-1 (its deviceSelector names no driver: it taints the devices of every driver; "
        f"name it); EvictionInProgress=False: 0 pods would be evicted ({V1})"
    )


def test_rules_that_select_none_of_the_drivers_devices_are_left_out() -> None:
    rules = [
        taint_rule("no-selector", "NoExecute", None),
        taint_rule("other-driver", "NoExecute", {"driver": "nic.example.com"}),
        taint_rule("other-pool", "NoSchedule", {"pool": "192.168.2.99"}),
        taint_rule("other-device", "NoSchedule", {**GPU_1, "device": "gpu-7"}),
    ]
    result = by_id(rules_snapshot(*rules))["device-taint-rules"]
    assert (result.status, result.found) == (Status.PASS, f"none ({V1})")
    assert "details" not in result.as_json()


def test_a_rule_of_the_whole_pool_without_its_status_yet() -> None:
    rule = taint_rule("node-maintenance", "NoSchedule", {"driver": facts.DRIVER_NAME, "pool": fake_kube.NODE})
    result = by_id(rules_snapshot(rule))["device-taint-rules"]
    assert result.status is Status.FAIL
    assert result.found.endswith("NoSchedule on 192.168.2.8/gpu-0, 192.168.2.8/gpu-1")
    # the same rule without the driver: another driver's devices on the node are tainted too
    broad = by_id(rules_snapshot(taint_rule("node-maintenance", "NoSchedule", {"pool": fake_kube.NODE})))
    assert broad["device-taint-rules"].found.endswith(
        "(its deviceSelector names no driver: it taints the devices of every driver; name it)"
    )


def test_134_class_and_cel_selectors_are_said_to_be_unevaluated() -> None:
    rule = taint_rule("by-cel", "NoSchedule", {"deviceClassName": "gpu.nvidia.com", "device": "gpu-0"})
    result = by_id(rules_snapshot(rule))["device-taint-rules"]
    assert "on 192.168.2.8/gpu-0 (its device class and CEL selectors not evaluated)" in result.found


def test_rules_not_read_pass_with_the_reason() -> None:
    result = by_id(snapshot(taint_rules_source="this API server serves no DeviceTaintRules"))[
        "device-taint-rules"
    ]
    assert (result.status, result.found) == (
        Status.PASS,
        "not checked: this API server serves no DeviceTaintRules",
    )
    skipped = by_id(snapshot(api_resources=None, resource_slices=None))["device-taint-rules"]
    assert skipped.status is Status.SKIP


def _assert_prints_a_drain_rule_with_its_selector(hint: str) -> None:
    """The rule the hint prints is a valid 1.37 DeviceTaintRule whose deviceSelector names the driver, the
    plugin's pool (its node) and the device: it selects that GPU on 1.37 and 1.38 alike."""
    printed = hint.split("<<< '", 1)[1].split("'`", 1)[0]
    rule = yaml.safe_load(printed)
    kubernetes_validate.validate(rule, "1.37.0", strict=True)
    assert rule["spec"]["deviceSelector"] == {
        "driver": facts.DRIVER_NAME,
        "pool": "192.168.2.8",
        "device": "gpu-1",
    }
    assert rule["spec"]["taint"] == {"key": "example.com/drain", "value": "xid-79", "effect": "NoExecute"}
    assert rule["metadata"]["name"] == "drain-192.168.2.8-gpu-1"
