"""The chart lints and renders valid Kubernetes 1.34 objects with the expected names and labels."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from vke_gpu_dra_core import facts

from tests.chart import chartlib
from tests.chart.chartlib import (
    CHART_DIR,
    KUBE_VERSION,
    NO_DEVICE_CLASSES,
    RELEASE,
    SCENARIOS,
    SIMULATED,
    Helm,
    chart_metadata,
    find,
    find_all,
    is_test_hook,
)

CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "DeviceClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def test_chart_metadata() -> None:
    chart = chart_metadata()
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "vke-gpu-dra-driver"
    assert chart["version"] == chart["appVersion"] == "0.1.0"
    assert chart["kubeVersion"] == ">=1.34.0-0"


@pytest.mark.parametrize("values", [{}, SIMULATED], ids=["default", "simulated"])
def test_helm_lint_strict(helm: Helm, values: dict[str, Any]) -> None:
    args = ["lint", "--strict", str(CHART_DIR), "--kube-version", KUBE_VERSION]
    if values:
        args += ["--values", str(helm.values_file(values))]
    out = helm.run(*args).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_object_is_valid_kubernetes_1_34(render: Any, scenario: str) -> None:
    objects = render(SCENARIOS[scenario])
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - message for the failure
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {exc}")


@pytest.mark.parametrize(
    ("scenario", "device_classes"),
    [("default", 2), ("simulated", 2), ("device-classes-off", 0)],
)
def test_rendered_object_set(render: Any, scenario: str, device_classes: int) -> None:
    objects = [o for o in render(SCENARIOS[scenario]) if not is_test_hook(o)]
    kinds = sorted(o["kind"] for o in objects)
    expected = [
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        *["DeviceClass"] * device_classes,
        "Service",
        "ServiceAccount",
        # one for the slices of the plugin's node, one for its entries in claims' status
        *["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 2,
    ]
    assert kinds == sorted(expected)


def test_optional_objects_can_be_turned_off(render: Any) -> None:
    objects = render(
        {
            "rbac": {"create": False},
            "admissionPolicy": {"enabled": False},
            "deviceClasses": {"enabled": False},
            "helmTest": {"enabled": False},
            "metrics": {"service": {"enabled": False}},
            "serviceAccount": {"create": False, "name": "existing-sa"},
        }
    )
    assert [o["kind"] for o in objects] == ["DaemonSet"]
    assert objects[0]["spec"]["template"]["spec"]["serviceAccountName"] == "existing-sa"


def test_existing_service_account_needs_a_name(helm: Helm) -> None:
    message = helm.template_error({"serviceAccount": {"create": False}})
    assert "serviceAccount.name is required when serviceAccount.create is false" in message


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_recommended_labels_on_every_object(render: Any, scenario: str) -> None:
    app_version = chart_metadata()["appVersion"]
    for obj in render(SCENARIOS[scenario]):
        labels = obj["metadata"]["labels"]
        where = f"{obj['kind']} {obj['metadata']['name']}"
        assert labels["app.kubernetes.io/name"] == "vke-gpu-dra-driver", where
        assert labels["app.kubernetes.io/instance"] == RELEASE, where
        assert labels["app.kubernetes.io/version"] == app_version, where
        assert labels["app.kubernetes.io/part-of"] == "vke-gpu-dra", where
        assert labels["app.kubernetes.io/managed-by"] == "Helm", where
        assert labels["helm.sh/chart"] == f"vke-gpu-dra-driver-{app_version}", where
        expected_component = (
            "test"
            if is_test_hook(obj)
            else "device-classes"
            if obj["kind"] == "DeviceClass"
            else "kubelet-plugin"
        )
        assert labels["app.kubernetes.io/component"] == expected_component, where


def test_pod_template_carries_labels_and_selector(render: Any) -> None:
    daemonset = find(render({"kubeletPlugin": {"podLabels": {"team": "gpu"}}}), "DaemonSet")
    selector = daemonset["spec"]["selector"]["matchLabels"]
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert selector == {
        "app.kubernetes.io/name": "vke-gpu-dra-driver",
        "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/component": "kubelet-plugin",
    }
    assert selector.items() <= pod_labels.items()
    assert pod_labels["app.kubernetes.io/version"] == chart_metadata()["appVersion"]
    assert pod_labels["team"] == "gpu"


@pytest.mark.parametrize(
    ("release", "values", "prefix"),
    [
        ("gpu", {}, "gpu-vke-gpu-dra-driver"),
        ("my-vke-gpu-dra-driver", {}, "my-vke-gpu-dra-driver"),
        ("gpu", {"nameOverride": "dra"}, "gpu-dra"),
        ("gpu", {"fullnameOverride": RELEASE}, RELEASE),
        ("a-very-long-release-name-that-goes-on-and-on", {}, "a-very-long-release-name-that-goes-on-an"),
    ],
)
def test_names_derive_from_the_release(
    render: Any, release: str, values: dict[str, Any], prefix: str
) -> None:
    objects = render(values, release=release, namespace="gpu-system")
    for obj in objects:
        name = obj["metadata"]["name"]
        if obj["kind"] == "DeviceClass":
            # fixed: workloads reference them by name
            assert name in {spec.name for spec in facts.DEVICE_CLASSES}
            continue
        assert name.startswith(prefix + "-"), f"{obj['kind']} {name}"
        assert len(name) <= 63
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"]
        else:
            assert obj["metadata"]["namespace"] == "gpu-system"
    assert find(objects, "DaemonSet")["metadata"]["name"] == f"{prefix}-kubelet-plugin"


def test_release_named_like_the_procedure_gets_its_daemonset_name(render: Any) -> None:
    objects = render({"fullnameOverride": RELEASE})
    assert find(objects, "DaemonSet")["metadata"]["name"] == f"{RELEASE}-kubelet-plugin"


def test_two_releases_do_not_collide(render: Any) -> None:
    def names(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(o["kind"], o["metadata"]["name"]) for o in objects if o["kind"] != "DeviceClass"}

    first = names(render(NO_DEVICE_CLASSES, release="one"))
    second = names(render(NO_DEVICE_CLASSES, release="two"))
    assert first and second and not first & second


def test_notes_list_the_verification_commands() -> None:
    notes = (CHART_DIR / "templates" / "NOTES.txt").read_text()
    for command in (
        "kubectl api-resources | grep resource.k8s.io",
        "kubectl get pods -n {{ .Release.Namespace }} -o wide",
        "kubectl get deviceclass,resourceslice",
        "kubectl get resourceslice -o yaml",
        "kubectl describe node <dra-node-name> | grep -E 'nvidia\\.com/gpu|Capacity|Allocatable'",
        "helm test {{ .Release.Name }} -n {{ .Release.Namespace }}",
    ):
        assert command in notes, command
    # helm 3 renders NOTES.txt only in an install, which needs a cluster even as a client-side dry run:
    # tests/integration/test_chart_rbac.py renders them against the real API server.


def test_all_kinds_of_objects_are_accounted_for(render: Any) -> None:
    kinds = {o["kind"] for o in render({})}
    assert kinds == {
        "Service",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "DeviceClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "Pod",
    }
    assert find_all(render({}), "Pod")[0]["metadata"]["annotations"]["helm.sh/hook"] == "test"


def test_missing_helm_skips_locally_but_fails_in_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setattr(chartlib, "find_helm", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="helm binary not found"):
        chartlib.require_helm(tmp_path)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true: not skipping"):
        chartlib.require_helm(tmp_path)


def test_helm_is_the_real_binary(helm: Helm) -> None:
    assert helm.run("version", "--short").stdout.startswith(("v3.", "v4."))


def test_kubernetes_older_than_1_34_is_refused(helm: Helm) -> None:
    with pytest.raises(chartlib.HelmError, match=r"chart requires kubeVersion: >=1\.34\.0-0"):
        helm.run("template", RELEASE, str(CHART_DIR), "--kube-version", "1.33.5")
