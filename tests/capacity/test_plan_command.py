import json

import pytest
import yaml
from vke_gpu_dra_ops.__main__ import main

from .helpers import MEM, exactly, template


@pytest.fixture
def stack_dir(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "vke-gpu-dra",
                "runtime": "python",
                "config": {
                    "nodePool.instanceTypes": {"type": "array", "default": ["ecs.gni2.3xlarge"]},
                    "nodePool.minReplicas": {"type": "integer", "default": 1},
                    "nodePool.maxReplicas": {"type": "integer", "default": 1},
                },
            }
        )
    )
    (tmp_path / "Pulumi.dev.yaml").write_text(
        yaml.safe_dump(
            {
                "config": {
                    "vke-gpu-dra:nodePool.instanceTypes": ["ecs.hpcpni3ln.45xlarge"],
                    "vke-gpu-dra:nodePool.maxReplicas": 2,
                }
            }
        )
    )
    return tmp_path


def write_manifests(path, *docs):
    path.write_text(yaml.safe_dump_all(list(docs)))
    return path


def deployment(replicas, claim="t"):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "app"},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": claim}]}},
        },
    }


def test_plan_of_the_program_sample_in_text(stack_dir, capsys):
    assert main(["plan", "--stack-config", str(stack_dir / "Pulumi.dev.yaml")]) == 0
    out = capsys.readouterr().out
    assert "gpu-dra: ecs.hpcpni3ln.45xlarge = 8x NVIDIA H20, 1..2 nodes" in out
    assert (
        "Deployment default/gpu-test: FITS (wanted 1, placed 1, pending 0; guaranteed 1, best case 1)" in out
    )
    assert (
        "default/single-gpu: fits alone (1 replica(s) wanted; alone on an empty pool: "
        "8 at min size, 16 at max size)"
    ) in out
    assert "first replica gets: gpu -> gpu-dra-node-0/gpu-0" in out
    assert out.endswith("Result: everything fits\n")


def test_plan_defaults_come_from_pulumi_yaml(stack_dir, capsys):
    (stack_dir / "Pulumi.prod.yaml").write_text("config: {}\n")
    assert main(["plan", "--stack-config", str(stack_dir / "Pulumi.prod.yaml")]) == 0
    assert "ecs.gni2.3xlarge = 1x NVIDIA A10, 1..1 nodes" in capsys.readouterr().out


