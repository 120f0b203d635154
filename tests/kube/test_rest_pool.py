"""The lean transport's connections: kept alive and reused (the last one handed back first, at most
`pool_size` idle, never waiting for one), never reused when the answer was not read to its end or the
server closes them, never sending a request twice; streamed answers read as they arrive and stopped from
another thread; the network failures in words; an https:// server through an http:// proxy's tunnel."""

from __future__ import annotations

import base64
import json
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from vke_gpu_dra_core.kubeconfig import KubeconfigError
from vke_gpu_dra_kube import failures
from vke_gpu_dra_kube.client_config import ClientConfig
from vke_gpu_dra_kube.kubeconfig_loader import from_kubeconfig
from vke_gpu_dra_kube.rest import RestClient, TransportError

from tests.kube.tls_server import Pki, RecordingServer, kubeconfig, needs_openssl, track

WAIT_S = 10.0


def wait_until(predicate: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Server:
    """An HTTP/1.1 server that answers by path and records the client port of every request:
    `/port` (keep-alive, the client's port as JSON), `/close-header` (says `Connection: close` but keeps
    the connection open), `/then-close` (answers, then closes the connection without saying so),
    `/lines?n=N` (N JSON lines, chunked), `/hold` (one chunked line, then nothing until `release`),
    `/big` (200 KiB). `open` holds the ports of the connections the server has open."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []
        self.open: set[int] = set()
        self.release = threading.Event()
        self.closed_by_server = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                server.open.add(self.client_address[1])

            def finish(self) -> None:
                super().finish()
                server.open.discard(self.client_address[1])

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                port = self.client_address[1]
                server.seen.append((url.path, port))
                if url.path == "/lines":
                    self._chunked([{"n": i} for i in range(int(parse_qs(url.query)["n"][0]))])
                elif url.path == "/hold":
                    self._chunked([{"n": 0}], hold=True)
                elif url.path == "/big":
                    self._answer(b"x" * 200 * 1024)
                elif url.path == "/close-header":
                    self._answer(json.dumps({"port": port}).encode(), close=True)
                    self.close_connection = False  # said, but the connection stays open
                else:
                    self._answer(json.dumps({"port": port}).encode())
                    if url.path == "/then-close":
                        self.close_connection = True

            def _answer(self, data: bytes, *, close: bool = False) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                if close:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def _chunked(self, lines: list[dict[str, int]], *, hold: bool = False) -> None:
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for line in lines:
                    data = json.dumps(line).encode() + b"\n"
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                if hold:
                    server.release.wait(WAIT_S)
                self.wfile.write(b"0\r\n\r\n")

        class HTTPServer(ThreadingHTTPServer):
            daemon_threads = True

            def shutdown_request(self, request: Any) -> None:
                super().shutdown_request(request)
                server.closed_by_server.set()

        self._httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(WAIT_S)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def ports(self, path: str) -> list[int]:
        return [port for seen_path, port in self.seen if seen_path == path]


@pytest.fixture
def server() -> Iterator[Server]:
    with Server() as s:
        yield s


def client(server: str, *, pool_size: int = 4, **config: Any) -> RestClient:
    return track(RestClient(ClientConfig(server=server, source="test", **config), pool_size=pool_size))


def port_of(c: RestClient, path: str = "/port") -> int:
    response = c.request("GET", path)
    assert response.status == 200
    return int(json.loads(response.data)["port"])


def test_requests_one_after_another_share_one_connection(server: Server) -> None:
    c = client(server.url)
    ports = {port_of(c) for _ in range(5)}
    assert len(ports) == 1 and len(server.seen) == 5


def test_busy_connections_never_make_a_request_wait_and_idle_ones_are_reused_last_in_first_out(
    server: Server,
) -> None:
    c = client(server.url, pool_size=2)
    held = [c.request("GET", "/port", stream=True) for _ in range(3)]  # none read: all three busy
    ports = [int(json.loads(r.data)["port"]) for r in held]  # read to the end: handed back in order
    assert len(set(ports)) == 3
    assert wait_until(lambda: ports[2] not in server.open)  # the pool was full: the third was closed
    assert port_of(c) == ports[1]  # the last handed back first
    again = [c.request("GET", "/port", stream=True) for _ in range(3)]
    assert [int(json.loads(r.data)["port"]) for r in again][:2] == [ports[1], ports[0]]


def test_a_connection_the_server_said_it_closes_is_not_reused(server: Server) -> None:
    c = client(server.url)
    first = port_of(c, "/close-header")
    assert port_of(c) != first  # the server would have answered on it: the client did not reuse it
    assert wait_until(lambda: first not in server.open)  # the client closed it


def test_a_connection_the_server_closed_while_idle_is_replaced_and_nothing_is_sent_twice(
    server: Server,
) -> None:
    c = client(server.url)
    first = port_of(c, "/then-close")
    assert server.closed_by_server.wait(WAIT_S)
    assert port_of(c) != first
    assert [path for path, _ in server.seen] == ["/then-close", "/port"]


def test_an_answer_not_read_to_its_end_drops_its_connection(server: Server) -> None:
    c = client(server.url)
    big = c.request("GET", "/big", stream=True)
    assert len(next(big.stream(amt=1024))) <= 1024
    big.close()
    held = c.request("GET", "/hold", stream=True)  # the rest is not even sent yet
    assert next(held.stream()) == b'{"n": 0}\n'
    held.close()
    server.release.set()
    ports = [port_of(c) for _ in range(2)]
    assert len({*ports, *server.ports("/big"), *server.ports("/hold")}) == 3
    assert wait_until(lambda: server.open == {ports[0]})


def test_a_stream_comes_a_chunk_at_a_time_and_read_to_its_end_gives_the_connection_back(
    server: Server,
) -> None:
    c = client(server.url)
    response = c.request("GET", "/lines", query=[("n", "3")], stream=True)
    assert response.status == 200 and response.headers["Transfer-Encoding"] == "chunked"
    assert [json.loads(chunk) for chunk in response.stream()] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert port_of(c) == server.ports("/lines")[0]


def test_a_stream_stopped_from_another_thread_ends_and_drops_its_connection(server: Server) -> None:
    c = client(server.url)
    response = c.request("GET", "/hold", query=[("n", "1")], stream=True)
    got: list[bytes] = []
    ended: list[BaseException | None] = []

    def read() -> None:
        try:
            got.extend(response.stream())
            ended.append(None)
        except TransportError as err:
            ended.append(err)
        finally:
            response.close()

    reader = threading.Thread(target=read)
    reader.start()
    assert wait_until(lambda: got == [b'{"n": 0}\n'])  # the first chunk came while the server holds
    response.shutdown()
    reader.join(WAIT_S)
    assert not reader.is_alive() and len(ended) == 1
    response.shutdown()  # once closed: nothing
    server.release.set()
    [held] = server.ports("/hold")
    assert port_of(c) != held
    assert wait_until(lambda: held not in server.open)


def test_requests_from_many_threads_leave_at_most_pool_size_connections_open(server: Server) -> None:
    c = client(server.url, pool_size=2)
    failed: list[BaseException] = []
    start = threading.Barrier(8)

    def work() -> None:
        start.wait()
        try:
            for _ in range(20):
                port_of(c)
        except BaseException as err:
            failed.append(err)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S * 3)
    assert failed == [] and len(server.seen) == 160
    assert wait_until(lambda: len(server.open) <= 2)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_a_failed_dns_lookup_and_a_connect_timeout_are_said_in_words() -> None:
    with pytest.raises(TransportError) as refused:
        client(f"http://127.0.0.1:{_closed_port()}").request("GET", "/api")
    assert refused.value.failure.reason == failures.UNREACHABLE
    assert str(refused.value).startswith("connection refused: nothing listens at that address")
    with pytest.raises(TransportError) as dns:
        client("https://cluster.example.invalid:6443").request("GET", "/api")
    assert dns.value.failure == failures.NetworkFailure(
        failures.UNREACHABLE,
        "DNS lookup of cluster.example.invalid failed: check the server address in the kubeconfig and "
        "the DNS",
    )
    with socket.socket() as listener:  # a full accept queue: a further SYN is not answered
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        select.select([], fillers, [], 1.0)
        try:
            with pytest.raises(TransportError) as timeout:
                client(f"http://127.0.0.1:{port}").request("GET", "/api", timeout=(0.2, 5.0))
        finally:
            for filler in fillers:
                filler.close()
    assert timeout.value.failure == failures.NetworkFailure(
        failures.TIMEOUT, "the connection timed out after 0.2 s: check the address and any firewall"
    )


class ConnectProxy:
    """An HTTP proxy that only tunnels (CONNECT), recording each CONNECT's target."""

    def __init__(self) -> None:
        self.targets: list[str] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> ConnectProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(4096)
        method, target, _ = head.split(b"\r\n")[0].decode().split(" ")
        assert method == "CONNECT"
        self.targets.append(target)
        host, port = target.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        pipes = [
            threading.Thread(target=self._pipe, args=(a, b), daemon=True)
            for a, b in ((conn, upstream), (upstream, conn))
        ]
        for pipe in pipes:
            pipe.start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            source.close()
            sink.close()


@needs_openssl
def test_an_https_server_is_reached_through_an_http_proxys_tunnel(tmp_path: Path, pki: Pki) -> None:
    with RecordingServer(pki) as server, ConnectProxy() as proxy:
        cluster = {
            "certificate-authority-data": base64.b64encode(pki.ca_crt.read_bytes()).decode(),
            "tls-server-name": "kube.test",
            "proxy-url": proxy.url,
        }
        path = tmp_path / "config"
        path.write_text(json.dumps(kubeconfig(server.url, cluster, {"token": "t"})))
        c = track(RestClient(from_kubeconfig(path)))
        for _ in range(2):
            response = c.request("GET", "/api/v1/nodes/n1")
            assert response.status == 200 and json.loads(response.data)["path"] == "/api/v1/nodes/n1"
        assert proxy.targets == [f"127.0.0.1:{server.port}"]  # one tunnel, kept alive
        assert [s.authorization for s in server.seen] == ["Bearer t", "Bearer t"]


def test_an_https_proxy_cannot_carry_an_https_server() -> None:
    with pytest.raises(KubeconfigError) as err:
        RestClient(ClientConfig(server="https://10.0.0.1:6443", source="test", proxy_url="https://p:3128"))
    assert str(err.value) == (
        "test: proxy-url 'https://p:3128': an https:// server cannot be reached through an https:// proxy "
        "(use an http:// proxy: the server's TLS goes through its CONNECT tunnel)"
    )


@pytest.mark.parametrize(
    ("server", "proxy", "said"),
    [
        ("https://10.0.0.1:99999", None, "test: server 'https://10.0.0.1:99999'"),
        ("http://10.0.0.1", "http://p:port", "test: proxy-url 'http://p:port'"),
    ],
)
def test_a_port_that_is_not_a_number_is_one_clear_error(server: str, proxy: str | None, said: str) -> None:
    with pytest.raises(KubeconfigError) as err:
        RestClient(ClientConfig(server=server, source="test", proxy_url=proxy))
    assert str(err.value) == f"{said}: the port must be a number from 0 to 65535"


def test_a_pool_of_no_connections_is_refused() -> None:
    with pytest.raises(ValueError, match="pool_size must be 1 or more, not 0"):
        RestClient(ClientConfig(server="http://10.0.0.1", source="test"), pool_size=0)


def test_the_transport_loads_without_urllib3() -> None:
    code = (
        "import sys, vke_gpu_dra_kube.rest, vke_gpu_dra_kube.kubeconfig_loader\n"
        "print('urllib3' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"
