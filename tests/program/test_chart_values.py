"""The program's values for driver/chart, rendered by the real `helm template` (values schema included)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import manifests
from tests.program import harness

CHART = harness.ROOT / "driver" / "chart"
HELM = shutil.which("helm") or str(harness.ROOT / ".venv" / "bin" / "helm")

pytestmark = pytest.mark.skipif(
    not (CHART / "Chart.yaml").exists() or not Path(HELM).exists(), reason="driver/chart or helm not present"
)


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
    """helm template with the values the provider passes on."""
    release = run.one("kubernetes:helm.sh/v3:Release")
    args = [HELM, "template", release.inputs["name"], str(CHART), "-n", release.inputs["namespace"]]
    values = tmp_path / "values.json"
    values.write_text(json.dumps(provider_values(release)))
    args += ["-f", str(values)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


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
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_nvidia_controller_affinity_default_is_removed() -> None:
    run = harness.run_stack("dev", {"driver.implementation": "nvidia"})
    controller = provider_values(run.one("kubernetes:helm.sh/v3:Release")).get("controller", {})
    # NVIDIA's chart defaults controller.affinity to control-plane nodes, which VKE does not show;
    # the procedure deletes it with a null
    assert controller == {"affinity": None}
