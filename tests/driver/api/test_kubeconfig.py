"""Kubeconfig checks: every way a file can be wrong is one line that names the file, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from vke_gpu_dra.kubeapi import load_api_client
from vke_gpu_dra.kubelet.registration import registration_socket_name
from vke_gpu_dra_core import facts, kubeconfig
from vke_gpu_dra_testing.plugin_env import plugin_args

SECRET = "s3cr3t-token-value"


def good(server: str = "https://10.0.0.1:6443") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": SECRET}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def bad_files(root: Path) -> dict[str, tuple[Path, str]]:
    """name -> (path, the part of the message that says what is wrong)."""
    cfg = good()
    no_server = json.loads(json.dumps(cfg))
    no_server["clusters"][0]["cluster"] = {}
    wrong_context = {**cfg, "current-context": "other"}
    (root / "a-directory").mkdir(exist_ok=True)
    return {
        "missing": (root / "missing.yaml", "does not exist"),
        "directory": (root / "a-directory", "is a directory, not a file"),
        "yaml-error": (
            write(root / "broken.yaml", f"apiVersion: v1\nusers:\n- name: u\n  user: {{token: {SECRET}\n"),
            "is not valid YAML at line",
        ),
        "binary": (
            write(root / "binary", b"\x7fELF\x02\x01\x01\x00\x00" + bytes(range(256))),
            "is a binary file",
        ),
        "not-utf8": (write(root / "latin1.yaml", "user: caf\xe9\n".encode("latin-1")), "is not UTF-8 text"),
        "list": (
            write(root / "list.yaml", "- a\n- b\n"),
            "must be a YAML mapping (with clusters, contexts and users), found a list",
        ),
        "scalar": (write(root / "scalar.yaml", "just text\n"), "found a string"),
        "empty": (write(root / "empty.yaml", ""), "is empty"),
        "no-current-context": (
            write(root / "nocc.yaml", json.dumps({k: v for k, v in cfg.items() if k != "current-context"})),
            "has no current-context (contexts: ctx)",
        ),
        "unknown-context": (
            write(root / "ctx.yaml", json.dumps(wrong_context)),
            "context 'other' not found (contexts: ctx)",
        ),
        "no-server": (write(root / "nosrv.yaml", json.dumps(no_server)), "cluster 'c' has no server"),
        "clusters-not-a-list": (
            write(root / "cl.yaml", json.dumps({**cfg, "clusters": {"c": 1}})),
            "clusters must be a list, found a mapping",
        ),
    }


def test_a_good_kubeconfig_names_its_context_cluster_and_server(tmp_path: Path) -> None:
    loaded = kubeconfig.load(write(tmp_path / "config", json.dumps(good())))
    assert (loaded.context, loaded.cluster, loaded.user, loaded.server) == (
        "ctx",
        "c",
        "u",
        "https://10.0.0.1:6443",
    )
    with pytest.raises(kubeconfig.KubeconfigError, match=r"context 'nope' not found \(contexts: ctx\)"):
        kubeconfig.load(tmp_path / "config", context="nope")


@pytest.mark.parametrize(
    "case",
    ["missing", "directory", "yaml-error", "binary", "not-utf8", "list", "scalar", "empty",
     "no-current-context", "unknown-context", "no-server", "clusters-not-a-list"],
)  # fmt: skip
def test_each_bad_kubeconfig_is_one_line_naming_the_file(tmp_path: Path, case: str) -> None:
    path, what = bad_files(tmp_path)[case]
    with pytest.raises(kubeconfig.KubeconfigError) as err:
        kubeconfig.load(path)
    message = str(err.value)
    assert message.startswith(f"kubeconfig {path}") and what in message
    assert "\n" not in message and SECRET not in message
    # The driver's API client refuses it with the same message.
    with pytest.raises(kubeconfig.KubeconfigError) as client_err:
        load_api_client(path)
    assert str(client_err.value) == message


@pytest.mark.parametrize("case", ["missing", "directory", "yaml-error", "binary", "list"])
def test_the_plugin_exits_as_for_other_config_errors(short_tmp: Path, case: str) -> None:
    path, what = bad_files(short_tmp)[case]
    args = plugin_args(short_tmp, gpus=1)
    args[args.index("--kubeconfig") + 1] = str(path)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    proc = subprocess.run(
        [sys.executable, "-m", "vke_gpu_dra", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("dra-gpu-kubelet-plugin: error: --kubeconfig [env KUBECONFIG]: kubeconfig ")
    assert str(path) in line and what in line and SECRET not in line
    assert not (short_tmp / "registry" / registration_socket_name(facts.DRIVER_NAME)).exists()
