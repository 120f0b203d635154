"""Core's DRA gate table (`vke_gpu_dra_core.dra_gates`) against the built servers' own: every component of
each release runs with exactly the `--feature-gates` core renders for it, the API server's
`kubernetes_feature_enabled` metric (its feature-gate table: each gate's stage and state) says what core's
table says, and a 1.38 component refuses what core refuses to render for it (DynamicResourceAllocation,
removed, kubernetes#141946; DRADeviceTaints and DRADeviceTaintRules turned off, locked on, #140256).
"""

from __future__ import annotations

import re
import subprocess

import pytest
from vke_gpu_dra_core import dra_gates

from .cluster import Cluster
from .controlplane import ControlPlane

COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
METRIC = re.compile(
    r'^kubernetes_feature_enabled\{name="(?P<name>[^"]+)",stage="(?P<stage>[^"]*)"\} (?P<on>[01])$'
)


def feature_table(cluster: Cluster) -> dict[str, tuple[str, bool]]:
    """The API server's feature gates: name -> (stage, enabled), stage as the metric writes it (GA: "")."""
    table = {}
    for line in cluster.api.text("/metrics").splitlines():
        match = METRIC.match(line)
        if match:
            table[match["name"]] = (match["stage"], match["on"] == "1")
    assert table, "no kubernetes_feature_enabled metric"
    return table


def test_every_component_runs_with_the_gates_core_renders(each_cluster: Cluster) -> None:
    plane = each_cluster.plane
    rendered = dra_gates.feature_gates_flag(plane.release, dra_gates.settable_defaults(plane.release))
    for name in COMPONENTS:
        process = plane.processes[name]
        assert process.poll() is None, f"{name} exited: {plane.logs()}"
        assert f"--feature-gates={rendered}" in list(process.args), (name, process.args)  # type: ignore[arg-type]
    if plane.release >= (1, 38):
        assert "DynamicResourceAllocation" not in rendered
        assert not any(dra_gates.locked(g, plane.release) for g in dra_gates.known_gates() if g in rendered)


def test_the_servers_feature_table_is_cores(each_cluster: Cluster) -> None:
    """Stage and default of every gate core knows, as the release's API server reports them; a gate the
    release does not have (DynamicResourceAllocation from 1.38) is not in its table."""
    release = each_cluster.plane.release
    table = feature_table(each_cluster)
    expected = {
        gate: (dra_gates.stage(gate, release).replace("GA", ""), dra_gates.on_by_default(gate, release))
        for gate in dra_gates.known_gates()
        if dra_gates.exists(gate, release)
    }
    assert {gate: table.get(gate) for gate in expected} == expected
    absent = [g for g in dra_gates.known_gates() if not dra_gates.exists(g, release)]
    assert not [g for g in absent if g in table], absent


@pytest.mark.parametrize(
    ("gates", "refusal"),
    [
        ("DynamicResourceAllocation=true", "unrecognized feature gate: DynamicResourceAllocation"),
        (
            "DRADeviceTaints=false",
            "cannot set feature gate DRADeviceTaints to false, feature is locked to true",
        ),
        (
            "DRADeviceTaintRules=false",
            "cannot set feature gate DRADeviceTaintRules to false, feature is locked to true",
        ),
    ],
)
def test_a_1_38_component_refuses_what_core_refuses_to_render(
    control_plane_138: ControlPlane, gates: str, refusal: str
) -> None:
    name, _, value = gates.partition("=")
    with pytest.raises(dra_gates.GateError):
        dra_gates.feature_gates_flag((1, 38), {name: value == "true"})
    for component in COMPONENTS:
        result = subprocess.run(
            [str(control_plane_138.assets / component), f"--feature-gates={gates}", "--version"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode != 0, (component, result.stdout)
        assert refusal in result.stderr, (component, result.stderr)
