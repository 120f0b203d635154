"""The Kubernetes client set-up the driver and the operator tools share: one attempt per request, the
timeouts, kubeconfig loading and network failures in words."""

from __future__ import annotations

import logging
import socket
import warnings
from pathlib import Path

import pytest
import urllib3
from kubernetes import client
from vke_gpu_dra_core.kubeconfig import KubeconfigError
from vke_gpu_dra_kube import client as kube_client
from vke_gpu_dra_testing.fake_apiserver import write_kubeconfig


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_client_tries_each_request_once_with_the_pool_asked_for(tmp_path: Path) -> None:
    api = kube_client.from_kubeconfig(
        write_kubeconfig(tmp_path / "config", "https://10.0.0.1:6443"), pool_size=7
    )
    assert api.configuration.retries is kube_client.NO_RETRIES
    assert kube_client.NO_RETRIES.total == 0
    assert api.configuration.connection_pool_maxsize == 7
    assert api.configuration.host == "https://10.0.0.1:6443"


def test_skipped_tls_verification_is_logged_once_and_not_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with warnings.catch_warnings(record=True) as seen:
        kube_client.from_kubeconfig(
            write_kubeconfig(tmp_path / "config", "https://admin:pw@10.0.0.1:6443", insecure=True)
        )
        said = [r for r in caplog.records if "TLS verification of the API server is off" in r.getMessage()]
        assert len(said) == 1
        assert said[0].fields == {"server": "https://10.0.0.1:6443"}  # type: ignore[attr-defined]
        warnings.warn("per request", urllib3.exceptions.InsecureRequestWarning, stacklevel=1)
    assert seen == []  # urllib3's warning for each request is not shown


def test_a_file_the_loader_refuses_is_one_kubeconfig_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("clusters: []\ncontexts: []\nusers: []\n")
    with pytest.raises(KubeconfigError) as err:
        kube_client.load_kubeconfig(path)
    assert str(err.value).startswith(f"kubeconfig {path} is not usable: ")
    assert "\n" not in str(err.value)
    good = write_kubeconfig(tmp_path / "good", "https://h:6443")
    assert kube_client.kubeconfig_contexts(str(good)) == ["fake"]


def _failure(
    server: str, timeout: kube_client.Timeout = kube_client.REQUEST_TIMEOUT
) -> kube_client.NetworkFailure:
    cfg = client.Configuration()
    cfg.host = server
    api = kube_client.api_client(cfg)
    with pytest.raises(Exception) as err:
        api.call_api("GET", f"{server}/api", _request_timeout=timeout)
    return kube_client.network_failure(err.value, timeout)


def test_network_failures_are_said_in_words() -> None:
    refused = _failure(f"http://127.0.0.1:{_closed_port()}")
    assert refused.reason == kube_client.UNREACHABLE
    assert str(refused).startswith("connection refused: nothing listens at that address")
    assert "Connection refused" in str(refused)
    dns = _failure("https://cluster.example.invalid:6443")
    assert (dns.reason, str(dns)) == (
        kube_client.UNREACHABLE,
        "DNS lookup of cluster.example.invalid failed: check the server address in the kubeconfig "
        "and the DNS",
    )
    for failure in (refused, dns):
        assert "Error(" not in str(failure) and "MaxRetryError" not in str(failure)


def test_a_server_that_does_not_answer_is_a_timeout_naming_the_seconds() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepts the connection, never answers
        port = listener.getsockname()[1]
        failure = _failure(f"http://127.0.0.1:{port}", timeout=(5.0, 0.2))
    assert (failure.reason, str(failure)) == (
        kube_client.TIMEOUT,
        "the API server did not answer within 0.2 s",
    )


def test_server_urls_carry_no_credentials() -> None:
    cfg = client.Configuration()
    cfg.host = "https://admin:hunter2@10.0.0.1:6443"
    assert kube_client.server_of(cfg) == "https://10.0.0.1:6443"
