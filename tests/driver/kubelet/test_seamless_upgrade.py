"""Seamless upgrades: two plugin processes with rolling-update ids on one node, as during a rollout.

kubelet (1.33+) keeps both registrations and may send any call to either instance, so the tests
split overlapping calls across both and check the one checkpoint and the CDI specs they share.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from vke_gpu_dra import cdi
from vke_gpu_dra.kubelet.registration import registration_socket, rolling_update_registration_names
from vke_gpu_dra.kubelet.sockets import MAX_SOCKET_PATH_BYTES
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing import cdi_check
from vke_gpu_dra_testing.fake_apiserver import FakeAPIServer
from vke_gpu_dra_testing.kubelet_client import Kubelet
from vke_gpu_dra_testing.plugin_env import (
    NODE,
    checkpoint_document,
    claim,
    free_port,
    plugin_args,
    wait_until,
)

from tests.driver.plugin.test_plugin_process import launch

OLD, NEW = "6f1c2a9e-0d1b-4c39-9a57-0e0c1f3b7a11", "b3e0d7c4-58aa-4f0e-8d6b-2c1e9f4a6d22"
GPUS = 4


class Instance:
    """One plugin process with its rolling-update id, and a kubelet client registered with it."""

    def __init__(self, root: Path, rolling_id: str, registrar: Path | None = None) -> None:
        self.id = rolling_id
        self.metrics_port = free_port()
        registrar = registrar or root / "registry"
        args = [
            *plugin_args(root, gpus=GPUS, metrics_port=self.metrics_port),
            "--rolling-update-id",
            rolling_id,
            "--registrar-dir",
            str(registrar),
        ]
        self.reg = registration_socket(registrar, facts.DRIVER_NAME, rolling_id)
        self.dra = root / "plugins" / facts.DRIVER_NAME / f"dra-{rolling_id}.sock"
        self.proc = launch(args, module=True)
        assert wait_until(lambda: self.reg.exists() or self.proc.poll() is not None, timeout=30), "no socket"
        assert self.proc.poll() is None, self.proc.communicate()
        self.kubelet = Kubelet(self.reg)
        info = self.kubelet.register()
        assert info.endpoint == str(self.dra)

    def metric(self, name: str) -> float | None:
        """The metric's value; None while the plugin has not served its metrics yet (it registers with
        kubelet first) or does not have it."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as resp:
                text = resp.read().decode()
        except urllib.error.URLError:
            return None
        for line in text.splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
        return None

    def stop(self) -> str:
        self.kubelet.close()
        self.proc.send_signal(signal.SIGTERM)
        _, stderr = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, stderr
        return str(stderr)

    def kill(self) -> None:
        self.kubelet.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def instances(short_tmp: Path, fake_api: FakeAPIServer) -> Iterator[list[Instance]]:
    fake_api.add_node(NODE)
    started: list[Instance] = []
    yield started
    for instance in started:
        instance.kill()


def slice_writes(api: FakeAPIServer) -> int:
    """Writes that change slices (a dry-run create, the device-taint detection at start, stores nothing)."""
    writes = sum(api.count(method, "resourceslices") for method in ("POST", "PUT", "DELETE"))
    return writes - api.count("POST", "dryRun=All")


def test_two_instances_share_one_consistent_checkpoint(
    short_tmp: Path, fake_api: FakeAPIServer, instances: list[Instance]
) -> None:
    uids = [f"uid-{i:02d}" for i in range(24)]
    for i, uid in enumerate(uids):
        fake_api.add_claim(claim(f"c{i}", uid, f"gpu-{i % GPUS}", admin_access=True))  # 24 claims, 4 GPUs
    old = Instance(short_tmp, OLD)
    instances.append(old)
    new = Instance(short_tmp, NEW)
    instances.append(new)
    via = [old, new]

    def prepare(i: int) -> tuple[str, dict]:
        # Each claim goes to one instance, the same claim again to the other one (kubelet retries
        # after a restart and may pick either): both must answer what the first prepared.
        first = via[i % 2].kubelet.prepare([("default", f"c{i}", uids[i])])[uids[i]]
        again = via[(i + 1) % 2].kubelet.prepare([("default", f"c{i}", uids[i])])[uids[i]]
        assert first["error"] == "" and again == first, (first, again)
        return uids[i], first

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = dict(pool.map(prepare, range(len(uids))))
    assert [answers[u]["devices"][0]["device_name"] for u in uids] == [f"gpu-{i % GPUS}" for i in range(24)]

    gone = uids[::3]  # unprepared through the instance that did not prepare them, while others prepare

    def unprepare(i: int) -> str:
        return via[(i + 1) % 2].kubelet.unprepare([("default", f"c{i}", uids[i])])[uids[i]]

    extra = [f"uid-x{i}" for i in range(8)]
    for i, uid in enumerate(extra):
        fake_api.add_claim(claim(f"x{i}", uid, f"gpu-{i % GPUS}", admin_access=True))
    with ThreadPoolExecutor(max_workers=8) as pool:
        unprepared = pool.map(unprepare, [uids.index(u) for u in gone])
        added = pool.map(
            lambda i: via[i % 2].kubelet.prepare([("default", f"x{i}", extra[i])])[extra[i]]["error"],
            range(len(extra)),
        )
        assert list(unprepared) == [""] * len(gone) and list(added) == [""] * len(extra)

    expected = sorted(set(uids) - set(gone) | set(extra))
    doc = checkpoint_document(short_tmp / "plugins" / facts.DRIVER_NAME)
    assert sorted(c["uid"] for c in doc["claims"]) == expected
    assert {c["state"] for c in doc["claims"]} == {"PrepareCompleted"}
    assert cdi.list_claim_specs(short_tmp / "cdi") == {}  # each answered from the base spec
    specs = cdi_check.specs_in(short_tmp / "cdi")  # the plugin processes' base spec, validated
    ids = [i for d in doc["claims"] for p in d["devices"] for i in p["cdiDeviceIDs"]]
    cdi_check.inject(specs, ids)  # every answer resolves
    # the old instance leaves; the new one unprepares everything, including what the old one prepared
    old.stop()
    names = {**{u: f"c{i}" for i, u in enumerate(uids)}, **{u: f"x{i}" for i, u in enumerate(extra)}}
    errors = new.kubelet.unprepare([("default", names[u], u) for u in expected])
    assert set(errors.values()) == {""}
    doc = checkpoint_document(short_tmp / "plugins" / facts.DRIVER_NAME)
    assert doc["claims"] == [] and cdi.list_claim_specs(short_tmp / "cdi") == {}


