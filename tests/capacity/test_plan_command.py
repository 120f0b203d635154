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
