"""The lean transport against a real HTTPS server in this process: TLS (CA data and file, skipped
verification, tls-server-name, client certificates), bearer tokens and token files, basic auth, one
attempt per request and its timeout."""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra_core.kubeconfig import KubeconfigError
from vke_gpu_dra_kube import failures
from vke_gpu_dra_kube.credentials import WatchedFile
from vke_gpu_dra_kube.kubeconfig_loader import from_kubeconfig
from vke_gpu_dra_kube.rest import RestClient, TransportError

from tests.kube.tls_server import Pki, RecordingServer, kubeconfig, needs_openssl, track

pytestmark = needs_openssl

SECRET = "s3cr3t-token-value"


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def client(tmp_path: Path, config: dict[str, Any], name: str = "config") -> RestClient:
    """A client from `config` written as a kubeconfig file; closed when the test ends."""
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return track(RestClient(from_kubeconfig(path), pool_size=4))


def get(c: RestClient, path: str = "/api/v1/nodes/n1", **kwargs: Any) -> dict[str, Any]:
    response = c.request("GET", path, **kwargs)
    assert response.status == 200, response.data
    return dict(json.loads(response.data))


def replace(path: Path, text: str | bytes) -> None:
    """Write `path` anew as kubelet updates projected tokens: a new file renamed over the old one."""
    new = path.with_name(path.name + ".new")
    new.write_bytes(text.encode() if isinstance(text, str) else text)
    os.replace(new, path)


def test_a_bearer_token_goes_over_tls_verified_with_the_ca_data(
    tmp_path: Path, server: RecordingServer, pki: Pki
) -> None:
    c = client(
        tmp_path, kubeconfig(server.url, {"certificate-authority-data": b64(pki.ca_crt)}, {"token": SECRET})
    )
    assert get(c, query=[("fieldSelector", "spec.nodeName=n1")])["path"] == "/api/v1/nodes/n1"
    [seen] = server.seen
    assert (seen.method, seen.authorization, seen.query) == (
        "GET",
        f"Bearer {SECRET}",
        [("fieldSelector", "spec.nodeName=n1")],
    )


def test_a_relative_certificate_authority_file_is_read_next_to_the_kubeconfig(
    tmp_path: Path, server: RecordingServer, pki: Pki
) -> None:
    (tmp_path / "certs").mkdir()
    shutil.copy(pki.ca_crt, tmp_path / "certs" / "cluster-ca.crt")
    c = client(tmp_path, kubeconfig(server.url, {"certificate-authority": "certs/cluster-ca.crt"}))
    get(c)
    assert [s.authorization for s in server.seen] == [None]  # no user: anonymous


def test_a_server_the_ca_did_not_sign_is_a_tls_failure(
    tmp_path: Path, server: RecordingServer, pki: Pki
) -> None:
    c = client(tmp_path, kubeconfig(server.url, {"certificate-authority-data": b64(pki.other_ca_crt)}))
    with pytest.raises(TransportError) as err:
        c.request("GET", "/api")
    assert err.value.failure.reason == failures.TLS_ERROR
    assert str(err.value).startswith("TLS failed (") and "certificate verify failed" not in str(err.value)
    assert server.seen == []


def test_tls_server_name_is_the_name_checked(tmp_path: Path, server: RecordingServer, pki: Pki) -> None:
    ca = {"certificate-authority-data": b64(pki.ca_crt)}
    get(client(tmp_path, kubeconfig(server.url, {**ca, "tls-server-name": "kube.test"})))
    wrong = client(tmp_path, kubeconfig(server.url, {**ca, "tls-server-name": "other.test"}), "wrong")
    with pytest.raises(TransportError) as err:
        wrong.request("GET", "/api")
    assert err.value.failure.reason == failures.TLS_ERROR and "other.test" in str(err.value.__cause__)


