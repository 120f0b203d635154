"""The objects docs/health.md shows are valid Kubernetes 1.36 objects, and name the plugin's taint keys."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from vke_gpu_dra.health.policy import DEFAULT_IGNORED_XIDS, TAINT_EFFECT, TAINT_SUFFIX
from vke_gpu_dra_core import facts

DOC = Path(__file__).resolve().parents[2] / "docs" / "health.md"
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: yaml.safe_load(b)["kind"])
def test_examples_are_valid_1_36_objects(block: str) -> None:
    kubernetes_validate.validate(yaml.safe_load(block), "1.36.0", strict=True)


def test_the_taint_table_matches_the_policy() -> None:
    text = DOC.read_text()
    for kind, suffix in TAINT_SUFFIX.items():
        assert f"| `{facts.DRIVER_NAME}/{suffix}` |" in text
        assert f"| `{TAINT_EFFECT[kind]}` |" in text
    for xid in DEFAULT_IGNORED_XIDS:
        assert f" {xid} (" in text
