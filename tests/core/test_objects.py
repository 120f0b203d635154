"""Reading fields of Kubernetes objects as the API returns them."""

from __future__ import annotations

from vke_gpu_dra_core.objects import lookup


def test_a_present_field_is_returned_whatever_its_type() -> None:
    pod = {"status": {"phase": "Running", "conditions": [{"type": "Ready"}]}, "spec": {"nodeName": ""}}
    assert lookup(pod, "status", "phase") == "Running"
    assert lookup(pod, "status", "conditions") == [{"type": "Ready"}]
    assert lookup(pod, "spec", "nodeName") == ""
    assert lookup(pod) is pod


def test_a_missing_key_or_a_parent_that_is_not_a_map_is_none() -> None:
    claim = {"status": {"allocation": None, "reservedFor": ["x"]}, "metadata": "oops"}
    assert lookup(claim, "status", "allocation", "devices") is None
    assert lookup(claim, "status", "reservedFor", "0") is None
    assert lookup(claim, "metadata", "uid") is None
    assert lookup(None, "metadata") is None
