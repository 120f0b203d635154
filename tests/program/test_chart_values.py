"""The program's values for driver/chart, rendered by the real `helm template` (values schema included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from vke_gpu_dra_core import pulumi_types as pt

from components import manifests
from tests.chart.chartlib import require_helm
from tests.program import harness


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def provider_values(release: harness.Registered) -> dict[str, Any]:
    """The values pulumi-kubernetes' Release hands to Helm: `valueYamlFiles` merged under `values`.

    Nulls in the values files are kept (pulumi-kubernetes 4.30.0 and later) and, as with
    `helm --set key=null`, delete the chart's default.
    """
    merged: dict[str, Any] = {}
    for asset in release.inputs.get("valueYamlFiles") or []:
        merged = _merge(merged, yaml.safe_load(asset.text) or {})
    return _merge(merged, harness.api_json(release, "", "")["values"])


def render(run: harness.ProgramRun, tmp_path: Path) -> list[dict[str, Any]]:
    """helm template of driver/chart with the values the provider passes on."""
    release = run.one(pt.HELM_RELEASE)
    helm = require_helm(tmp_path)
    inputs = release.inputs
    return helm.template(provider_values(release), release=inputs["name"], namespace=inputs["namespace"])


def daemonset(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds["spec"]["template"]["spec"]


def test_dev_values_render_the_plugin_on_dra_nodes_without_device_classes(tmp_path: Path) -> None:
    docs = render(harness.run_stack("dev"), tmp_path)
    assert [d for d in docs if d["kind"] == "DeviceClass"] == []
    assert daemonset(docs)["affinity"] == manifests.dra_node_affinity()


def test_local_values_render_the_plugin_on_every_node(tmp_path: Path) -> None:
    docs = render(harness.run_stack("local"), tmp_path)
    terms = daemonset(docs)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    # kubelet labels every node with kubernetes.io/os: one term that only asks for it admits every node
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/os", "operator": "Exists"}]}]


def test_taints_become_plugin_tolerations(tmp_path: Path) -> None:
    run = harness.run_stack("dev", {"nodePool.taints": ["nvidia.com/gpu:NoSchedule"]})
    tolerations = daemonset(render(run, tmp_path)).get("tolerations")
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (tolerations or [])


def test_nvidia_controller_affinity_default_is_removed() -> None:
    run = harness.run_stack("dev", {"driver.implementation": "nvidia"})
    controller = provider_values(run.one(pt.HELM_RELEASE)).get("controller", {})
    # NVIDIA's chart defaults controller.affinity to control-plane nodes, which VKE does not show;
    # the procedure deletes it with a null
    assert controller == {"affinity": None}


def test_claim_reconcile_interval_reaches_the_plugin(tmp_path: Path) -> None:
    def interval(run: harness.ProgramRun) -> str:
        [container] = [c for c in daemonset(render(run, tmp_path))["containers"] if c["name"] == "plugin"]
        return {e["name"]: e.get("value") for e in container["env"]}["CLAIM_RECONCILE_INTERVAL"]

    assert interval(harness.run_stack("dev")) == "600"
    assert interval(harness.run_stack("dev", {"driver.claimReconcileIntervalSeconds": 1200})) == "1200"
