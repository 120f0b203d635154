"""The objects docs/health.md shows are valid Kubernetes 1.37 objects, and name the plugin's taint keys."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from vke_gpu_dra.health.policy import DEFAULT_IGNORED_XIDS, TAINT_EFFECT, TAINT_SUFFIX
from vke_gpu_dra_core import facts

DOC = Path(__file__).resolve().parents[3] / "docs" / "health.md"
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: yaml.safe_load(b)["kind"])
def test_examples_are_valid_1_37_objects_and_1_34_ones_but_the_v1_device_taint_rule(block: str) -> None:
    obj = yaml.safe_load(block)
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    if obj["kind"] != "DeviceTaintRule":
        kubernetes_validate.validate(obj, "1.34.0", strict=True)
    else:  # resource.k8s.io/v1 has DeviceTaintRules from 1.37 only
        assert obj["apiVersion"] == "resource.k8s.io/v1"
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(obj, "1.36.0", strict=True)


def test_the_taint_table_matches_the_policy() -> None:
    text = DOC.read_text()
    for kind, suffix in TAINT_SUFFIX.items():
        assert f"| `{facts.DRIVER_NAME}/{suffix}` |" in text
        assert f"| `{TAINT_EFFECT[kind]}` |" in text
    for xid in DEFAULT_IGNORED_XIDS:
        assert f" {xid} (" in text
