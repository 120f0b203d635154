"""`vke-gpu-dra verify` end to end: the real kubernetes client against the fake API server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.versions import format_version
from vke_gpu_dra_ops import procedure, verify
from vke_gpu_dra_ops.__main__ import main

from tests.ops import fake_kube
from tests.ops.fake_kube import FakeCluster

MIG_CLASS = facts.DEVICE_CLASS_MIG.name
DRA_LABEL = f"{facts.LABEL_GPU_SCHEDULE}={facts.LABEL_GPU_SCHEDULE_DRA}"


def run_cli(tmp_path: Path, cluster: FakeCluster, *extra: str) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with fake_kube.serve(cluster) as url:
        kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig", url)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["verify", "--kubeconfig", str(kubeconfig), "--timeout", "0", *extra])
    assert fake_kube.TOKEN not in out.getvalue() + err.getvalue()
    return code, out.getvalue(), err.getvalue()


def status_lines(text: str) -> dict[str, str]:
    """Check title prefix -> status, from the text checklist."""
    result = {}
    for line in text.splitlines():
        if line.startswith("["):
            status, rest = line[1:].split("] ", 1)
            result[rest.split(":", 1)[0]] = status
    return result


def test_healthy_cluster_passes_every_step(tmp_path: Path) -> None:
    code, out, err = run_cli(tmp_path, fake_kube.healthy_cluster())
    assert code == 0, out
    statuses = status_lines(out)
    assert len(statuses) == len(procedure.CHECKS)
    assert set(statuses.values()) == {"PASS"}
    assert "GPU 0: NVIDIA A30 (UUID: GPU-c8133a35" in out
    assert out.rstrip().endswith(f"PASS: {len(procedure.CHECKS)}/{len(procedure.CHECKS)} checks passed")
    assert err == ""


def test_classic_sample_is_checked_through_the_api(tmp_path: Path) -> None:
    code, out, _ = run_cli(tmp_path, fake_kube.classic_cluster(), "--expected-devices-per-node", "2")
    assert code == 0, out
    assert set(status_lines(out).values()) == {"PASS"}
    assert f"{fake_kube.CLASSIC_CLAIM}: allocated gpu-1" in out
    assert "GPU-0d1e2f3a" in out


def test_json_output_is_one_document(tmp_path: Path) -> None:
    code, out, _ = run_cli(
        tmp_path, fake_kube.healthy_cluster(devices=2), "--output", "json", "--expected-devices-per-node", "2"
    )
    doc = json.loads(out)
    assert code == 0
    assert doc["result"] == "pass"
    assert doc["namespace"] == facts.DRIVER_NAMESPACE
    assert [s["id"] for s in doc["steps"]] == list(procedure.STEP_IDS)
    assert {s["status"] for s in doc["steps"]} == {"pass"}


def _no_v1(c: FakeCluster) -> None:
    c.groups["resource.k8s.io"] = ["v1beta2"]


def _crashloop(c: FakeCluster) -> None:
    pod = c.pod(fake_kube.DRIVER_POD)
    pod["status"]["containerStatuses"][0].update(
        ready=False, restartCount=7, state={"waiting": {"reason": "CrashLoopBackOff"}}
    )


def _missing_class(c: FakeCluster) -> None:
    c.device_classes = [dc for dc in c.device_classes if dc["metadata"]["name"] != MIG_CLASS]


def _no_slice(c: FakeCluster) -> None:
    c.resource_slices = [fake_kube.resource_slice(driver="other.example.com")]


def _wrong_count(c: FakeCluster) -> None:
    c.resource_slices = [fake_kube.resource_slice(devices=1)]


def _device_plugin(c: FakeCluster) -> None:
    c.nodes[0]["status"]["capacity"]["nvidia.com/gpu"] = "1"
    c.nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] = "1"


def _unallocated(c: FakeCluster) -> None:
    c.claims[0]["status"] = {}


def _pending(c: FakeCluster) -> None:
    pod = c.pod(fake_kube.SAMPLE_POD)
    pod["spec"].pop("nodeName")
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "message": "0/2 nodes are available: cannot allocate all claims",
            }
        ],
    }


def _no_gpu_log(c: FakeCluster) -> None:
    c.logs[fake_kube.SAMPLE_POD] = "No devices were found\n"


BROKEN: dict[str, tuple[Callable[[FakeCluster], None], str, tuple[str, ...]]] = {
    # name: (break it, failing step title prefix, words the failure must mention)
    "no v1 API": (
        _no_v1,
        "resource.k8s.io/v1 API resources",
        ("does not serve resource.k8s.io/v1", format_version(facts.MIN_KUBERNETES_VERSION)),
    ),
    "driver pod CrashLoop": (
        _crashloop,
        "driver pods",
        ("CrashLoopBackOff", fake_kube.DRIVER_POD, "7 restarts"),
    ),
    "missing DeviceClass": (_missing_class, "DeviceClasses", (f"missing DeviceClass {MIG_CLASS}",)),
    "slice missing": (
        _no_slice,
        f"ResourceSlice of {facts.DRIVER_NAME}",
        (f"no ResourceSlice of {facts.DRIVER_NAME}", fake_kube.NODE),
    ),
    "wrong count": (
        _wrong_count,
        f"ResourceSlice of {facts.DRIVER_NAME}",
        ("1 device(s) (gpu-0), expected 2",),
    ),
    "nvidia.com/gpu capacity": (
        _device_plugin,
        "DRA nodes expose no",
        ("capacity nvidia.com/gpu=1", "device plugin"),
    ),
    "claim unallocated": (
        _unallocated,
        "sample ResourceClaim",
        (f"claim {fake_kube.CLAIM}", "not allocated"),
    ),
    "pod Pending": (
        _pending,
        "sample pod",
        ("Pending: 0/2 nodes are available: cannot allocate all claims",),
    ),
    "log without GPU": (_no_gpu_log, "sample pod log lists a GPU", ("No devices were found",)),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_cluster_names_the_failing_step(tmp_path: Path, name: str) -> None:
    breaker, title, words = BROKEN[name]
    cluster = fake_kube.healthy_cluster()
    breaker(cluster)
    code, out, _ = run_cli(
        tmp_path, cluster, "--expected-devices-per-node", "2" if name == "wrong count" else "1"
    )
    assert code == 1
    failing = [line for line in out.splitlines() if line.startswith("[FAIL]")]
    assert any(line.startswith(f"[FAIL] {title}") for line in failing), out
    line = next(line for line in failing if line.startswith(f"[FAIL] {title}"))
    fix = out.splitlines()[out.splitlines().index(line) + 1]
    assert fix.strip().startswith("fix: ") and len(fix) > 20
    for word in words:
        assert word in line + fix, (word, line, fix)
    assert out.rstrip().splitlines()[-1].startswith("FAIL: ")


def test_skip_waives_a_step(tmp_path: Path) -> None:
    cluster = fake_kube.healthy_cluster()
    _no_gpu_log(cluster)
    code, out, _ = run_cli(tmp_path, cluster, "--skip", "sample-log")
    assert code == 0
    assert "[SKIP] sample pod log lists a GPU (nvidia-smi -L): skipped on request (--skip)" in out
    assert out.rstrip().endswith("PASS: 9/10 checks passed, 1 skipped on request")


def test_no_v1_api_skips_the_steps_that_need_it_and_reads_nothing_there(tmp_path: Path) -> None:
    cluster = fake_kube.healthy_cluster()
    _no_v1(cluster)
    code, out, _ = run_cli(tmp_path, cluster, "--output", "json")
    doc = json.loads(out)
    status = {s["id"]: s["status"] for s in doc["steps"]}
    assert code == 1 and doc["result"] == "fail"
    assert status["api-resources"] == "fail"
    assert status["device-classes"] == status["resource-slices"] == status["sample-claim"] == "skip"
    assert not [p for p in cluster.requests if p.startswith("/apis/resource.k8s.io/v1/")]


def test_failing_steps_are_retried_until_they_pass(tmp_path: Path) -> None:
    cluster = fake_kube.healthy_cluster()
    _unallocated(cluster)
    healed = fake_kube.allocated_claim()
    sleeps: list[float] = []
    now = [0.0]

    def sleep(seconds: float) -> None:  # the claim gets allocated while verify waits
        sleeps.append(seconds)
        now[0] += seconds
        cluster.claims = [healed]

    import io

    out, err = io.StringIO(), io.StringIO()
    with fake_kube.serve(cluster) as url:
        kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig", url)
        code = verify.run_verify(
            str(kubeconfig),
            None,
            procedure.Settings(),
            timeout=30,
            interval=5,
            stdout=out,
            stderr=err,
            clock=verify.Clock(now=lambda: now[0], sleep=sleep),
        )
    assert code == 0
    assert sleeps == [5]
    assert "9/10 checks pass; waiting for sample-claim" in err.getvalue()
    assert "[PASS] sample ResourceClaim" in out.getvalue()


def test_gives_up_at_the_timeout(tmp_path: Path) -> None:
    cluster = fake_kube.healthy_cluster()
    _no_gpu_log(cluster)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    import io

    err = io.StringIO()
    with fake_kube.serve(cluster) as url:
        kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig", url)
        code = verify.run_verify(
            str(kubeconfig),
            None,
            procedure.Settings(),
            timeout=12,
            interval=5,
            stdout=io.StringIO(),
            stderr=err,
            clock=verify.Clock(now=lambda: now[0], sleep=sleep),
        )
    assert code == 1
    assert err.getvalue().count("waiting for sample-log") == 2  # at 0 s and 5 s; 10 s + 5 s > 12 s


def test_context_flag_selects_a_context(tmp_path: Path) -> None:
    with fake_kube.serve(fake_kube.healthy_cluster()) as url:
        kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig", url, context="vke-dev")
        assert (
            main(["verify", "--kubeconfig", str(kubeconfig), "--context", "vke-dev", "--timeout", "0"]) == 0
        )


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("missing-file", "--kubeconfig {path}: no such file"),
        ("bad-context", "--context nope: no such context in the kubeconfig (contexts: fake)"),
        (
            "unauthorized",
            f"answered 401 Unauthorized to daemonsets in {facts.DRIVER_NAMESPACE} (unauthorised): check the",
        ),
        ("unreachable", "cannot reach the API server at http://127.0.0.1:"),
        ("not-a-kubeconfig", "--kubeconfig: kubeconfig {path} is not valid YAML at line 2, column 1: "),
    ],
)
def test_connection_problems_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, expected: str
) -> None:
    cluster = fake_kube.healthy_cluster()
    path = tmp_path / "kubeconfig"
    args = ["--timeout", "0"]
    with fake_kube.serve(cluster) as url:
        fake_kube.write_kubeconfig(path, url)
        if setup == "missing-file":
            path = tmp_path / "absent"
        elif setup == "bad-context":
            args += ["--context", "nope"]
        elif setup == "unauthorized":
            cluster.status_override = 401
        elif setup == "not-a-kubeconfig":
            path.write_text("just: [text\n")
    if setup != "unreachable":
        with fake_kube.serve(cluster) as url:
            if setup not in ("missing-file", "not-a-kubeconfig", "bad-context"):
                fake_kube.write_kubeconfig(path, url)
            code = main(["verify", "--kubeconfig", str(path), *args])
    else:  # the server is gone: its port refuses connections
        code = main(["verify", "--kubeconfig", str(path), *args])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("vke-gpu-dra verify: error: ")
    assert expected.format(path=path) in lines[0]
    assert fake_kube.TOKEN not in captured.err


def test_connection_error_in_json_mode_is_still_a_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = fake_kube.healthy_cluster()
    cluster.status_override = 403
    with fake_kube.serve(cluster) as url:
        kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig", url)
        code = main(["verify", "--kubeconfig", str(kubeconfig), "--timeout", "0", "--output", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 2
    assert doc["result"] == "error" and "403" in doc["error"]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--timeout", "-5", "argument --timeout: invalid value '-5': expected whole seconds, 0 or more"),
        ("--timeout", "soon", "argument --timeout: invalid value 'soon'"),
        ("--expected-devices-per-node", "0", "argument --expected-devices-per-node: invalid value '0'"),
        ("--output", "xml", "argument -o/--output: invalid choice: 'xml'"),
        ("--skip", "logs", "argument --skip: invalid choice: 'logs' (choose from "),
    ],
)
def test_bad_flag_values_are_usage_errors(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["verify", "--kubeconfig", "k", flag, value])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_server_urls_in_messages_carry_no_credentials() -> None:
    from kubernetes import client
    from vke_gpu_dra_ops import kube

    cfg = client.Configuration()
    cfg.host = "https://admin:hunter2@10.0.0.1:6443"
    assert kube.server_of(client.ApiClient(cfg)) == "https://10.0.0.1:6443"


def test_node_selector_flag_chooses_the_gpu_nodes(tmp_path: Path) -> None:
    cluster = fake_kube.healthy_cluster()
    cluster.nodes[0]["metadata"]["labels"] = {"pool": "gpu"}  # e.g. a cluster outside VKE
    code, out, _ = run_cli(tmp_path, cluster)
    assert code == 1
    assert f"on DRA nodes: no node labelled {DRA_LABEL}" in out
    code, out, _ = run_cli(tmp_path, cluster, "--node-selector", "pool=gpu")
    assert code == 0, out
    assert "/api/v1/nodes" in cluster.requests


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"apiVersion: v1\nclusters: [\n", "is not valid YAML at line 3, column 1: "),
        (b"\x7fELF\x02\x01\x01\x00\xff\xfe binary", "is a binary file, not a kubeconfig (YAML text)"),
        (b"- a\n- b\n", " must be a YAML mapping (with clusters, contexts and users), found a list"),
        (b"", " is empty"),
        (b"clusters: {a: b}\n", ": clusters must be a list, found a mapping"),
        (None, "is a directory, not a file"),
    ],
    ids=["yaml-error", "binary", "list", "empty", "clusters-map", "directory"],
)
def test_malformed_kubeconfig_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, expected: str
) -> None:
    path = tmp_path / "kubeconfig"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    code = main(["verify", "--kubeconfig", str(path), "--timeout", "0"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith(f"vke-gpu-dra verify: error: --kubeconfig: kubeconfig {path}")
    assert expected in captured.err
    assert captured.err.count("\n") == 1


def _unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        ("refused", "connection refused: nothing listens at that address"),
        ("https://cluster.example.invalid:6443", "DNS lookup of cluster.example.invalid failed"),
        ("tls", "TLS failed ("),
    ],
)
def test_network_errors_say_the_cause_not_an_exception_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: str, expected: str
) -> None:
    with fake_kube.serve(fake_kube.healthy_cluster()) as url:
        if server == "refused":
            server = f"http://127.0.0.1:{_unused_port()}"
        elif server == "tls":  # TLS to a plain-HTTP server: the handshake fails
            server = url.replace("http://", "https://")
        kubeconfig = fake_kube.write_kubeconfig(tmp_path / "kubeconfig", server)
        code = main(["verify", "--kubeconfig", str(kubeconfig), "--timeout", "0"])
    captured = capsys.readouterr()
    assert code == 2
    (line,) = captured.err.splitlines()  # no urllib3 retry warnings, no tracebacks
    assert expected in line, line
    for name in ("MaxRetryError", "NewConnectionError", "NameResolutionError", "SSLError", "Error("):
        assert name not in line


def test_kubeconfig_defaults_to_the_environment_then_the_home_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vke_gpu_dra_ops import kube

    assert kube.default_kubeconfig({}) == "~/.kube/config"
    assert kube.default_kubeconfig({"KUBECONFIG": ""}) == "~/.kube/config"
    assert kube.default_kubeconfig({"KUBECONFIG": "/a:/b"}) == "/a:/b"
    with fake_kube.serve(fake_kube.healthy_cluster()) as url:
        kubeconfig = fake_kube.write_kubeconfig(tmp_path / "from-env", url)
        monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{kubeconfig}")  # missing entries skipped
        assert main(["verify", "--timeout", "0"]) == 0
        monkeypatch.delenv("KUBECONFIG")
        monkeypatch.setenv("HOME", str(tmp_path))
        (tmp_path / ".kube").mkdir()
        fake_kube.write_kubeconfig(tmp_path / ".kube" / "config", url)
        assert main(["verify", "--timeout", "0"]) == 0


def test_local_stack_cluster_passes_without_hand_picked_flags(tmp_path: Path) -> None:
    # The `local` stack: plugin on every node (no DRA labels), simulated GPUs (the sample prints env).
    code, out, _ = run_cli(tmp_path, fake_kube.local_cluster(), "--output", "json")
    doc = json.loads(out)
    assert code == 0, out
    assert doc["nodeSelector"] == ""  # from the kubelet plugin DaemonSet, which selects every node
    steps = {s["id"]: s for s in doc["steps"]}
    assert steps["sample-log"]["status"] == "skip" and "simulated" in steps["sample-log"]["found"]
    assert all(s["status"] == "pass" for i, s in steps.items() if i != "sample-log")


def test_a_check_that_cannot_apply_is_not_said_to_be_skipped_on_request(tmp_path: Path) -> None:
    # Nobody asked to skip sample-log: simulated GPUs print no nvidia-smi line.
    code, out, _ = run_cli(tmp_path, fake_kube.local_cluster())
    assert code == 0, out
    assert "skipped on request" not in out
    assert out.rstrip().endswith("PASS: 9/10 checks passed, 1 not applicable here")
    code, out, _ = run_cli(tmp_path, fake_kube.local_cluster(), "--skip", "sample-claim")
    assert out.rstrip().endswith("PASS: 8/10 checks passed, 1 skipped on request, 1 not applicable here")


def test_node_selection_is_read_from_the_kubelet_plugin_daemonset(tmp_path: Path) -> None:
    cluster = fake_kube.healthy_cluster()
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu-a"]}]}
                ]
            }
        }
    }
    cluster.daemonsets = [fake_kube.kubelet_plugin_daemonset(affinity)]
    code, out, _ = run_cli(tmp_path, cluster, "--output", "json")
    doc = json.loads(out)
    assert code == 1 and doc["nodeSelector"] == "pool=gpu-a"
    (driver,) = [s for s in doc["steps"] if s["id"] == "driver-pods"]
    assert driver["found"] == "no node labelled pool=gpu-a"
    assert "no node matches pool=gpu-a" in driver["hint"] and facts.LABEL_GPU_SCHEDULE not in driver["hint"]
    # An explicit flag still wins over what the DaemonSet selects.
    code, out, _ = run_cli(
        tmp_path, cluster, "--output", "json", "--node-selector", procedure.DRA_NODE_SELECTOR
    )
    assert code == 0 and json.loads(out)["nodeSelector"] == procedure.DRA_NODE_SELECTOR


def test_yaml_output_has_the_json_documents_keys(tmp_path: Path) -> None:
    import yaml

    _, as_json, _ = run_cli(tmp_path, fake_kube.healthy_cluster(), "-o", "json")
    code, as_yaml, _ = run_cli(
        tmp_path, fake_kube.healthy_cluster(), "-o", "yaml", "-n", facts.DRIVER_NAMESPACE
    )
    assert code == 0
    assert yaml.safe_load(as_yaml) == json.loads(as_json)
    assert "workloadNamespace" in json.loads(as_json)  # one key style: camelCase, as plan and kubectl


def test_unhealthy_devices_fail_in_text_and_json(tmp_path: Path) -> None:
    cluster = fake_kube.healthy_cluster(devices=2)
    cluster.resource_slices[0]["spec"]["devices"][1]["taints"] = [
        {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule", "timeAdded": "2026-12-01T20:00:00Z"}
    ]
    code, out, _ = run_cli(tmp_path, cluster)
    assert code == 1
    assert (
        "[FAIL] No unhealthy or tainted GPU devices: "
        f"{fake_kube.NODE}: gpu-1 gpu-lost since 2026-12-01T20:00:00Z (taint NoSchedule)" in out
    )
    code, out, _ = run_cli(tmp_path, cluster, "-o", "json")
    [step] = [s for s in json.loads(out)["steps"] if s["id"] == "device-health"]
    assert step["status"] == "fail"
    assert [(d["node"], d["device"], d["reason"], d["since"]) for d in step["details"]] == [
        (fake_kube.NODE, "gpu-1", "gpu-lost", "2026-12-01T20:00:00Z")
    ]


def drain_rule() -> dict[str, object]:
    return {
        "metadata": {"name": "drain"},
        "spec": {
            "deviceSelector": {"driver": facts.DRIVER_NAME, "device": "gpu-0"},
            "taint": {"key": "example.com/drain", "effect": "NoExecute"},
        },
    }


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1alpha3"])
def test_device_taint_rules_are_read_from_the_version_that_serves_them(tmp_path: Path, version: str) -> None:
    cluster = fake_kube.healthy_cluster()
    cluster.groups["resource.k8s.io"] = ["v1", version] if version != "v1" else ["v1"]
    cluster.taint_rules_version, cluster.taint_rules = version, [drain_rule()]
    code, out, _ = run_cli(tmp_path, cluster, "-o", "json")
    assert code == 1
    [step] = [s for s in json.loads(out)["steps"] if s["id"] == "device-taint-rules"]
    assert step["status"] == "fail"
    assert step["found"] == f"DeviceTaintRule drain: example.com/drain NoExecute on {fake_kube.NODE}/gpu-0"
    assert f"/apis/resource.k8s.io/{version}/devicetaintrules" in cluster.requests


def test_no_device_taint_rule_api_is_a_note(tmp_path: Path) -> None:
    cluster = fake_kube.healthy_cluster()  # v1 and v1beta2 served, neither with devicetaintrules
    code, out, _ = run_cli(tmp_path, cluster)
    assert code == 0
    assert (
        "[PASS] No DeviceTaintRule keeps GPU devices from pods: not checked: this API server serves no "
        "DeviceTaintRules (resource.k8s.io v1, v1beta2, v1alpha3; before 1.37 they are off by default), so "
        "none applies" in out
    )
    assert not [p for p in cluster.requests if p.endswith("/devicetaintrules")]


def test_a_user_who_may_not_list_device_taint_rules_gets_the_other_checks(tmp_path: Path) -> None:
    cluster = fake_kube.healthy_cluster()
    cluster.taint_rules_version, cluster.taint_rules = "v1", [drain_rule()]
    cluster.forbidden = {"/apis/resource.k8s.io/v1/devicetaintrules"}
    code, out, _ = run_cli(tmp_path, cluster)
    assert code == 0, out
    assert (
        "not checked: the kubeconfig's user may not list devicetaintrules (resource.k8s.io/v1): grant list "
        "on them" in out
    )
