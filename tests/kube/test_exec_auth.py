"""Exec credential plugins (client.authentication.k8s.io v1 and v1beta1): a small Python script as the
plugin, against the in-process HTTPS server."""

from __future__ import annotations

import base64
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra_core.kubeconfig import KubeconfigError
from vke_gpu_dra_kube.exec_auth import ExecConfig, ExecCredentials
from vke_gpu_dra_kube.kubeconfig_loader import from_kubeconfig
from vke_gpu_dra_kube.rest import RestClient

from tests.kube.tls_server import Pki, RecordingServer, kubeconfig, needs_openssl, track

pytestmark = needs_openssl

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"
SECRET_ARG = "s3cr3t-argument"

PLUGIN = """\
import json, os, sys
from pathlib import Path

state = Path(sys.argv[1])
runs = state / "runs"
previous = runs.read_text().splitlines() if runs.exists() else []
runs.write_text("\\n".join([*previous, os.environ.get("KUBERNETES_EXEC_INFO", "")]) + "\\n")
mode = os.environ.get("PLUGIN_MODE", "token")
if mode == "fail":
    sys.stderr.write("error: login required\\nsee the docs\\n")
    sys.exit(3)
if mode == "garbage":
    print("not json")
    sys.exit(0)
status = {}
if mode == "token":
    status["token"] = f"exec-{len(previous) + 1}"
if mode == "cert":
    status["clientCertificateData"] = Path(os.environ["CERT"]).read_text()
    status["clientKeyData"] = Path(os.environ["KEY"]).read_text()
if os.environ.get("EXPIRES"):
    status["expirationTimestamp"] = os.environ["EXPIRES"]
version = os.environ.get("ANSWER_VERSION") or json.loads(os.environ["KUBERNETES_EXEC_INFO"])["apiVersion"]
print(json.dumps({"apiVersion": version, "kind": "ExecCredential", "status": status}))
"""


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    """The plugin as an executable in `bin/` next to the kubeconfigs; it counts its runs in tmp_path."""
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "plugin"
    script.write_text(f"#!{sys.executable}\n{PLUGIN}")
    script.chmod(0o755)
    return script


def runs(tmp_path: Path) -> list[dict[str, Any]]:
    """The KUBERNETES_EXEC_INFO of each run of the plugin."""
    path = tmp_path / "runs"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def exec_user(tmp_path: Path, api_version: str = V1, **env: str) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": api_version,
            "command": "./bin/plugin",  # relative: next to the kubeconfig
            "args": [str(tmp_path), SECRET_ARG],
            "env": [{"name": k, "value": v} for k, v in env.items()],
            "interactiveMode": "Never",
            "installHint": "install the test plugin\nwith more words",
        }
    }


def client(tmp_path: Path, config: dict[str, Any]) -> RestClient:
    path = tmp_path / "config"
    path.write_text(json.dumps(config))
    return track(RestClient(from_kubeconfig(path)))


def ca(pki: Pki) -> dict[str, str]:
    return {"certificate-authority-data": base64.b64encode(pki.ca_crt.read_bytes()).decode()}


def test_a_v1_plugin_token_is_kept_until_it_expires_or_is_refused(
    tmp_path: Path, pki: Pki, plugin: Path
) -> None:
    with RecordingServer(pki, tokens={"Bearer exec-1"}) as server:
        c = client(tmp_path, kubeconfig(server.url, ca(pki), exec_user(tmp_path)))
        for _ in range(3):
            assert c.request("GET", "/api").status == 200
        assert len(runs(tmp_path)) == 1  # no expirationTimestamp: kept
        assert runs(tmp_path)[0] == {
            "apiVersion": V1,
            "kind": "ExecCredential",
            "spec": {"interactive": False},
        }
        server.tokens = {"Bearer exec-2"}  # exec-1 is revoked
        assert c.request("GET", "/api").status == 401  # answered as it is: not repeated
        assert len(runs(tmp_path)) == 1
        assert c.request("GET", "/api").status == 200  # the next request ran the plugin again
        assert len(runs(tmp_path)) == 2
        assert [s.authorization for s in server.seen] == ["Bearer exec-1"] * 4 + ["Bearer exec-2"]


