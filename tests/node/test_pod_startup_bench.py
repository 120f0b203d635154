"""The pod start-up bench (`bench/pod_startup/`) cannot rot: a few pods on the real kubelet 1.34, with
our plugin and, side by side, our plugin's console entry point given as another plugin binary through an
argument template. Its figures are checked for sense (counts, order, the overhead's sum), never for speed.
Bad options are refused with one error naming them, without a node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from bench import pod_startup

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINT = Path(sys.executable).parent / "dra-gpu-kubelet-plugin"
TEMPLATE = (
    "--node-name {node_name} --kubeconfig {kubeconfig} --plugin-data-dir {plugin_data_dir} "
    "--registrar-dir {registrar_dir} --cdi-root {cdi_root} --pod-resources-socket {pod_resources_socket} "
    "--device-source simulated --simulated-gpus {gpus} --healthcheck-port 0 --metrics-port 0"
)
PODS, BURST = 2, 2


@pytest.mark.node
def test_the_bench_prints_sane_figures_for_both_plugins(tmp_path: Path) -> None:
    reason = pod_startup.unavailable(["1.34"])
    if reason:
        pytest.skip(reason)
    out = tmp_path / "figures.json"
    # about 60 s; a pod whose claims the kubelet failed to prepare at first waits 60-90 s more (BENCHMARKS.md)
    done = subprocess.run(
        [sys.executable, "-m", "bench.pod_startup", "--kubelet", "1.34", "--pods", str(PODS),
         "--burst", str(BURST), "--gpus", str(BURST), "--plugin", str(ENTRY_POINT), "--plugin-args", TEMPLATE,
         "--plugin-name", "entry point", "--json", str(out), "--logs", str(tmp_path / "logs")],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "kubelet v1.34.4 (containerd 2.1.9, runc 1.4.4, " in done.stdout
    assert "| figure | ours (vke_gpu_dra) | entry point |" in lines
    rows = (
        "pod without claims (floor), create -> Running", "pod with one GPU claim, create -> Running",
        "claim overhead: GPU p50 - floor p50", f"{BURST} GPU pods at once: first create -> all Running",
        f"{BURST} pods without claims at once: per pod, p50 / p99",
    )  # fmt: skip
    assert any(
        line.startswith("| pods whose claims the kubelet failed to prepare at first") for line in lines
    )
    for row in rows:
        [line] = [line for line in lines if line.startswith(f"| {row}")]
        assert line.count(" ms") >= 2, line
    assert sum("nothing left behind" in line for line in lines) == 2
    kept = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert kept == ["1.34-entry-point", "1.34-ours-vke-gpu-dra"]
    assert all((tmp_path / "logs" / name / "kubelet.log").stat().st_size > 0 for name in kept)
    assert all((tmp_path / "logs" / name / "plugin.log").stat().st_size > 0 for name in kept)
    figures = json.loads(out.read_text())["v1.34.4"]
    assert set(figures) == {"ours (vke_gpu_dra)", "entry point"}
    for run in figures.values():
        for kind in ("floor", "gpu", "gpu_bound"):
            samples = run[kind]["samples"]
            assert run[kind]["n"] == PODS == len(samples) and all(s > 0 for s in samples)
            assert run[kind]["p50"] <= run[kind]["p99"] == max(samples) < pod_startup.POD_TIMEOUT
        assert run["gpu_bound"]["p99"] <= run["gpu"]["p99"], "bound before Running"
        assert set(run["failed_prepares"]) <= {f"gpu-{i}" for i in range(PODS)} | {"warm-gpu"} | {
            f"burst-gpu-{i}" for i in range(BURST)
        }
        assert run["overhead_p50"] == pytest.approx(run["gpu"]["p50"] - run["floor"]["p50"])
        for kind in ("burst_gpu", "burst_floor"):
            assert run[kind]["n"] == BURST and 0 < run[kind]["p50"] <= run[kind]["p99"]
            assert run[kind]["p99"] <= run[kind]["all_running"] < pod_startup.POD_TIMEOUT


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--pods", "0"], "--pods 0: must be at least 1"),
        (["--burst", "8", "--gpus", "4"], "--gpus 4: must be at least --burst (8), one GPU per pod"),
        (["--plugin-args=--x"], "--plugin-args, --plugin-env and --plugin-name need --plugin"),
        (["--plugin", "/nonexistent/plugin"], "--plugin /nonexistent/plugin: not an executable file"),
        (
            ["--plugin", str(ENTRY_POINT), "--plugin-args=--node {node}"],
            "--plugin-args/--plugin-env '{node}': unknown placeholder {node}",
        ),
        (
            ["--plugin", str(ENTRY_POINT), "--plugin-env", "NOVALUE"],
            "--plugin-env 'NOVALUE': must be KEY=VALUE",
        ),
        (["--kubelet", "1.20"], "argument --kubelet: invalid choice: '1.20'"),
    ],
)
def test_bad_options_are_one_error_naming_them(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        pod_startup.parse_args(argv)
    assert exit_.value.code == 2
    assert error in capsys.readouterr().err


def test_an_unknown_placeholder_names_the_allowed_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        pod_startup.parse_args(["--plugin", str(ENTRY_POINT), "--plugin-args=--root {kubelet_dir}"])
    err = capsys.readouterr().err
    assert "'{kubelet_dir}': unknown placeholder {kubelet_dir}; allowed: {node_name}, {kubeconfig}" in err
    with pytest.raises(SystemExit):
        pod_startup.parse_args(["--plugin", str(ENTRY_POINT), "--plugin-args=--json={a:1}"])
    assert "'--json={a:1}': unknown placeholder {a}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pod_startup.parse_args(["--plugin", str(ENTRY_POINT), "--plugin-args=--x={"])
    assert (
        "'--x={': Single '{' encountered in format string (a brace itself is doubled)"
        in capsys.readouterr().err
    )


def test_a_template_is_filled_from_the_nodes_paths() -> None:
    args = pod_startup.parse_args(
        [
            "--plugin",
            str(ENTRY_POINT),
            "--plugin-args",
            "--cdi {cdi_root} -n {gpus}",
            "--plugin-env",
            "A={node_name}",
        ]
    )
    ours, other = args.plugins
    assert ours.argv == () and ours.starter(4) is None
    assert other.name == ENTRY_POINT.name
    assert other.argv == (str(ENTRY_POINT.resolve()), "--cdi", "{cdi_root}", "-n", "{gpus}")
    assert other.env == (("A", "{node_name}"),)


#: The kubelet 1.37.2's line when the Node authorizer had not yet linked a pod's claim to its node.
KUBELET_LINE = (
    'E1206 20:25:26.905911      88 kuberuntime_manager.go:1727] "Failed to prepare dynamic resources" '
    'err="prepare dynamic resources: fetch ResourceClaim burst-gpu-1-gpu-wnmwh: '
    'resourceclaims.resource.k8s.io \\"burst-gpu-1-gpu-wnmwh\\" is forbidden: '
    'User \\"system:node:vke-node-28223-1\\" cannot get resource \\"resourceclaims\\" '
    'in API group \\"resource.k8s.io\\" in the namespace \\"t1-node-dra\\": node: no '
    'relationship found between node \'vke-node-28223-1\' and this object" pod="t1-node-dra/burst-gpu-1"'
)


def test_the_kubelets_failed_prepares_are_read_from_its_log() -> None:
    other = KUBELET_LINE.replace("burst-gpu-1", "gpu-3").replace("vke-node-28223-1", "vke-node-1-2")
    log = "\n".join(['I1206 kubelet.go:2760] "SyncLoop ADD"', KUBELET_LINE, KUBELET_LINE, other])
    found = pod_startup.failed_prepares(log)
    assert found == dict.fromkeys(
        ["burst-gpu-1", "gpu-3"], "no relationship found between the node and this object"
    )
    assert (
        pod_startup.failures(found)
        == "2: burst-gpu-1, gpu-3 (no relationship found between the node and this object)"
    )
    assert pod_startup.failures({}) == "none"


def test_each_part_imports_only_the_parts_before_it() -> None:
    """watch, runs, report, cli: as driver/BENCHMARKS.md lists them (lowest first)."""
    bench = str(ROOT / "bench")
    sys.path.insert(0, bench)
    try:
        graph = grimp.build_graph("pod_startup")
    finally:
        sys.path.remove(bench)
    order = ("watch", "runs", "report", "cli")
    assert {m.removeprefix("pod_startup.") for m in graph.modules} - {"pod_startup"} == {*order, "__main__"}
    illegal = graph.find_illegal_dependencies_for_layers(
        layers=["__main__", *reversed(order)], containers={"pod_startup"}
    )
    assert not illegal, sorted(f"{d.importer} -> {d.imported}" for d in illegal)