def test_plan_json_reports_fit_counts_devices_and_reasons(stack_dir, tmp_path, capsys):
    manifests = write_manifests(
        tmp_path / "m.yaml",
        template(exactly("gpu", 2), name="t"),
        template(exactly("gpu", 1, f"{MEM}.compareTo(quantity('141Gi')) >= 0"), name="big"),
        deployment(9),
    )
    rc = main(
        [
            "plan",
            "--stack-config",
            str(stack_dir / "Pulumi.dev.yaml"),
            "--manifests",
            str(manifests),
            "--output",
            "json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["fits"] is False
    by_name = {t["name"]: t for t in report["templates"]}
    t = by_name["t"]
    assert t["scope"] == "alone on an empty pool"
    assert (t["fitsAlone"], t["replicasWanted"], t["replicasAtMin"], t["replicasAtMax"]) == (False, 9, 4, 8)
    assert t["devices"] == [
        {"request": "gpu", "device": "gpu-dra-node-0/gpu-0"},
        {"request": "gpu", "device": "gpu-dra-node-0/gpu-1"},
    ]
    big = by_name["big"]
    assert big["replicasWanted"] is None and big["fitsAlone"] is False
    assert big["reasons"][0].endswith("memory 141Gi > 95.58Gi")
    assert report["violations"] == [
        "Deployment default/app (9 replica(s)) does not fit the GPU node pools: "
        "gpu-dra (ecs.hpcpni3ln.45xlarge: 8x NVIDIA H20): 9 replicas wanted, 4 fit per node, "
        "8 on the pool's maximum of 2 nodes"
    ]


def test_plan_reads_a_directory_and_reports_bad_input(stack_dir, tmp_path, capsys):
    folder = tmp_path / "manifests"
    folder.mkdir()
    write_manifests(folder / "a.yaml", template({"name": "gpu", "deviceClassName": "gpu.nvidia.com"}))
    assert (
        main(["plan", "--stack-config", str(stack_dir / "Pulumi.dev.yaml"), "--manifests", str(folder)]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(
        "error: ResourceClaimTemplate t: spec.spec.devices.requests[0] (gpu) must set exactly one "
        "of 'exactly' or 'firstAvailable'"
    )
    assert main(["plan", "--stack-config", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml: cannot read" in capsys.readouterr().err


def test_plan_uses_config_catalog_rows_and_names_bad_ones(stack_dir, capsys):
    stack = stack_dir / "Pulumi.big.yaml"
    rows = {
        "ecs.gni3cl.44xlarge": {"product": "NVIDIA L20", "gpus": 4, "source": "console", "confidence": "high"}
    }
    stack.write_text(
        yaml.safe_dump(
            {
                "config": {
                    "vke-gpu-dra:nodePool.instanceTypes": ["ecs.gni3cl.44xlarge"],
                    "vke-gpu-dra:gpuInstanceTypes": json.dumps(rows),
                }
            }
        )
    )
    assert main(["plan", "--stack-config", str(stack)]) == 0
    assert "ecs.gni3cl.44xlarge = 4x NVIDIA L20, 1..1 nodes" in capsys.readouterr().out
    stack.write_text(yaml.safe_dump({"config": {"vke-gpu-dra:gpuInstanceTypes": '{"ecs.a.b": {"gpus": 1}}'}}))
    assert main(["plan", "--stack-config", str(stack)]) == 2
    assert "vke-gpu-dra:gpuInstanceTypes['ecs.a.b'].product: None is not a known GPU product" in (
        capsys.readouterr().err
    )


def test_plan_with_simulated_devices_counts_the_simulated_gpus(stack_dir, capsys):
    stack = stack_dir / "Pulumi.sim.yaml"
    stack.write_text(
        yaml.safe_dump(
            {
                "config": {
                    "vke-gpu-dra:driver.deviceSource": "simulated",
                    "vke-gpu-dra:driver.simulatedGpus": 4,
                    "vke-gpu-dra:driver.simulatedProduct": "NVIDIA A30",
                }
            }
        )
    )
    assert main(["plan", "--stack-config", str(stack)]) == 0
    out = capsys.readouterr().out
    assert "ecs.gni2.3xlarge = 4x NVIDIA A30, 1..1 nodes" in out
    assert "note: driver.deviceSource=simulated: every node publishes 4x NVIDIA A30" in out


def plan_json(stack_dir, *extra):
    return main(["plan", "--stack-config", str(stack_dir / "Pulumi.dev.yaml"), "--output", "json", *extra])


def test_plan_json_has_one_line_per_workload_and_the_verdict_agrees(stack_dir, tmp_path, capsys):
    """Two workloads on 2 x 8 H20: the first spreads 1-GPU pods 5 + 5 (default spreading), so no node
    keeps 8 free GPUs for the second; the verdict says so, and the template table says 'alone'."""
    manifests = write_manifests(
        tmp_path / "m.yaml",
        template(exactly("gpu", 1), name="one"),
        template(exactly("gpu", 8), name="eight"),
        deployment(10, claim="one"),
        {**deployment(1, claim="eight"), "metadata": {"name": "whole"}},
    )
    assert plan_json(stack_dir, "--manifests", str(manifests)) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["kubernetesVersion"] == "1.34" and report["featureGates"]["DRAConsumableCapacity"] is False
    app, whole = report["workloads"]
    assert set(app) == {
        "kind", "namespace", "name", "status", "wanted", "placed", "pending", "guaranteed", "bestCase",
        "perPool", "instanceTypeMix", "reasons", "hints",
    }  # fmt: skip
    assert (app["status"], app["wanted"], app["placed"], app["pending"]) == ("fits", 10, 10, 0)
    assert app["perPool"] == {"gpu-dra (ecs.hpcpni3ln.45xlarge: 8x NVIDIA H20)": 10}
    assert (whole["status"], whole["placed"], whole["pending"], whole["bestCase"]) == ("pending", 0, 1, 1)
    assert whole["reasons"][0].startswith("fits alone, but beside the workloads before it only 0 of 1")
    assert {t["name"]: t["fitsAlone"] for t in report["templates"]} == {"one": True, "eight": True}
    assert all(t["scope"] == "alone on an empty pool" for t in report["templates"])
    assert report["fits"] is False and len(report["violations"]) == 1


def admin_manifests(tmp_path, labels):
    docs = [template(exactly("gpu", 1, admin=True), name="t"), deployment(1)]
    if labels is not None:
        docs.append(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": labels}}
        )
    return write_manifests(tmp_path / "admin.yaml", *docs)


@pytest.mark.parametrize(
    ("labels", "rc", "status"),
    [({"resource.kubernetes.io/admin-access": "true"}, 0, "FITS"), ({}, 1, "REFUSED"), (None, 1, "UNKNOWN")],
)
def test_plan_reads_namespaces_from_the_manifests(stack_dir, tmp_path, capsys, labels, rc, status):  # noqa: PLR0917
    """adminAccess is admitted only in a namespace labelled resource.kubernetes.io/admin-access=true;
    without a Namespace object in the manifests its labels are unknown, and the plan says undecided."""
    manifests = admin_manifests(tmp_path, labels)
    assert (
        main(["plan", "--stack-config", str(stack_dir / "Pulumi.dev.yaml"), "--manifests", str(manifests)])
        == rc
    )
    out = capsys.readouterr().out
    assert f"Deployment default/app: {status} (wanted 1" in out
    if status == "REFUSED":
        assert "default/t: REFUSED by the API server" in out
        assert "label on the containing namespace" in out
    if status == "UNKNOWN":
        assert out.endswith(
            "Result: UNDECIDED (admission depends on Namespaces outside the stack and the manifests)\n"
        )


def test_plan_kubernetes_version_comes_from_the_flag_or_the_stack(stack_dir, tmp_path, capsys):
    """distinctAttribute is refused on 1.35 (DRAConsumableCapacity off) and enforced from 1.36 (1.37
    included); a 1.34 API server keeps it although the gate is off, and the plan's hints say what its
    scheduler does with it."""
    tpl = template(exactly("gpu", 2), name="t")
    tpl["spec"]["spec"]["devices"]["constraints"] = [{"distinctAttribute": "gpu.nvidia.com/uuid"}]
    manifests = write_manifests(tmp_path / "d.yaml", tpl, deployment(2))

    def planned(*extra: str) -> tuple[int, dict]:
        rc = plan_json(stack_dir, "--manifests", str(manifests), *extra)
        return rc, json.loads(capsys.readouterr().out)

    rc, report = planned()  # the stack's default: 1.34
    [workload], [planned_template] = report["workloads"], report["templates"]
    assert (rc, report["kubernetesVersion"], workload["status"]) == (0, "1.34", "fits")
    assert planned_template["admission"] == "admitted"
    assert any("distinctAttribute is kept although DRAConsumableCapacity" in h for h in workload["hints"])
    rc, report = planned("--kubernetes-version", "1.35")
    assert (rc, report["workloads"][0]["status"]) == (1, "refused")
    for version in ("1.36", "1.37", "v1.37.2"):
        rc, report = planned("--kubernetes-version", version)
        assert (rc, report["workloads"][0]["status"]) == (0, "fits"), version
        assert not any("distinctAttribute" in h for h in report["workloads"][0]["hints"])
    rc, report = planned(
        "--kubernetes-version", "1.37", "--kubernetes-feature-gates", "DRAConsumableCapacity=false"
    )
    assert (rc, report["workloads"][0]["status"]) == (1, "refused")
    stack = stack_dir / "Pulumi.dev.yaml"
    config = yaml.safe_load(stack.read_text())
    for version, rc_wanted, status in (("1.37", 0, "fits"),):  # a line VKE's docs do not list: forced
        config["config"]["vke-gpu-dra:cluster.kubernetesVersion"] = version
        config["config"]["vke-gpu-dra:cluster.forceKubernetesVersion"] = True
        stack.write_text(yaml.safe_dump(config))
        rc, report = planned()
        assert (rc, report["kubernetesVersion"], report["workloads"][0]["status"]) == (
            rc_wanted,
            version,
            status,
        )
    # a VKE stack names a line VKE documents (1.34) or forces another; else the stack config's error
    config["config"]["vke-gpu-dra:cluster.kubernetesVersion"] = "1.35"
    del config["config"]["vke-gpu-dra:cluster.forceKubernetesVersion"]
    stack.write_text(yaml.safe_dump(config))
    assert plan_json(stack_dir, "--manifests", str(manifests)) == 2
    assert "cluster.kubernetesVersion = '1.35': allowed: one of the Kubernetes lines VKE documents" in (
        capsys.readouterr().err
    )
    config["config"]["vke-gpu-dra:cluster.kubernetesVersion"] = "1.34"
    stack.write_text(yaml.safe_dump(config))
    assert plan_json(stack_dir, "--kubernetes-version", "1.33") == 2
    assert capsys.readouterr().err == (
        "error: --kubernetes-version: Kubernetes version '1.33' is not known to the planner; allowed: "
        "1.34, 1.35, 1.36, 1.37, 1.38 (major.minor, optionally with a patch or VKE suffix)\n"
    )


def test_plan_help_lists_every_known_version(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "(1.34, 1.35, 1.36, 1.37, 1.38; default: the stack's" in " ".join(capsys.readouterr().out.split())


def test_plan_yaml_is_the_json_report_and_o_is_short_for_output(stack_dir, capsys):
    assert plan_json(stack_dir) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main(["plan", "--stack-config", str(stack_dir / "Pulumi.dev.yaml"), "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        (
            {"vke-gpu-dra:nodePool.minReplicas": 3},
            "vke-gpu-dra:nodePool.minReplicas = 3: allowed: at most nodePool.maxReplicas (2)",
        ),
        (
            {"vke-gpu-dra:nodePool.instanceType": "ecs.gni2.3xlarge"},
            "vke-gpu-dra:nodePool.instanceType = (set): allowed: a key listed in docs/configuration.md "
            "(did you mean nodePool.instanceTypes?)",
        ),
        (
            {"vke-gpu-dra:sample.enabled": "yes"},
            "vke-gpu-dra:sample.enabled = 'yes': allowed: true or false",
        ),
        (
            {"vke-gpu-dra:nodePool.labels": ["vke.node.gpu.schedule=nvidia"]},
            "vke-gpu-dra:nodePool.labels = 'vke.node.gpu.schedule=nvidia': allowed: "
            "vke.node.gpu.schedule=nvidia-dra (the DRA procedure's value) or leave it out",
        ),
    ],
)
def test_plan_refuses_a_stack_the_program_refuses_naming_the_key(stack_dir, capsys, values, problem):
    """The plan reads the stack through the program's loader: what the program refuses is bad input."""
    stack = stack_dir / "Pulumi.dev.yaml"
    config = yaml.safe_load(stack.read_text())
    config["config"].update(values)
    stack.write_text(yaml.safe_dump(config))
    assert main(["plan", "--stack-config", str(stack)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: {stack}: invalid stack configuration (1 problem(s)):\n")
    assert f"  - {problem}\n" in captured.err
    assert "Traceback" not in captured.err


def test_plan_does_not_stop_at_keys_only_a_deployment_needs(stack_dir, capsys):
    """No region, login, HPC cluster or CR instance in the file: the program asks for them at `pulumi up`."""
    stack = stack_dir / "Pulumi.dev.yaml"
    assert main(["plan", "--stack-config", str(stack)]) == 0
    capsys.readouterr()
    config = yaml.safe_load(stack.read_text())
    config["config"]["vke-gpu-dra:driver.registry.name"] = "Bad_Name"
    config["config"]["vke-gpu-dra:nodePool.password"] = "not-a-secret"
    stack.write_text(yaml.safe_dump(config))
    assert main(["plan", "--stack-config", str(stack)]) == 0
    assert "not-a-secret" not in capsys.readouterr().err


def test_the_deployment_only_keys_are_what_the_table_marks():
    from vke_gpu_dra_ops.plan import DEPLOYMENT_ONLY_KEYS

    # cloud access, node login, the HPC cluster, an existing cluster's kubeconfig, the image's source
    assert {
        "volcengine:region",
        "nodePool.password",
        "nodePool.hpcClusterId",
        "kubeconfig",
    } <= DEPLOYMENT_ONLY_KEYS
    assert {"driver.image", "driver.registry.name"} <= DEPLOYMENT_ONLY_KEYS
    # what the plan reads is never skipped
    assert (
        not {"nodePool.instanceTypes", "nodePool.maxReplicas", "cluster.kubernetesVersion"}
        & DEPLOYMENT_ONLY_KEYS
    )


@pytest.mark.parametrize("word", ["yes", "on", "no", "off", "y"])
def test_yaml_1_1_booleans_in_a_stack_file_are_words_as_the_pulumi_cli_reads_them(stack_dir, capsys, word):
    # Pulumi reads stack files as YAML 1.2: `production: yes` reaches the program as the string 'yes',
    # which it refuses; the plan reads the file the same way instead of taking `yes` for true.
    stack = stack_dir / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text() + f"  vke-gpu-dra:production: {word}\n")
    assert main(["plan", "--stack-config", str(stack)]) == 2
    err = capsys.readouterr().err
    assert f"  - vke-gpu-dra:production = '{word}': allowed: true or false\n" in err


@pytest.mark.parametrize("word", ["true", "True", "TRUE", "false", "False", "FALSE"])
def test_yaml_1_2_booleans_in_a_stack_file_are_booleans(stack_dir, word):
    stack = stack_dir / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text() + f"  vke-gpu-dra:production: {word}\n")
    assert main(["plan", "--stack-config", str(stack)]) == 0


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            b"config:\n  vke-gpu-dra:cluster.name: [\n",
            "not valid YAML at line 3, column 1: expected the node",
        ),
        (b"\xff\xfeconfig", "not UTF-8 text (invalid byte at offset 0)"),
        (
            b"config:\n  vke-gpu-dra:cluster.name: !!binary aGVsbG8=\n",
            "vke-gpu-dra:cluster.name = a YAML bytes: allowed: a string, number, boolean, list or map",
        ),
    ],
)
def test_an_unreadable_stack_file_is_one_error_naming_the_file(stack_dir, capsys, content, problem):
    stack = stack_dir / "Pulumi.dev.yaml"
    stack.write_bytes(content)
    assert main(["plan", "--stack-config", str(stack)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {stack}: ") and problem in err and "Traceback" not in err
    assert "<unicode string>" not in err


@pytest.mark.parametrize("version", ["1.35.x", "1.35.2.7", "latest", "1.35.", "containerd"])
def test_a_kubernetes_version_is_read_as_every_version_is(stack_dir, capsys, version):
    # One version grammar (vke_gpu_dra_core.versions): `1.35.x` is no version, as the stack's key says.
    assert plan_json(stack_dir, "--kubernetes-version", version) == 2
    assert f"Kubernetes version {version!r} is not known to the planner" in capsys.readouterr().err


@pytest.mark.parametrize("version", ["1.35", "v1.35.2", "1.35.2-vke.3", "V1.35"])
def test_release_forms_of_a_known_version_are_planned_with_its_gates(stack_dir, capsys, version):
    assert plan_json(stack_dir, "--kubernetes-version", version) == 0
    assert json.loads(capsys.readouterr().out)["kubernetesVersion"] == "1.35"


@pytest.mark.parametrize(
    "content", [None, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "a: 1\n"]
)
def test_manifests_with_nothing_to_plan_are_bad_input_not_a_pass(stack_dir, tmp_path, capsys, content):
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    if content is not None:
        (manifests / "objects.yaml").write_text(content)
    assert plan_json(stack_dir, "--manifests", str(manifests)) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: --manifests: no workload (Pod, Deployment, ...) or ResourceClaimTemplate in {manifests}: "
        "nothing to plan\n"
    )
