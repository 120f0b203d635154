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


def render(run: harness.ProgramRun, tmp_path: Path) -> list[dict[str, Any]]:
    """helm template with the release's values files first and `values` last, as the provider merges them."""
    release = run.one("kubernetes:helm.sh/v3:Release")
    args = [HELM, "template", release.inputs["name"], str(CHART), "-n", release.inputs["namespace"]]
    for i, asset in enumerate(release.inputs.get("valueYamlFiles") or []):
        path = tmp_path / f"file-{i}.yaml"
        path.write_text(asset.text)
        args += ["-f", str(path)]
    values = tmp_path / "values.json"
    values.write_text(json.dumps(harness.api_json(release, "", "")["values"]))
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
    assert "affinity" not in daemonset(docs)


def test_taints_become_plugin_tolerations(tmp_path: Path) -> None:
    run = harness.run_stack("dev", {"nodePool.taints": ["nvidia.com/gpu:NoSchedule"]})
    tolerations = daemonset(render(run, tmp_path)).get("tolerations")
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
