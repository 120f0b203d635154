"""The pack's copy of the project chart's defaults stays what driver/chart/values.yaml says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vke_dra_policies import chart_defaults
from vke_dra_policies.checks import driver

ROOT = Path(__file__).resolve().parents[2]
POLICY_DIR = ROOT / "policy"
CHART_VALUES = ROOT / "driver" / "chart" / "values.yaml"


def generate(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m vke_dra_policies.chart_defaults` as its docstring says to run it (from policy/)."""
    return subprocess.run(
        [sys.executable, "-m", "vke_dra_policies.chart_defaults", *args],
        cwd=POLICY_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_copy_equals_what_the_charts_values_give() -> None:
    assert chart_defaults.DATA_FILE.read_text() == chart_defaults.render(CHART_VALUES.read_text())
    proc = generate(str(CHART_VALUES), "--check")
    assert (proc.returncode, proc.stderr) == (0, "")


def test_every_value_the_policies_read_is_the_charts_default() -> None:
    values = yaml.safe_load(CHART_VALUES.read_text())
    defaults = driver.project_chart_defaults()
    for path in chart_defaults.PATHS:
        mine, theirs = defaults, values
        for key in path:
            mine, theirs = mine[key], theirs[key]
        assert mine == theirs, path
    assert defaults["kubeletPlugin"]["affinity"]  # the plugin stays on DRA nodes by default


def test_check_fails_on_a_changed_default_and_leaves_the_copy(tmp_path: Path) -> None:
    values = yaml.safe_load(CHART_VALUES.read_text())
    values["driverName"] = "gpu.example.com"
    changed = tmp_path / "values.yaml"
    changed.write_text(yaml.safe_dump(values))
    before = chart_defaults.DATA_FILE.read_text()
    proc = generate(str(changed), "--check")
    assert proc.returncode == 1
    assert proc.stderr == (
        f"python -m vke_dra_policies.chart_defaults: chart_defaults.yaml differs from {changed}; "
        "run it without --check to regenerate it\n"
    )
    assert chart_defaults.DATA_FILE.read_text() == before


@pytest.mark.parametrize(
    ("drop", "named"),
    [(("driverName",), "driverName"), (("kubeletPlugin", "affinity"), "kubeletPlugin.affinity")],
)
def test_a_default_the_pack_reads_missing_from_the_chart_is_one_line(
    tmp_path: Path, drop: tuple[str, ...], named: str
) -> None:
    values = yaml.safe_load(CHART_VALUES.read_text())
    parent = values
    for key in drop[:-1]:
        parent = parent[key]
    del parent[drop[-1]]
    changed = tmp_path / "values.yaml"
    changed.write_text(yaml.safe_dump(values))
    proc = generate(str(changed), "--check")
    assert proc.returncode == 2
    assert proc.stderr == (
        f"python -m vke_dra_policies.chart_defaults: {changed}: the chart's values.yaml has no {named}; "
        "the policy pack reads it\n"
    )


def test_an_unreadable_values_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    proc = generate(str(missing))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"python -m vke_dra_policies.chart_defaults: {missing}: ")
    assert "Traceback" not in proc.stderr


def test_a_value_of_the_wrong_shape_and_broken_yaml_are_one_line_each(tmp_path: Path) -> None:
    values = yaml.safe_load(CHART_VALUES.read_text())
    values["deviceClasses"] = [1]
    changed = tmp_path / "values.yaml"
    changed.write_text(yaml.safe_dump(values))
    proc = generate(str(changed), "--check")
    assert proc.returncode == 2
    assert proc.stderr == (
        f"python -m vke_dra_policies.chart_defaults: {changed}: the chart's values.yaml has deviceClasses "
        "as a list, not a map; the policy pack reads deviceClasses.enabled\n"
    )
    changed.write_text("image: [\n")
    proc = generate(str(changed), "--check")
    assert proc.returncode == 2
    assert proc.stderr == (
        f"python -m vke_dra_policies.chart_defaults: {changed}: not valid YAML at line 2, column 1: "
        "expected the node content, but found '<stream end>'\n"
    )
