"""tools/local_node: where there is no Docker, the `local` stack's cluster (the pure parts; the node itself
comes up in the node tier, tests/node/test_up_local.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from vke_gpu_dra_core.config import reader
from vke_gpu_dra_core.config.raw import raw_from_stack_file

from tools import local_node
from tools.local_node import LocalNode

from .standin import Project

ROOT = Path(__file__).resolve().parents[2]
STATE = {
    "pid": 0,
    "node": "vke-node-1-1",
    "kubeconfig": "/cache/local-node/kubeconfig",
    "context": "vke-gpu-dra-node",
    "sample_image": "vke-gpu-dra.local/node/busybox:1",
}
IMAGE = "localhost/vke-gpu-dra/dra-gpu-kubelet-plugin@sha256:" + "a" * 64


def test_the_copy_aims_the_stack_at_the_node_and_keeps_the_rest(tmp_path: Path) -> None:
    stack_file = yaml.safe_load((ROOT / "Pulumi.local.yaml").read_text())
    stack_file["encryptionsalt"] = "v1:salt"
    path = LocalNode(tmp_path).config_file("local", stack_file, STATE, IMAGE)
    copy = yaml.safe_load(path.read_text())  # JSON, which the CLI reads as YAML
    config = copy["config"]
    assert config["vke-gpu-dra:kubeconfigPath"] == STATE["kubeconfig"]
    assert config["vke-gpu-dra:kubeconfigContext"] == STATE["context"]
    assert config["vke-gpu-dra:driver.image"] == IMAGE
    assert config["vke-gpu-dra:sample.image"] == STATE["sample_image"]
    assert "vke-gpu-dra:driver.image.build" not in config
    assert copy["encryptionsalt"] == "v1:salt"
    aimed = {"kubeconfigPath", "kubeconfigContext", "driver.image", "driver.image.build", "sample.image"}
    rest = {k: v for k, v in stack_file["config"].items() if k.removeprefix("vke-gpu-dra:") not in aimed}
    assert rest and {k: config[k] for k in rest} == rest
    assert path.stat().st_mode & 0o777 == 0o600  # the salt and any secret stay the account's


def test_the_stack_config_accepts_the_copy(tmp_path: Path) -> None:
    """What the program reads from the copy passes its own validation (target existing-cluster, an image
    given by digest and nothing built)."""
    stack_file = yaml.safe_load((ROOT / "Pulumi.local.yaml").read_text())
    path = LocalNode(tmp_path).config_file("local", stack_file, STATE, IMAGE)
    config = reader.load(raw_from_stack_file(yaml.safe_load(path.read_text())["config"]))
    given = config.driver_image
    assert given is not None and given.image is not None and given.build == ""
    repository, digest = IMAGE.split("@")
    assert (given.image.repository, given.image.digest) == (repository, digest)


def test_a_machine_that_cannot_run_it_is_told_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "run scripts/up local as root, or install Docker and kind" in (local_node.why_not({}) or "")
    monkeypatch.setattr(sys, "platform", "darwin")
    assert "needs Linux" in (local_node.why_not({}) or "")


def test_a_state_whose_process_is_gone_is_no_node(tmp_path: Path) -> None:
    served = LocalNode(tmp_path)
    assert served.state() is None
    gone = subprocess.Popen(["true"])
    gone.wait()
    served.state_file.write_text(json.dumps({**STATE, "pid": gone.pid}))
    assert served.state() is None
    assert served.stop() is False
    served.state_file.write_text(json.dumps({**STATE, "pid": os.getpid()}))
    assert served.state() == {**STATE, "pid": os.getpid()}
    served.state_file.write_text("not json")
    assert served.state() is None


def test_down_of_a_stack_whose_node_is_gone_says_what_to_do(tmp_path: Path) -> None:
    project = Project.make(tmp_path)
    assert project.run("up", "local", "--yes", PULUMI_CONFIG_PASSPHRASE="x").returncode == 0  # on kind
    cache = tmp_path / "cache" / "toolchain"
    copy = cache.parent / "local-node" / "Pulumi.local.yaml"
    copy.parent.mkdir(parents=True)
    copy.write_text("{}")
    env = {"VKE_GPU_DRA_TOOLCHAIN_CACHE": str(cache), "PULUMI_CONFIG_PASSPHRASE": "x"}
    done = project.run("down", "local", "--yes", **env)
    assert done.returncode != 0
    assert "deployed on the local node, which is not running" in done.stderr
    assert "pulumi stack rm local --force" in done.stderr