def test_newcomer_changes_no_slice_and_each_removes_only_its_own_sockets(
    short_tmp: Path, fake_api: FakeAPIServer, instances: list[Instance]
) -> None:
    old = Instance(short_tmp, OLD)
    instances.append(old)
    assert wait_until(lambda: old.metric("vke_gpu_dra_pool_generation") == 1, timeout=30)
    [published] = fake_api.slices_of(NODE)
    writes = slice_writes(fake_api)

    new = Instance(short_tmp, NEW)
    instances.append(new)
    # its first reconcile round is over once it reports the generation it found
    assert wait_until(lambda: new.metric("vke_gpu_dra_pool_generation") == 1, timeout=30)
    assert new.metric("vke_gpu_dra_resource_slices") == 1
    assert slice_writes(fake_api) == writes  # no delete, no re-create, no update
    assert fake_api.slices_of(NODE) == [published]  # same object, same generation and resourceVersion

    old.stop()
    assert not old.reg.exists() and not old.dra.exists()
    assert new.reg.exists() and new.dra.exists()
    assert new.kubelet.prepare([("default", "none", "uid-none")])["uid-none"]["error"].endswith("not found")
    assert slice_writes(fake_api) == writes and fake_api.slices_of(NODE) == [published]
    new.stop()
    assert not new.reg.exists() and not new.dra.exists()
    assert fake_api.slices_of(NODE) == [published]  # slices stay for the next pod


def test_each_pod_has_its_own_registration_socket_named_as_the_go_helper_names_it(
    short_tmp: Path, fake_api: FakeAPIServer, instances: list[Instance]
) -> None:
    old = Instance(short_tmp, OLD)
    instances.append(old)
    assert old.reg.name == f"{facts.DRIVER_NAME}-{OLD}-reg.sock"  # kubelet's registry dir: the pod UID
    # a registrar dir too long for the pod UID in the name (Kubernetes 1.37's helper hashes it)
    long_dir = short_tmp / ("r" * (MAX_SOCKET_PATH_BYTES - len(str(short_tmp)) - 40))
    assert len(str(long_dir / old.reg.name)) > MAX_SOCKET_PATH_BYTES
    hashed = [Instance(short_tmp, uid, registrar=long_dir) for uid in (OLD, NEW)]
    instances.extend(hashed)
    for instance in hashed:
        assert instance.reg.name == rolling_update_registration_names(facts.DRIVER_NAME, instance.id)[1]
        assert instance.id not in instance.reg.name and instance.reg.name.startswith(f"{facts.DRIVER_NAME}-")
    assert sorted(p.name for p in long_dir.iterdir()) == sorted(i.reg.name for i in hashed)
    fake_api.add_claim(claim("c0", "uid-0", "gpu-0"))
    first = hashed[0].kubelet.prepare([("default", "c0", "uid-0")])["uid-0"]
    assert first["error"] == "" and hashed[1].kubelet.prepare([("default", "c0", "uid-0")])["uid-0"] == first
    hashed[0].stop()
    assert [p.name for p in long_dir.iterdir()] == [hashed[1].reg.name]  # only its own socket went
    assert hashed[1].kubelet.unprepare([("default", "c0", "uid-0")]) == {"uid-0": ""}


def test_without_an_id_the_fixed_socket_names_stay(short_tmp: Path, fake_api: FakeAPIServer) -> None:
    fake_api.add_node(NODE)
    proc = launch(plugin_args(short_tmp, gpus=1), module=True)
    reg = short_tmp / "registry" / f"{facts.DRIVER_NAME}-reg.sock"
    try:
        assert wait_until(lambda: reg.exists() or proc.poll() is not None, timeout=30)
        kubelet = Kubelet(reg)
        assert kubelet.register().endpoint == str(short_tmp / "plugins" / facts.DRIVER_NAME / "dra.sock")
        kubelet.close()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert sorted(p.name for p in (short_tmp / "registry").iterdir()) == []


def test_bad_rolling_update_id_is_one_clear_line(short_tmp: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vke_gpu_dra", *plugin_args(short_tmp), "--rolling-update-id", "Pod/UID"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "dra-gpu-kubelet-plugin: error: invalid value 'Pod/UID' for --rolling-update-id "
        "[env ROLLING_UPDATE_ID]: must be 1 to 64 lowercase letters, digits and '-' (the pod UID), "
        "starting and ending with a letter or digit"
    )
