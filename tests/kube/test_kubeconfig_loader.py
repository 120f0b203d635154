"""The lean transport's configuration: kubeconfig path lists merged as kubectl merges them, the in-cluster
service account, and one clear error for each kubeconfig it cannot use."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra_core.kubeconfig import KubeconfigError
from vke_gpu_dra_kube import kubeconfig_loader
from vke_gpu_dra_kube.kubeconfig_loader import NotInCluster, from_kubeconfig, in_cluster, kubeconfig_paths
from vke_gpu_dra_kube.rest import RestClient

from tests.kube.tls_server import Pki, RecordingServer, kubeconfig, needs_openssl

SECRET = "s3cr3t-token-value"
SERVICE_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def write(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    return path


def call(config: kubeconfig_loader.ClientConfig) -> int:
    client = RestClient(config)
    try:
        return client.request("GET", "/api").status
    finally:
        client.close()


@needs_openssl
def test_a_path_list_is_merged_first_file_wins_and_paths_resolve_per_file(
    tmp_path: Path, server: RecordingServer, pki: Pki
) -> None:
    first = write(
        tmp_path / "a" / "config",
        {
            "current-context": "ctx",
            "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": {"tokenFile": "token"}}],  # a/token
        },
    )
    (tmp_path / "a" / "token").write_text("from-a\n")
    second = write(
        tmp_path / "b" / "config",
        {
            "current-context": "other",  # the first file's current-context wins
            "clusters": [{"name": "c", "cluster": {"server": server.url, "certificate-authority": "ca.crt"}}],
            "contexts": [{"name": "ctx", "context": {"cluster": "nope", "user": "nope"}}],  # a's wins
            "users": [{"name": "u", "user": {"token": "from-b"}}],  # a's wins
        },
    )
    shutil.copy(pki.ca_crt, tmp_path / "b" / "ca.crt")  # b/ca.crt, next to the file that names it
    missing = tmp_path / "missing" / "config"  # a file of the list that does not exist is skipped
    paths = os.pathsep.join(map(str, (first, missing, second)))
    assert kubeconfig_paths({"KUBECONFIG": paths + os.pathsep}) == paths
    assert call(from_kubeconfig(paths)) == 200
    assert [s.authorization for s in server.seen] == ["Bearer from-a"]
    assert call(from_kubeconfig(paths, context="ctx")) == 200


def test_the_default_path_is_the_home_kubeconfig() -> None:
    assert kubeconfig_paths({}) == "~/.kube/config"
    assert kubeconfig_paths({"KUBECONFIG": ""}) == "~/.kube/config"


def test_a_path_list_without_any_file_is_one_error(tmp_path: Path) -> None:
    paths = os.pathsep.join(str(tmp_path / n) for n in ("x", "y"))
    with pytest.raises(KubeconfigError, match=f"^kubeconfig {paths}: none of these files exists$"):
        from_kubeconfig(paths)


def test_a_merged_list_is_checked_as_one_kubeconfig(tmp_path: Path) -> None:
    first = write(tmp_path / "a", {"current-context": "ctx", "contexts": []})
    second = write(tmp_path / "b", kubeconfig("https://10.0.0.1:6443"))
    paths = f"{first}{os.pathsep}{second}"
    assert from_kubeconfig(paths).server == "https://10.0.0.1:6443"
    with pytest.raises(KubeconfigError, match=r"context 'gone' not found \(contexts: ctx\)"):
        from_kubeconfig(paths, context="gone")


@needs_openssl
def test_in_cluster_reads_the_service_account_and_follows_its_token(
    tmp_path: Path, server: RecordingServer, pki: Pki
) -> None:
    (tmp_path / "token").write_text("sa-token-1")
    shutil.copy(pki.ca_crt, tmp_path / "ca.crt")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(server.port)}
    config = in_cluster(tmp_path, env)
    assert (config.server, config.source) == (server.url, f"the service account in {tmp_path}")
    client = RestClient(config)
    try:
        assert client.request("GET", "/api").status == 200
        new = tmp_path / "token.new"
        new.write_text("sa-token-2")
        os.replace(new, tmp_path / "token")  # kubelet renews a bound token
        assert client.request("GET", "/api").status == 200
    finally:
        client.close()
    assert [s.authorization for s in server.seen] == ["Bearer sa-token-1", "Bearer sa-token-2"]


def test_in_cluster_brackets_an_ipv6_service_address(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("")
    env = {"KUBERNETES_SERVICE_HOST": "fd00:10:96::1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster(tmp_path, env).server == "https://[fd00:10:96::1]:443"


@pytest.mark.parametrize(
    ("env", "files", "said"),
    [
        ({}, ("token", "ca.crt"), "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"),
        (SERVICE_ENV, ("ca.crt",), "no service account token at"),
        (SERVICE_ENV, ("token",), "ca.crt cannot be read"),
    ],
)  # fmt: skip
def test_not_in_a_cluster_says_what_is_missing(
    tmp_path: Path, env: dict[str, str], files: tuple[str, ...], said: str
) -> None:
    for name in files:
        (tmp_path / name).write_text("x")
    with pytest.raises(NotInCluster, match=said):
        in_cluster(tmp_path, env)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("cluster", "user", "said"),
    [
        ({}, {"auth-provider": {"name": "gcp", "config": {"access-token": SECRET}}},
         "user 'u': auth-provider gcp is not supported: use an exec credential plugin"),
        ({}, {"token": SECRET, "username": "admin", "password": SECRET},
         "user 'u': more than one authentication method (token and username/password): keep one"),
        ({}, {"client-certificate-data": _b64(SECRET)},
         "user 'u': client-certificate and client-key go together: set both or neither"),
        ({}, {"token": 12345}, "user 'u': token must be a string, found a number"),
        ({}, {"client-key-data": SECRET + "!!", "client-certificate-data": _b64("x")},
         "user 'u': client-key-data is not base64"),
        ({}, {"tokenFile": "no-such-token"}, "user 'u': tokenFile "),
        ({}, {"as": "system:admin", "token": SECRET}, "user 'u': impersonation (as) is not supported"),
        ({"certificate-authority": "no-such-ca.crt"}, {}, "cluster 'c': certificate-authority "),
        ({"insecure-skip-tls-verify": "yes"}, {},
         "cluster 'c': insecure-skip-tls-verify must be true or false, found a string"),
        ({"proxy-url": "socks5://127.0.0.1:1080"}, {},
         "cluster 'c': proxy-url must be an http:// or https:// URL (found scheme socks5)"),
        ({"certificate-authority-data": _b64("not a certificate")}, {},
         "the CA certificate is not a PEM certificate"),
    ],
)  # fmt: skip
def test_each_unusable_setting_is_one_error_naming_the_field_never_the_secret(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any], said: str
) -> None:
    path = write(tmp_path / "config", kubeconfig("https://10.0.0.1:6443", cluster, user))
    with pytest.raises(KubeconfigError) as err:
        RestClient(from_kubeconfig(path)).close()
    message = str(err.value)
    assert message.startswith(f"kubeconfig {path}") and said in message, message
    assert SECRET not in message and "\n" not in message


def test_a_server_that_is_not_a_url_is_refused_without_its_credentials(tmp_path: Path) -> None:
    path = write(tmp_path / "config", kubeconfig("ftp://admin:hunter2@10.0.0.1"))
    with pytest.raises(KubeconfigError) as err:
        RestClient(from_kubeconfig(path))
    assert str(err.value) == f"kubeconfig {path}: server 'ftp://10.0.0.1' is not an https:// or http:// URL"


def test_exec_is_not_run_when_the_user_has_a_token(tmp_path: Path) -> None:
    user = {"token": SECRET, "exec": {"apiVersion": "v0", "command": "/nonexistent"}}
    identity = from_kubeconfig(write(tmp_path / "config", kubeconfig("https://h:6443", None, user)))
    assert identity.credentials.identity(1.0).authorization == f"Bearer {SECRET}"
    assert SECRET not in repr(identity) and SECRET not in repr(identity.credentials.identity(1.0))
