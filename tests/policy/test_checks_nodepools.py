from __future__ import annotations

from vke_dra_policies.checks import nodepools
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r
from vke_gpu_dra_core.catalog import gpu_types
from vke_gpu_dra_core.versions import format_version

from .helpers import DRA_LABELS, pool, res, runtime

CATALOG = gpu_types()
MIN_CONTAINERD = format_version(facts.MIN_CONTAINERD_VERSION)


def test_gpu_pool_without_any_label_misses_both() -> None:
    found = nodepools.labels(pool(labels=[]), CATALOG)
    assert [v.message.split(" node label ")[1].split(" ")[0] for v in found] == list(
        facts.REQUIRED_NODE_LABELS
    )
    assert all("is missing" in v.message and "kubernetesConfig.labels" in v.message for v in found)


def test_gpu_pool_without_kubernetes_config_is_a_gpu_pool_missing_labels() -> None:
    bare = res(pt.NODE_POOL, "gpu", {"nodeConfig": {"instanceTypeIds": ["ecs.gni2.3xlarge"]}})
    assert len(nodepools.labels(bare, CATALOG)) == 2


def test_wrong_present_value_is_reported_with_the_value_found() -> None:
    labels = [
        {"key": facts.LABEL_GPU_SCHEDULE, "value": facts.LABEL_GPU_SCHEDULE_DRA},
        {"key": facts.LABEL_GPU_PRESENT, "value": "false"},
    ]
    (v,) = nodepools.labels(pool(labels=labels), CATALOG)
    assert f'{facts.LABEL_GPU_PRESENT} is "false"' in v.message


def test_cpu_pool_and_device_plugin_pool_need_no_dra_labels() -> None:
    assert nodepools.labels(pool(types=("ecs.g3i.2xlarge",), labels=[]), CATALOG) == []
    plugin = [{"key": facts.LABEL_GPU_SCHEDULE, "value": facts.LABEL_GPU_SCHEDULE_CONFLICTING[0]}]
    assert nodepools.labels(pool(labels=plugin), CATALOG) == []


def test_unknown_labels_or_types_are_not_judged() -> None:
    assert nodepools.labels(pool(labels=r.UNKNOWN), CATALOG) == []
    assert nodepools.labels(pool(types=r.UNKNOWN, labels=[]), CATALOG) == []
    partly = [
        {"key": facts.LABEL_GPU_SCHEDULE, "value": facts.LABEL_GPU_SCHEDULE_DRA},
        {"key": facts.LABEL_GPU_PRESENT, "value": r.UNKNOWN},
    ]
    assert nodepools.labels(pool(labels=partly), CATALOG) == []


def test_labels_given_as_a_map_are_read_too() -> None:
    assert nodepools.labels(pool(labels=dict(facts.REQUIRED_NODE_LABELS)), CATALOG) == []


def test_dra_pool_with_cpu_or_no_instance_types() -> None:
    (v,) = nodepools.gpu_instance_types(pool(types=("ecs.gni2.3xlarge", "ecs.g3i.2xlarge")), CATALOG)
    assert "ecs.g3i.2xlarge" in v.message and "ecs.gni2.3xlarge" not in v.message.split("carry")[0]
    (v,) = nodepools.gpu_instance_types(pool(types=()), CATALOG)
    assert "instanceTypeIds is empty" in v.message
    assert nodepools.gpu_instance_types(pool(types=(r.UNKNOWN,)), CATALOG) == []
    assert nodepools.gpu_instance_types(pool(types=("ecs.g3i.2xlarge",), labels=[]), CATALOG) == []


def test_catalog_is_extended_by_policy_config() -> None:
    extended = gpu_types(["ecs.g3i.2xlarge", "ecs.newgpu", "ecs.other.*"])
    assert nodepools.gpu_instance_types(pool(types=("ecs.g3i.2xlarge",)), extended) == []
    assert "ecs.newgpu.8xlarge" in extended and "ecs.other.large" in extended
    assert "ecs.g3i.4xlarge" not in extended
    assert "ecs.gni2x.large" not in CATALOG


