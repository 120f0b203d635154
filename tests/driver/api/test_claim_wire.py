"""`claim_wire`: a claim's `status.devices` rewritten in Kubernetes' protobuf form, every other byte kept.

The claims are built and read back with the protobuf library (`k8s_protobuf`), a second implementation of
the wire format beside the module's own. The real API servers' side is in
tests/integration/test_claim_status.py.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from vke_gpu_dra.claim_status import status_entries
from vke_gpu_dra.claim_wire import (
    MAGIC,
    WireError,
    encode_entry,
    holds_entries_of,
    read_claim,
    read_status,
    with_devices,
)
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import PreparedDevice

from .k8s_protobuf import CONFIG, NODE, PB, body, claim_message, device_status, parse


def ours(at: datetime = datetime(2026, 12, 7, 4, 30, 5, tzinfo=UTC)) -> list[dict[str, Any]]:
    prepared = [
        PreparedDevice(("gpu",), NODE, "gpu-0", ()),
        PreparedDevice(("gpu",), NODE, "gpu-1", (), "s-1"),
    ]
    return status_entries(facts.DRIVER_NAME, prepared, {}, at=at, generation=1)


def test_read_claim_finds_the_uid_the_resource_version_the_allocation_and_the_entries() -> None:
    theirs = device_status("nic.example.com", NODE, "eth0")
    claim = read_claim(body(claim_message(devices=[theirs, device_status(facts.DRIVER_NAME, NODE, "gpu-0")])))
    assert (claim.uid, claim.resource_version, claim.allocated) == ("uid-1", "42", True)
    assert claim.device_keys == (
        ("nic.example.com", NODE, "eth0", None),
        (facts.DRIVER_NAME, NODE, "gpu-0", None),
    )
    assert holds_entries_of(claim, facts.DRIVER_NAME, NODE)
    assert not holds_entries_of(claim, facts.DRIVER_NAME, "node-b")
    assert not read_claim(body(claim_message(allocated=False))).allocated


def test_our_entries_replace_ours_and_every_other_byte_is_kept() -> None:
    theirs = device_status("nic.example.com", NODE, "eth0", b'{ "mac" : "x" }')
    stale = device_status(facts.DRIVER_NAME, NODE, "gpu-3")
    elsewhere = device_status(facts.DRIVER_NAME, "node-b", "gpu-0")
    before = claim_message(devices=[theirs, stale, elsewhere])
    after = parse(with_devices(read_claim(body(before)), ours(), facts.DRIVER_NAME, NODE))

    assert after.metadata == before.metadata and after.spec == before.spec
    assert after.status.allocation.SerializeToString() == before.status.allocation.SerializeToString()
    [config] = after.status.allocation.devices.config
    assert config.deviceConfiguration.opaque.parameters.raw == CONFIG  # the whitespace and the key order
    assert list(after.status.reservedFor) == list(before.status.reservedFor)
    assert [(d.driver, d.pool, d.device) for d in after.status.devices] == [
        ("nic.example.com", NODE, "eth0"),
        (facts.DRIVER_NAME, "node-b", "gpu-0"),
        (facts.DRIVER_NAME, NODE, "gpu-0"),
        (facts.DRIVER_NAME, NODE, "gpu-1"),
    ]
    assert after.status.devices[0].data.raw == b'{ "mac" : "x" }'
    gpu0, gpu1 = after.status.devices[2:]
    assert not gpu0.HasField("shareID") and gpu1.shareID == "s-1"
    [ready] = gpu0.conditions
    assert (ready.type, ready.status, ready.reason, ready.observedGeneration) == (
        "Ready",
        "True",
        "Prepared",
        1,
    )
    assert ready.message == ours()[0]["conditions"][0]["message"]
    assert ready.lastTransitionTime.seconds == int(datetime(2026, 12, 7, 4, 30, 5, tzinfo=UTC).timestamp())
    assert not gpu0.HasField("data")


def test_no_entries_removes_ours_only() -> None:
    theirs = device_status("nic.example.com", NODE, "eth0")
    claim = read_claim(body(claim_message(devices=[device_status(facts.DRIVER_NAME, NODE, "gpu-0"), theirs])))
    after = parse(with_devices(claim, [], facts.DRIVER_NAME, NODE))
    assert [(d.driver, d.device) for d in after.status.devices] == [("nic.example.com", "eth0")]


def test_an_entry_with_data_and_a_share_decodes_as_the_api_defines_it() -> None:
    entry = {
        "driver": facts.DRIVER_NAME, "pool": NODE, "device": "gpu-0", "shareID": "s-9",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared", "message": "m",
                        "lastTransitionTime": "2026-12-07T04:30:05Z"}],
        "data": {"type": "gpu", "gpuUUID": "GPU-1", "requests": ["gpu"]},
    }  # fmt: skip
    decoded = PB["AllocatedDeviceStatus"].FromString(encode_entry(entry))
    assert (decoded.driver, decoded.pool, decoded.device, decoded.shareID) == (
        facts.DRIVER_NAME,
        NODE,
        "gpu-0",
        "s-9",
    )
    assert json.loads(decoded.data.raw) == entry["data"]
    [ready] = decoded.conditions
    assert not ready.HasField("observedGeneration")
    assert ready.lastTransitionTime.seconds == 1_796_617_805


def test_a_status_answer_reads_as_its_reason_and_message() -> None:
    status = PB["Status"](
        status="Failure", message='resourceclaims "c1" not found', reason="NotFound", code=404
    )
    assert read_status(body(status, "Status", "v1")) == ("NotFound", 'resourceclaims "c1" not found')
    assert read_status(body(claim_message())) is None


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b'{"kind": "ResourceClaim"}', "not a Kubernetes protobuf body"),
        (body(claim_message())[:-3], "past the message's end"),
        (MAGIC + b"\x0a", "a varint runs past the message's end"),
        (MAGIC + b"\x0b", "wire type 3"),
        (MAGIC + b"\x00", "field number 0"),
        (MAGIC + b"\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", "longer than 10 bytes"),
        (body(PB["ObjectMeta"](name="n"), "ConfigMap", "v1"), "holds a ConfigMap (v1), not a ResourceClaim"),
        (MAGIC + PB["Unknown"](raw=b"").SerializeToString(), "no typeMeta"),
    ],
    ids=[
        "json",
        "truncated",
        "varint-cut",
        "group-wire-type",
        "field-zero",
        "varint-too-long",
        "configmap",
        "no-type-meta",
    ],
)
def test_a_body_that_is_not_a_claim_is_refused_with_what_is_wrong(data: bytes, says: str) -> None:
    with pytest.raises(WireError, match=re.escape(says)):
        read_claim(data)


def test_a_uid_that_is_not_utf8_is_refused() -> None:
    claim = claim_message()
    raw = bytearray(claim.SerializeToString())
    at = raw.index(b"uid-1")
    raw[at : at + 5] = b"\xff\xfe-x1"
    unknown = PB["Unknown"](raw=bytes(raw))
    unknown.typeMeta.kind = "ResourceClaim"
    with pytest.raises(WireError, match=re.escape("ObjectMeta.uid is not UTF-8")):
        read_claim(MAGIC + unknown.SerializeToString())


def test_a_message_field_sent_twice_is_read_merged_as_protobuf_merges_it() -> None:
    """Two `status` fields are one status with both contents; the rewrite keeps both."""
    theirs = claim_message(devices=[device_status("nic.example.com", NODE, "eth0")])
    ours_held = PB["ResourceClaim"]()
    ours_held.status.devices.append(device_status(facts.DRIVER_NAME, NODE, "gpu-0"))
    raw = theirs.SerializeToString() + ours_held.SerializeToString()
    unknown = PB["Unknown"](raw=raw)
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = "resource.k8s.io/v1", "ResourceClaim"
    claim = read_claim(MAGIC + unknown.SerializeToString())
    assert [k[2] for k in claim.device_keys] == ["eth0", "gpu-0"] and claim.allocated
    after = parse(with_devices(claim, [], facts.DRIVER_NAME, NODE))
    assert [d.device for d in after.status.devices] == ["eth0"]
    assert after.status.allocation == theirs.status.allocation
