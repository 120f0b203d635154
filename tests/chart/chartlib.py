"""Helpers for the Helm chart tests: the real helm binary, rendering with values, finding rendered objects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from vke_gpu_dra_core import facts

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "driver" / "chart"
KUBE_VERSION = "1.34.0"
#: The release and namespace of the procedure's `helm install`.
RELEASE = facts.NVIDIA_CHART
NAMESPACE = facts.DRIVER_NAMESPACE

#: Value overrides of the scenarios every rendering test covers.
SIMULATED: dict[str, Any] = {"deviceSource": {"type": "simulated", "simulatedGpus": 4}}
NO_DEVICE_CLASSES: dict[str, Any] = {"deviceClasses": {"enabled": False}}
SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
    "simulated": SIMULATED,
    "device-classes-off": NO_DEVICE_CLASSES,
}

Manifest = dict[str, Any]


def find_helm() -> Path | None:
    """The project's helm (the venv that runs the tests, then .venv), else helm on PATH."""
    for candidate in (Path(sys.executable).parent / "helm", REPO_ROOT / ".venv" / "bin" / "helm"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("helm")
    return Path(found) if found else None


def require_helm(home: Path) -> Helm:
    """The project's helm, or skip the test; under CI (CI=true) a missing helm fails instead of skipping."""
    binary = find_helm()
    if binary is None:
        reason = "helm binary not found (.venv/bin/helm or PATH); run scripts/setup to install it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: not skipping)")
        pytest.skip(reason)
    return Helm(binary, home)


class HelmError(RuntimeError):
    """helm exited non-zero; the message carries its stderr."""


class Helm:
    """Runs the real helm binary with a throw-away home, so no user configuration or cache leaks in."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.home = home
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        self._cache: dict[tuple[str, str, str, str], list[Manifest]] = {}
        self._counter = 0

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=self.env, check=False, timeout=120
        )
        if proc.returncode != 0:
            raise HelmError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
        return proc

    def values_file(self, values: dict[str, Any]) -> Path:
        self._counter += 1
        path = self.home / f"values-{self._counter}.json"  # JSON is YAML: exact types, no --set parsing
        path.write_text(json.dumps(values))
        return path

    def template(
        self,
        values: dict[str, Any] | None = None,
        release: str = RELEASE,
        namespace: str = NAMESPACE,
        kube_version: str = KUBE_VERSION,
    ) -> list[Manifest]:
        """Render the chart (test hooks included) for a cluster of `kube_version` and return its objects;
        cached per arguments."""
        key = (release, namespace, json.dumps(values or {}, sort_keys=True), kube_version)
        if key not in self._cache:
            args = [
                "template",
                release,
                str(CHART_DIR),
                "--namespace",
                namespace,
                "--kube-version",
                kube_version,
            ]
            if values:
                args += ["--values", str(self.values_file(values))]
            out = self.run(*args).stdout
            self._cache[key] = [doc for doc in yaml.safe_load_all(out) if doc]
        return [json.loads(json.dumps(doc)) for doc in self._cache[key]]  # callers may mutate

    def template_error(self, values: dict[str, Any]) -> str:
        """Render with values that must be rejected; return helm's error output."""
        with pytest.raises(HelmError) as excinfo:
            self.template(values)
        return str(excinfo.value)


def find(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    """The single object of `kind` (and `name`, if given)."""
    matches = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, (
        f"expected one {kind} {name or ''}, got {[o['metadata']['name'] for o in matches]}"
    )
    return matches[0]


def find_all(objects: list[Manifest], kind: str) -> list[Manifest]:
    return [o for o in objects if o["kind"] == kind]


def is_test_hook(obj: Manifest) -> bool:
    return obj["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"


def plugin_container(objects: list[Manifest]) -> Manifest:
    daemonset = find(objects, "DaemonSet")
    containers = daemonset["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["plugin"]
    return containers[0]


def chart_metadata() -> dict[str, Any]:
    return yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())


def default_values() -> dict[str, Any]:
    return yaml.safe_load((CHART_DIR / "values.yaml").read_text())
