"""What a `helm install` user expects: a metrics Service, an optional ServiceMonitor, chart metadata, and the
new values rendering valid objects (kubernetes-validate strict; the ServiceMonitor CRD is checked by hand)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from tests.chart.chartlib import (
    CHART_DIR,
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    SIMULATED,
    Helm,
    chart_metadata,
    find,
    find_all,
)

#: Every value this chart added for helm users, switched away from its default.
ALL_ON: dict[str, Any] = {
    "logLevel": "warning",
    "seamlessUpgrades": {"enabled": True},
    "metrics": {
        "service": {"enabled": True},
        "serviceMonitor": {
            "enabled": True,
            "interval": "15s",
            "scrapeTimeout": "10s",
            "labels": {"release": "kube-prometheus-stack"},
        },
    },
    "kubeletPlugin": {
        "podSecurityContext": {"fsGroup": 0},
        "containerSecurityContext": {"seLinuxOptions": {"type": "spc_t"}},
        "extraEnv": [{"name": "GRPC_VERBOSITY", "value": "error"}],
        "tolerations": [{"operator": "Exists"}],
    },
}


def plugin_pod_labels(objects: list[dict[str, Any]]) -> dict[str, str]:
    return dict(find(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"])


def test_metrics_service_selects_the_plugin_pods_on_the_metrics_port(render: Any) -> None:
    objects = render({"metricsPort": 9400})
    service = find(objects, "Service")
    assert service["metadata"]["name"] == f"{RELEASE}-vke-gpu-dra-driver-metrics"
    assert service["metadata"]["namespace"] == NAMESPACE
    assert service["spec"]["clusterIP"] == "None"  # headless: one endpoint per plugin pod
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}
    ]
    selector = service["spec"]["selector"]
    assert selector.items() <= plugin_pod_labels(objects).items()
    assert selector == find(objects, "DaemonSet")["spec"]["selector"]["matchLabels"]
    assert find_all(objects, "ServiceMonitor") == []  # optional, off by default


def test_service_monitor_scrapes_the_metrics_service(render: Any) -> None:
    objects = render(ALL_ON)
    service, monitor = find(objects, "Service"), find(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert set(monitor["spec"]) == {"namespaceSelector", "selector", "endpoints"}
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}
    ]
    assert {p["name"] for p in service["spec"]["ports"]} == {"metrics"}


def test_service_monitor_needs_the_service(helm: Helm) -> None:
    values = {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}}
    assert "metrics.serviceMonitor.enabled needs metrics.service.enabled" in helm.template_error(values)


@pytest.mark.parametrize("values", [ALL_ON, {**ALL_ON, **SIMULATED}], ids=["nvml", "simulated"])
def test_every_new_value_renders_valid_kubernetes_1_34(render: Any, values: dict[str, Any]) -> None:
    for obj in render(values):
        if (
            obj["kind"] == "ServiceMonitor"
        ):  # a CRD: checked in test_service_monitor_scrapes_the_metrics_service
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:  # pragma: no cover - message for the failure
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {exc}")


def test_helm_lint_strict_with_every_new_value(helm: Helm) -> None:
    args = ["lint", "--strict", str(CHART_DIR), "--kube-version", KUBE_VERSION, "--values"]
    out = helm.run(*args, str(helm.values_file(ALL_ON))).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out


def test_chart_metadata_names_home_sources_and_maintainers() -> None:
    chart = chart_metadata()
    assert chart["home"].startswith("https://")
    assert chart["sources"] and all(s.startswith("https://") for s in chart["sources"])
    assert chart["maintainers"] and all(m.get("name") for m in chart["maintainers"])


def test_readme_documents_every_value_and_the_upgrade_and_uninstall_notes() -> None:
    readme = (CHART_DIR / "README.md").read_text()
    for key in (
        "logLevel",
        "seamlessUpgrades.enabled",
        "metrics.service.enabled",
        "metrics.serviceMonitor",
        "kubeletPlugin.podSecurityContext",
        "kubeletPlugin.containerSecurityContext",
        "kubeletPlugin.extraEnv",
    ):
        assert f"`{key}" in readme, key
    assert "## Upgrade" in readme and "## Uninstall" in readme
    assert "takes no lock" in readme  # the first rollout from a release without rolling-update ids
