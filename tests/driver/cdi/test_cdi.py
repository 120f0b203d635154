import copy
import os

import pytest
import yaml
from vke_gpu_dra import cdi
from vke_gpu_dra_core import facts
from vke_gpu_dra_core.device_model import Device
from vke_gpu_dra_core.discovery.simulated import SimulatedSource
from vke_gpu_dra_testing import cdi_check

from tests.driver.devices import full_gpu, mig_device

UID = "6f1c2e3a-1111-4222-8333-944455556666"
#: The CDI kind of the driver's per-claim specs (`<vendor>/<class>`).
CLAIM_KIND = f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_CLAIM}"


def real_gpu(minor: int, uuid: str = "GPU-aaaa") -> Device:
    return full_gpu(minor, uuid, {facts.ATTR_TYPE: "gpu"})


def mig(parent_minor: int) -> Device:
    caps = ("/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13")
    return mig_device(parent_minor, "MIG-bbbb", {facts.ATTR_TYPE: "mig"}, caps)


def test_names_and_ids(tmp_path):
    assert cdi.CLAIM_KIND == CLAIM_KIND
    assert cdi.claim_spec_path(tmp_path, UID).name == f"{facts.CDI_VENDOR}-{facts.CDI_CLASS_CLAIM}_{UID}.yaml"
    assert cdi.claim_device_id(UID, "gpu-0") == f"{CLAIM_KIND}={UID}-gpu-0"
    assert cdi.device_name_from_cdi(UID, f"{UID}-gpu-0-mig-19-0-1") == "gpu-0-mig-19-0-1"
    with pytest.raises(cdi.CdiSpecError, match="does not belong"):
        cdi.device_name_from_cdi(UID, "other-gpu-0")


def test_real_gpu_spec_has_device_nodes_per_device_and_no_visible_devices_list():
    spec = cdi.build_claim_spec(
        UID, [real_gpu(0, "GPU-a"), real_gpu(3, "GPU-b")], optional_nodes=["/dev/nvidia-uvm"]
    )
    assert spec["kind"] == CLAIM_KIND
    assert spec["cdiVersion"] == "0.5.0"  # the claim UID starts with a digit
    assert [d["name"] for d in spec["devices"]] == [f"{UID}-gpu-0", f"{UID}-gpu-3"]
    assert spec["devices"][1]["containerEdits"] == {"deviceNodes": [{"path": "/dev/nvidia3"}]}
    common = spec["containerEdits"]
    assert common["deviceNodes"] == [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]
    assert "NVIDIA_VISIBLE_DEVICES=void" in common["env"]  # each device is its nodes, never a spec-wide list
    assert f"DRA_RESOURCE_CLAIM_UID={UID}" in common["env"]


def test_mig_spec_includes_parent_and_caps_nodes():
    spec = cdi.build_claim_spec(UID, [mig(1)])
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia1"},
        {"path": "/dev/nvidia-caps/nvidia-cap12"},
        {"path": "/dev/nvidia-caps/nvidia-cap13"},
    ]


def test_simulated_spec_is_env_only():
    devices = SimulatedSource(2, "NVIDIA A30", "node-a").discover().devices
    spec = cdi.build_claim_spec("abc-uid", devices)
    assert spec["cdiVersion"] == "0.3.0"  # letter-led names, env only
    assert spec["devices"][1]["containerEdits"] == {
        "env": ["GPU_DEVICE_1=gpu-1", f"GPU_DEVICE_1_UUID={devices[1].uuid}"]
    }
    assert "deviceNodes" not in spec["containerEdits"]
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void", "DRA_RESOURCE_CLAIM_UID=abc-uid"]


def test_empty_claim_and_nodeless_real_device_are_rejected():
    with pytest.raises(cdi.CdiSpecError, match="at least one device"):
        cdi.build_claim_spec(UID, [])
    broken = Device(name="gpu-0", device_type="gpu", uuid="GPU-x", attributes={}, capacity={})
    with pytest.raises(cdi.CdiSpecError, match="gpu-0 has no device nodes"):
        cdi.build_claim_spec(UID, [broken])


def test_write_list_load_delete_round_trip(tmp_path):
    spec = cdi.build_claim_spec(UID, [real_gpu(0)])
    path = cdi.write_claim_spec(tmp_path, UID, spec)
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert yaml.safe_load(path.read_text()) == spec
    assert cdi.load_spec(path) == spec
    (tmp_path / f".{path.name}.123.tmp").write_text("partial")  # a leftover temp file is not a spec
    (tmp_path / f"{facts.CDI_VENDOR}-{facts.CDI_CLASS_DEVICE}_base.yaml").write_text(
        "x: 1"
    )  # NVIDIA's base spec is not ours
    assert cdi.list_claim_specs(tmp_path) == {UID: path}
    assert cdi.delete_claim_spec(tmp_path, UID) is True
    assert cdi.delete_claim_spec(tmp_path, UID) is False
    assert cdi.list_claim_specs(tmp_path) == {}
    assert cdi.list_claim_specs(tmp_path / "missing") == {}


def test_write_replaces_atomically_and_leaves_no_temp_files(tmp_path):
    cdi.write_claim_spec(tmp_path, UID, cdi.build_claim_spec(UID, [real_gpu(0)]))
    cdi.write_claim_spec(tmp_path, UID, cdi.build_claim_spec(UID, [real_gpu(1)]))
    assert os.listdir(tmp_path) == [cdi.claim_spec_path(tmp_path, UID).name]
    assert "/dev/nvidia1" in cdi.claim_spec_path(tmp_path, UID).read_text()