def test_an_expired_credential_runs_the_plugin_again(tmp_path: Path, plugin: Path) -> None:
    now = [datetime(2029, 12, 31, 23, 0, tzinfo=UTC)]
    config = ExecConfig(
        where="kubeconfig k: user 'u'",
        command=str(plugin),
        api_version=V1,
        args=(str(tmp_path),),
        env=(("EXPIRES", "2030-01-01T00:00:00Z"),),
    )
    credentials = ExecCredentials(config, now=lambda: now[0])
    assert credentials.identity(5.0).authorization == "Bearer exec-1"
    now[0] += timedelta(minutes=59)
    assert credentials.identity(5.0).authorization == "Bearer exec-1"
    now[0] += timedelta(minutes=1)  # 2030-01-01T00:00:00Z: expired
    assert credentials.identity(5.0).authorization == "Bearer exec-2"
    assert len(runs(tmp_path)) == 2


def test_a_v1beta1_plugin_can_answer_a_client_certificate_and_get_the_cluster(
    tmp_path: Path, pki: Pki, plugin: Path
) -> None:
    user = exec_user(tmp_path, V1BETA1, PLUGIN_MODE="cert", CERT=str(pki.client_crt), KEY=str(pki.client_key))
    del user["exec"]["interactiveMode"]  # optional for v1beta1
    user["exec"]["provideClusterInfo"] = True
    with RecordingServer(pki, require_client_cert=True) as server:
        config = kubeconfig(server.url, {**ca(pki), "tls-server-name": "kube.test"}, user)
        config["clusters"][0]["cluster"]["extensions"] = [
            {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "vke"}}
        ]
        c = client(tmp_path, config)
        assert c.request("GET", "/api").status == 200
        assert [(s.client_cn, s.authorization) for s in server.seen] == [("test-user", None)]
    [info] = runs(tmp_path)
    assert info["apiVersion"] == V1BETA1 and info["spec"]["interactive"] is False
    assert info["spec"]["cluster"] == {
        "server": server.url,
        "tls-server-name": "kube.test",
        "certificate-authority-data": ca(pki)["certificate-authority-data"],
        "config": {"audience": "vke"},
    }


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"PLUGIN_MODE": "fail"}, "failed with exit code 3: error: login required"),
        ({"PLUGIN_MODE": "garbage"}, "printed no ExecCredential JSON"),
        ({"PLUGIN_MODE": "none"}, "returned neither a token nor a client certificate and key"),
        ({"ANSWER_VERSION": V1BETA1}, f"answered apiVersion '{V1BETA1}'; the kubeconfig asks for {V1}"),
        ({"EXPIRES": "tomorrow"}, "returned an expirationTimestamp that is not an RFC 3339 time"),
    ],
)
def test_a_failing_plugin_is_one_error_naming_the_command(
    tmp_path: Path, pki: Pki, plugin: Path, env: dict[str, str], said: str
) -> None:
    with RecordingServer(pki) as server:
        c = client(tmp_path, kubeconfig(server.url, ca(pki), exec_user(tmp_path, **env)))
        with pytest.raises(KubeconfigError) as err:
            c.request("GET", "/api")
        assert server.seen == []  # nothing was sent without credentials
    assert str(err.value) == f"kubeconfig {tmp_path / 'config'}: user 'u': exec plugin {plugin} {said}"
    assert SECRET_ARG not in str(err.value)


def test_a_missing_plugin_says_its_install_hint(tmp_path: Path, pki: Pki) -> None:
    with RecordingServer(pki) as server:
        c = client(tmp_path, kubeconfig(server.url, ca(pki), exec_user(tmp_path)))
        with pytest.raises(KubeconfigError) as err:
            c.request("GET", "/api")
    assert str(err.value).endswith(
        f"exec plugin {tmp_path / 'bin' / 'plugin'} not found (install the test plugin)"
    )


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"interactiveMode": None}, f"exec: interactiveMode must be set for {V1} (Never, IfAvailable)"),
        ({"interactiveMode": "Always"}, "exec: interactiveMode Always needs a terminal"),
        ({"apiVersion": "client.authentication.k8s.io/v1alpha1"}, "is not supported (allowed: "),
        ({"command": None}, "exec: command is not set"),
        ({"env": [{"value": "x"}]}, "exec: env[0] must be a mapping with a name and a string value"),
    ],
)
def test_an_unusable_exec_section_is_refused_when_loaded(
    tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    user = exec_user(tmp_path)
    user["exec"].update(change)
    user["exec"] = {k: v for k, v in user["exec"].items() if v is not None}
    path = tmp_path / "config"
    path.write_text(json.dumps(kubeconfig("https://10.0.0.1:6443", None, user)))
    with pytest.raises(KubeconfigError) as err:
        from_kubeconfig(path)
    assert str(err.value).startswith(f"kubeconfig {path}: user 'u': ") and said in str(err.value)