def test_a_size_of_a_catalogued_gpu_family_without_its_own_row_is_a_gpu_type() -> None:
    assert nodepools.gpu_instance_types(pool(types=("ecs.gni2.8xlarge", "ecs.pni2.14xlarge")), CATALOG) == []
    assert len(nodepools.labels(pool(types=("ecs.hpcpni3ln.90xlarge",), labels=[]), CATALOG)) == 2


def test_messages_name_the_pool_the_value_and_the_fix() -> None:
    (v,) = nodepools.gpu_instance_types(pool(types=("ecs.g3i.2xlarge",)), CATALOG)
    assert v.message.startswith(f"{pool().label}: instance type(s) ecs.g3i.2xlarge carry no NVIDIA GPU")
    assert nodepools.CATALOG_FILE in v.message and "extraGpuInstanceTypes" in v.message
    (v,) = nodepools.gpu_instance_types(pool(types=()), CATALOG)
    assert nodepools.CATALOG_FILE in v.message


def test_auto_scaling_bounds_advisory() -> None:
    bounded = {"enabled": True, "minReplicas": 0, "maxReplicas": 4}
    assert nodepools.auto_scaling_bounds(pool(autoScaling=bounded)) == []
    assert "autoScaling is not set" in nodepools.auto_scaling_bounds(pool())[0].message
    assert (
        "enabled is false" in nodepools.auto_scaling_bounds(pool(autoScaling={"enabled": False}))[0].message
    )
    no_max = nodepools.auto_scaling_bounds(pool(autoScaling={"enabled": True, "minReplicas": 1}))
    assert "no minReplicas/maxReplicas" in no_max[0].message
    assert nodepools.auto_scaling_bounds(pool(autoScaling=r.UNKNOWN)) == []


def test_runtime_versions() -> None:
    assert nodepools.runtime_version(runtime("2.1")) == []
    assert nodepools.runtime_version(runtime("containerd://2.1.3")) == []
    assert nodepools.runtime_version(runtime(r.UNKNOWN)) == []
    assert f'"2.0" is older than {MIN_CONTAINERD}' in nodepools.runtime_version(runtime("2.0"))[0].message
    assert "not MAJOR.MINOR" in nodepools.runtime_version(runtime("stable"))[0].message
    assert "no containerd version" in nodepools.runtime_version(runtime(None))[0].message
    docker = res(
        pt.NODE_POOL_RUNTIME,
        "rt",
        {"runtime_type": "docker", "runtime_version": "2.1"},
    )
    assert 'runtime type "docker"' in nodepools.runtime_version(docker)[0].message


def test_pool_and_runtime_are_related_by_dependency_or_pool_id() -> None:
    a, b = pool("a", id="np-a"), pool("b", id="np-b")
    by_dep = runtime(name="rt-a", dependencies=(a.urn,))
    by_id = res(
        pt.NODE_POOL_RUNTIME,
        "rt-b",
        {"runtime_type": "containerd", "runtime_version": "2.1", "node_pool_id": "np-b"},
    )
    assert nodepools.runtimes([a, b, by_dep, by_id], CATALOG) == []
    (v,) = nodepools.runtimes([a, b, by_dep], CATALOG)
    assert v.urn == b.urn and "no NodePoolRuntime" in v.message


def test_single_pool_without_runtime_is_reported() -> None:
    (v,) = nodepools.runtimes([pool()], CATALOG)
    assert f'type "containerd" and version "{MIN_CONTAINERD}" or later' in v.message


def test_device_plugin_pool_needs_no_runtime_pin() -> None:
    plugin = pool(labels=[{"key": facts.LABEL_GPU_SCHEDULE, "value": "mgpu"}])
    assert nodepools.runtimes([plugin], CATALOG) == []
    assert nodepools.is_dra_gpu_pool(pool(types=(), labels=DRA_LABELS[1:]), CATALOG)
