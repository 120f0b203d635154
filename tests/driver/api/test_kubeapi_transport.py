"""The plugin's API access over the lean transport: KubeError for each way a request can fail, one
attempt per request, where the configuration comes from, and no official client on the start path."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from vke_gpu_dra.kubeapi import KubeAPI, KubeError, load_api_client
from vke_gpu_dra_core.kubeconfig import KubeconfigError
from vke_gpu_dra_kube import failures

from tests.kube.tls_server import Pki, RecordingServer, kubeconfig, make_pki, needs_openssl


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def api_for(tmp_path: Path, server: RecordingServer, pki: Pki, user: dict | None = None) -> KubeAPI:
    ca = {"certificate-authority-data": base64.b64encode(pki.ca_crt.read_bytes()).decode()}
    path = tmp_path / "config"
    path.write_text(json.dumps(kubeconfig(server.url, ca, user)))
    return KubeAPI.from_kubeconfig(path)


@pytest.fixture
def closing() -> Iterator[list[KubeAPI]]:
    apis: list[KubeAPI] = []
    yield apis
    for api in apis:
        api.close()


@needs_openssl
def test_a_server_that_does_not_answer_is_a_timeout_error(tmp_path: Path, pki: Pki, closing: list) -> None:
    with RecordingServer(pki, behaviour="hang") as server:
        closing.append(api := api_for(tmp_path, server, pki))
        with pytest.raises(KubeError) as err:
            api.get_resource_claim("ns", "c", timeout=0.2)
        assert len(server.seen) == 1
    assert (err.value.status, err.value.reason) == (0, failures.TIMEOUT) and err.value.timed_out
    assert str(err.value) == (
        "GET /apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c: "
        "the API server did not answer within 0.2 s"
    )


@needs_openssl
@pytest.mark.parametrize("behaviour", ["500", "reset"])
def test_a_failed_write_is_one_request_and_one_error(
    tmp_path: Path, pki: Pki, closing: list, behaviour: str
) -> None:
    with RecordingServer(pki, behaviour=behaviour) as server:
        closing.append(api := api_for(tmp_path, server, pki))
        with pytest.raises(KubeError) as err:
            api.create_slice({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice"})
        assert len(server.seen) == 1
        assert json.loads(server.seen[0].body)["kind"] == "ResourceSlice"
        assert server.seen[0].content_type == "application/json"
    if behaviour == "500":
        assert (err.value.status, err.value.reason, err.value.message) == (500, "InternalError", "boom")
    else:
        assert (err.value.status, err.value.reason) == (0, failures.TRANSPORT_ERROR)
        assert err.value.unreachable


@needs_openssl
def test_a_failing_exec_plugin_is_a_credentials_error_and_nothing_is_sent(
    tmp_path: Path, pki: Pki, closing: list
) -> None:
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "false",
            "interactiveMode": "Never",
        }
    }
    with RecordingServer(pki) as server:
        closing.append(api := api_for(tmp_path, server, pki, user))
        with pytest.raises(KubeError) as err:
            api.get_node("n1")
        assert server.seen == []
    assert (err.value.status, err.value.reason) == (0, failures.CREDENTIALS_ERROR)
    assert str(err.value).startswith("GET /api/v1/nodes/n1: kubeconfig ")
    assert str(err.value).endswith("user 'u': exec plugin false failed with exit code 1")


@needs_openssl
def test_without_kubeconfig_the_service_account_comes_first(tmp_path: Path, pki: Pki) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("sa-token")
    shutil.copy(pki.ca_crt, account / "ca.crt")
    with RecordingServer(pki) as server:
        env = {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(server.port),
            "KUBECONFIG": str(tmp_path / "never-read"),
        }
        api = KubeAPI(load_api_client(None, service_account=account, environ=env))
        try:
            assert api.get_node("n1") == {"path": "/api/v1/nodes/n1", "user": None}
        finally:
            api.close()
        assert [s.authorization for s in server.seen] == ["Bearer sa-token"]


def test_without_kubeconfig_or_service_account_the_error_says_both(tmp_path: Path) -> None:
    env = {"KUBECONFIG": str(tmp_path / "nope")}
    with pytest.raises(KubeconfigError) as err:
        load_api_client(None, service_account=tmp_path, environ=env)
    assert str(err.value) == (
        "no Kubernetes configuration: not in a cluster (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
        f"are not set) and kubeconfig {tmp_path / 'nope'} does not exist; pass --kubeconfig"
    )


def test_the_plugin_starts_without_the_official_client() -> None:
    code = (
        "import sys, vke_gpu_dra.__main__, vke_gpu_dra.plugin\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert out.stdout.strip() == "[]"