def test_skipped_verification_works_without_a_ca_and_is_said_once(
    tmp_path: Path, server: RecordingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        c = client(tmp_path, kubeconfig(server.url, {"insecure-skip-tls-verify": True}, {"token": SECRET}))
        for _ in range(3):
            get(c)
    assert [w.category.__name__ for w in seen] == []
    said = [r for r in caplog.records if "TLS verification of the API server is off" in r.getMessage()]
    assert len(said) == 1 and said[0].fields == {"server": server.url}  # type: ignore[attr-defined]
    assert len(server.seen) == 3


def test_client_certificates_from_data_and_from_files_and_a_renewed_file(tmp_path: Path, pki: Pki) -> None:
    with RecordingServer(pki, require_client_cert=True) as server:
        ca = {"certificate-authority-data": b64(pki.ca_crt)}
        data = {"client-certificate-data": b64(pki.client_crt), "client-key-data": b64(pki.client_key)}
        assert get(client(tmp_path, kubeconfig(server.url, ca, data)))["user"] == "test-user"
        shutil.copy(pki.client_crt, tmp_path / "user.crt")
        shutil.copy(pki.client_key, tmp_path / "user.key")
        files = {"client-certificate": "user.crt", "client-key": "user.key"}
        c = client(tmp_path, kubeconfig(server.url, ca, files), "files")
        assert get(c)["user"] == "test-user"
        replace(tmp_path / "user.crt", pki.client2_crt.read_bytes())
        replace(tmp_path / "user.key", pki.client2_key.read_bytes())
        assert get(c)["user"] == "rotated-user"  # the renewed certificate, on a new connection
        assert [s.client_cn for s in server.seen] == ["test-user", "test-user", "rotated-user"]
    # Nothing of the key is left in the temporary directory.
    assert list(Path(tempfile.gettempdir()).glob("client-cert-*.pem")) == []


def test_a_key_that_does_not_match_the_certificate_is_one_clear_error(
    tmp_path: Path, server: RecordingServer, pki: Pki
) -> None:
    user = {"client-certificate-data": b64(pki.client_crt), "client-key-data": b64(pki.client2_key)}
    path = tmp_path / "config"
    path.write_text(json.dumps(kubeconfig(server.url, {"certificate-authority-data": b64(pki.ca_crt)}, user)))
    with pytest.raises(KubeconfigError) as err:
        RestClient(from_kubeconfig(path))
    assert str(err.value).startswith(f"kubeconfig {path}: the client certificate and key cannot be used")
    assert pki.text("client2.key").splitlines()[1] not in str(err.value)


def test_a_token_file_is_read_again_when_it_is_renewed(
    tmp_path: Path, server: RecordingServer, pki: Pki
) -> None:
    (tmp_path / "token").write_text("first\n")
    user = {"tokenFile": "token"}  # relative: next to the kubeconfig
    c = client(tmp_path, kubeconfig(server.url, {"certificate-authority-data": b64(pki.ca_crt)}, user))
    get(c)
    replace(tmp_path / "token", "second")
    get(c)
    get(c)
    assert [s.authorization for s in server.seen] == ["Bearer first", "Bearer second", "Bearer second"]


def test_a_watched_file_is_read_again_each_period_even_if_it_looks_the_same(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("aaaa")
    now = [100.0]
    file = WatchedFile(path, "tokenFile", period=60.0, clock=lambda: now[0])
    stat = path.stat()
    with path.open("r+") as f:  # same inode, size and modification time: a change stat cannot see
        f.write("bbbb")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file.read() == b"aaaa"
    now[0] += 60.0
    assert file.read() == b"bbbb"
    path.unlink()  # gone: the last contents are kept
    now[0] += 60.0
    assert file.read() == b"bbbb"


def test_basic_auth(tmp_path: Path, server: RecordingServer, pki: Pki) -> None:
    user = {"username": "admin", "password": SECRET}
    get(client(tmp_path, kubeconfig(server.url, {"certificate-authority-data": b64(pki.ca_crt)}, user)))
    expected = base64.b64encode(f"admin:{SECRET}".encode()).decode()
    assert [s.authorization for s in server.seen] == [f"Basic {expected}"]


def test_a_401_makes_the_token_file_be_read_again_and_is_not_retried(tmp_path: Path, pki: Pki) -> None:
    with RecordingServer(pki, tokens={"Bearer fresh"}) as server:
        token = tmp_path / "token"
        token.write_text("stale")
        ca = {"certificate-authority-data": b64(pki.ca_crt)}
        c = client(tmp_path, kubeconfig(server.url, ca, {"tokenFile": str(token)}))
        assert c.request("GET", "/api").status == 401
        stat = token.stat()
        token.write_text("fresh")  # same inode, size and modification time: only the 401 says look again
        os.utime(token, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert c.request("GET", "/api").status == 200
        assert [s.authorization for s in server.seen] == ["Bearer stale", "Bearer fresh"]


@pytest.mark.parametrize(("timeout", "said"), [(0.3, "0.3 s"), ((5.0, 0.2), "0.2 s")])
def test_a_server_that_does_not_answer_times_out_after_one_attempt(
    tmp_path: Path, pki: Pki, timeout: Any, said: str
) -> None:
    with RecordingServer(pki, behaviour="hang") as server:
        c = client(tmp_path, kubeconfig(server.url, {"certificate-authority-data": b64(pki.ca_crt)}))
        started = time.monotonic()
        with pytest.raises(TransportError) as err:
            c.request("GET", "/api", timeout=timeout)
        waited = time.monotonic() - started
        assert err.value.failure == failures.NetworkFailure(
            failures.TIMEOUT, f"the API server did not answer within {said}"
        )
        assert waited < 10  # the server would have held it for 30 s
        assert len(server.seen) == 1


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_500_and_a_reset_are_each_one_request(tmp_path: Path, pki: Pki, method: str) -> None:
    ca = {"certificate-authority-data": b64(pki.ca_crt)}
    with RecordingServer(pki, behaviour="500") as server:
        c = client(tmp_path, kubeconfig(server.url, ca))
        assert c.request(method, "/api", body=b"{}").status == 500
        assert len(server.seen) == 1
    with RecordingServer(pki, behaviour="reset") as server:
        c = client(tmp_path, kubeconfig(server.url, ca), "reset")
        with pytest.raises(TransportError) as err:
            c.request(method, "/api", body=b"{}")
        assert err.value.failure.reason == failures.TRANSPORT_ERROR
        assert len(server.seen) == 1


def test_requests_go_through_an_http_proxy(tmp_path: Path) -> None:
    with RecordingServer() as proxy:
        config = kubeconfig("http://kube.invalid:6443", {"proxy-url": proxy.url}, {"token": SECRET})
        assert get(client(tmp_path, config))["path"] == "/api/v1/nodes/n1"
        assert [(s.path, s.authorization) for s in proxy.seen] == [("/api/v1/nodes/n1", f"Bearer {SECRET}")]


def test_a_server_url_keeps_its_path_and_drops_credentials_in_messages(tmp_path: Path) -> None:
    with RecordingServer() as server:
        c = client(
            tmp_path, kubeconfig(server.url.replace("http://", "http://admin:pw@") + "/k8s/clusters/c-1")
        )
        assert get(c, "/version")["path"] == "/k8s/clusters/c-1/version"
        assert c.server == f"{server.url}/k8s/clusters/c-1"