def test_the_checker_refuses_a_device_without_edits():
    spec = cdi.build_claim_spec(UID, [real_gpu(0)])
    spec["devices"][0]["containerEdits"] = {}
    with pytest.raises(cdi.CdiSpecError, match=r"devices\[0\]\.containerEdits: must not be empty"):
        cdi_check.validate_spec(spec)


def test_every_spec_a_test_writes_is_checked(tmp_path):
    spec = cdi.build_claim_spec(UID, [real_gpu(0)])
    spec["devices"][0]["containerEdits"] = {}
    with pytest.raises(cdi.CdiSpecError, match=r"devices\[0\]\.containerEdits: must not be empty"):
        cdi.write_claim_spec(tmp_path, UID, spec)
    assert not list(tmp_path.iterdir())


def test_load_spec_names_the_file(tmp_path):
    bad = tmp_path / f"{facts.CDI_VENDOR}-{facts.CDI_CLASS_CLAIM}_x.yaml"
    bad.write_text("cdiVersion: [unclosed")
    with pytest.raises(cdi.CdiSpecError, match=r"claim_x\.yaml: not valid YAML"):
        cdi.load_spec(bad)
    bad.write_text("cdiVersion: 0.3.0\nkind: a/b\ndevices: []\n")
    with pytest.raises(cdi.CdiSpecError, match=r"claim_x\.yaml: CDI spec devices: at least one device"):
        cdi.load_spec(bad)


VALID = {
    "cdiVersion": "0.3.0",
    "kind": "vendor.com/class",
    "devices": [{"name": "dev0", "containerEdits": {"env": ["A=1"]}}],
}


def mutated(change):
    spec = copy.deepcopy(VALID)
    change(spec)
    return spec


def edits(**fields):
    """A change that sets fields of the first device's containerEdits."""
    return lambda s: s["devices"][0]["containerEdits"].update(**fields)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.update(cdiVersion="0.9.0"), "cdiVersion: must be one of"),
        (lambda s: s.pop("cdiVersion"), "cdiVersion: must be one of"),
        (lambda s: s.update(kind="noslash"), "kind: must be <vendor>/<class>"),
        (lambda s: s.update(kind="vendor.com/-class"), "kind: must be"),
        (lambda s: s.update(kind="vendor.com/cl.ass"), "needs at least 0.6.0"),
        (lambda s: s.update(extra=1), r"top level: unknown field\(s\) extra"),
        (lambda s: s["devices"][0].update(foo=1), r"devices\[0\]: unknown field\(s\) foo"),
        (edits(envs=[]), r"unknown field\(s\) envs"),
        (lambda s: s["devices"][0].update(name="-bad"), r"devices\[0\]\.name: must be alphanumeric"),
        (lambda s: s["devices"][0].update(name="0dev"), "0.3.0 is too old for the fields used"),
        (lambda s: s["devices"].append(copy.deepcopy(s["devices"][0])), "duplicate device name 'dev0'"),
        (lambda s: s["devices"][0].pop("containerEdits"), "containerEdits is required"),
        (edits(env=["NOEQUALS"]), r"env\[0\]: must be NAME=value"),
        (edits(deviceNodes=[{"hostPath": "/dev/x"}]), "path is required and must be absolute"),
        (
            edits(deviceNodes=[{"path": "/dev/x", "permissions": "rwx"}]),
            "permissions must be a subset of 'rwm'",
        ),
        (edits(deviceNodes=[{"path": "/dev/x", "hostPath": "/dev/y"}]), "needs at least 0.5.0"),
        (edits(mounts=[{"hostPath": "/a", "containerPath": "/b", "type": "bind"}]), "needs at least 0.4.0"),
        (edits(mounts=[{"hostPath": "/a"}]), "containerPath is required"),
        (edits(hooks=[{"hookName": "boot", "path": "/bin/x"}]), "hookName must be one of"),
        (
            edits(hooks=[{"hookName": "poststop", "path": "/x", "timeout": 0}]),
            "timeout: must be an integer >= 1",
        ),
        (lambda s: s.update(annotations={"a": "b"}), "needs at least 0.6.0"),
        (edits(additionalGids=[5]), "needs at least 0.7.0"),
        (edits(netDevices=[{"hostInterfaceName": "eth1", "name": "n"}]), "needs at least 1.1.0"),
        (edits(netDevices=[{"name": "n"}]), "hostInterfaceName and name are required"),
        (lambda s: s.update(devices=[]), "at least one device"),
    ],
)
def test_validator_rejects_with_a_clear_message(change, message):
    with pytest.raises(cdi.CdiSpecError, match=message):
        cdi_check.validate_spec(mutated(change))


@pytest.mark.parametrize(
    ("change", "version"),
    [
        (lambda s: None, "0.3.0"),
        (lambda s: s["devices"][0].update(name="0dev"), "0.5.0"),
        (lambda s: s.update(annotations={"a": "b"}), "0.6.0"),
        (edits(intelRdt={"closID": "x"}), "0.7.0"),
        (edits(netDevices=[{"hostInterfaceName": "e", "name": "n"}]), "1.1.0"),
    ],
)
def test_minimum_version_per_field(change, version):
    spec = mutated(change)
    assert cdi.minimum_version(spec) == version
    spec["cdiVersion"] = version
    cdi_check.validate_spec(spec)
    spec["cdiVersion"] = "1.1.0"  # newer than needed is still valid
    cdi_check.validate_spec(spec)
