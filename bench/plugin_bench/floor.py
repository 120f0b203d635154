"""The floor measured in the same run: a gRPC round trip to a trivial servicer (in a process of its own),
a GET of a claim as the plugin reads it, and that servicer doing the GET and one fdatasync'd record."""

from __future__ import annotations

import http.client
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
from vke_gpu_dra.kubelet._proto.dra.v1 import api_pb2 as dra_pb2
from vke_gpu_dra.kubelet._proto.dra.v1 import api_pb2_grpc as dra_grpc
from vke_gpu_dra_core import facts
from vke_gpu_dra_testing.fake_apiserver import TOKEN
from vke_gpu_dra_testing.plugin_env import NODE

from .probes import claim_uid, percentile, time_calls
from .settings import NAMESPACE, SMALL_WRITE, WAIT_S, Ref
from .timed_fake import TimedFake

#: The claim the floor reads.
FLOOR_CLAIM: Ref = (NAMESPACE, "floor-claim", claim_uid(9, 1))


class FloorPrepareWork:
    """What a prepare must do besides the round trip: one keep-alive GET of the claim, as the plugin reads
    it; with `directory`, then one fdatasync'd 600-byte record written in place into a preallocated file
    there (no metadata changes: the cheapest durable write there is)."""

    FILE_BYTES = 1 << 20

    def __init__(self, url: str, path: str, directory: str | None = None) -> None:
        host, port = urlsplit(url).netloc.split(":")
        self._conn = http.client.HTTPConnection(host, int(port), timeout=10)
        self._path = path
        self._headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
        self._file: Path | None = None
        self._fd = -1
        if directory is not None:
            self._file = Path(directory) / ".bench-durable-floor"
            self._fd = os.open(self._file, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(self._fd, bytes(self.FILE_BYTES))
            os.fsync(self._fd)
        self._offset = 0

    def __call__(self) -> None:
        self._conn.request("GET", self._path, headers=self._headers)
        response = self._conn.getresponse()
        response.read()
        assert response.status == 200, response.status
        if self._file is not None:
            os.pwrite(self._fd, SMALL_WRITE, self._offset)
            os.fdatasync(self._fd)
            self._offset = (self._offset + len(SMALL_WRITE)) % (self.FILE_BYTES - len(SMALL_WRITE))

    def close(self) -> None:
        self._conn.close()
        if self._file is not None:
            os.close(self._fd)
            self._file.unlink(missing_ok=True)


class TrivialDRA(dra_grpc.DRAPluginServicer):
    """Answers like the plugin (one device per claim) without doing anything, or doing only `work`."""

    def __init__(self, work: Callable[[], None] | None = None) -> None:
        self._work = work

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        response = dra_pb2.NodePrepareResourcesResponse()
        for c in request.claims:
            if self._work is not None:
                self._work()
            response.claims[c.uid].devices.add(
                request_names=["gpu"], pool_name=NODE, device_name="gpu-0",
                cdi_device_ids=[f"{facts.CDI_VENDOR}/{facts.CDI_CLASS_CLAIM}={c.uid}-gpu-0"],
            )  # fmt: skip
        return response


def serve_floor(socket_path: str, work_args: list[str] | None) -> int:
    """`--floor-server`: a trivial DRA servicer in its own process, until stdin closes; with
    `--floor-work URL PATH [DIR]`, each claim also does `FloorPrepareWork`."""
    work = FloorPrepareWork(*work_args) if work_args else None
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    dra_grpc.add_DRAPluginServicer_to_server(TrivialDRA(work), server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    print("ready", flush=True)
    sys.stdin.read()
    server.stop(0).wait()
    if work is not None:
        work.close()
    return 0


def grpc_floor(root: Path, samples: int, work: list[str] | None = None, *, script: Path) -> list[float]:
    """Round trips of a one-claim NodePrepareResources to the trivial servicer (doing `FloorPrepareWork` with
    `work`: URL, PATH[, DIR])."""
    sock = root / "floor.sock"
    extra = ["--floor-work", *work] if work else []
    proc = subprocess.Popen(
        [sys.executable, str(script), "--floor-server", str(sock), *extra],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", "floor server failed"
        with grpc.insecure_channel(f"unix:{sock}") as ch:
            stub = dra_grpc.DRAPluginStub(ch)
            request = dra_pb2.NodePrepareResourcesRequest(
                claims=[dra_pb2.Claim(namespace=NAMESPACE, name="c", uid=claim_uid(9, 0))]
            )
            call = lambda: stub.NodePrepareResources(request, timeout=10)  # noqa: E731
            return time_calls(call, samples)
    finally:
        proc.communicate(input="", timeout=WAIT_S)


def read_kind(query: str) -> str:
    return "resourceVersion=0, watch cache" if "resourceVersion=0" in query.split("&") else "quorum read"


def floor_claim_path(query: str) -> str:
    path = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{FLOOR_CLAIM[1]}"
    return f"{path}?{query}" if query else path


def http_floor(fake: TimedFake, query: str, samples: int) -> float:
    """Median of one keep-alive GET of the floor's claim with `query`, as the plugin reads claims."""
    get = FloorPrepareWork(fake.url, floor_claim_path(query))
    try:
        return statistics.median(time_calls(get, samples))
    finally:
        get.close()


def fsync_write(directory: Path, samples: int) -> float:
    """Median time of one fsync'd small write (open, write, fsync, close) in `directory`."""
    path = directory / ".bench-fsync"

    def write() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, SMALL_WRITE)
            os.fsync(fd)
        finally:
            os.close(fd)

    try:
        return statistics.median(time_calls(write, samples))
    finally:
        path.unlink(missing_ok=True)


@dataclass
class Floor:
    grpc_s: float
    http_s: float
    read_kind: str
    fsync_s: float  # one fsync'd small write: reported, not part of the floor
    # The trivial servicer doing `FloorPrepareWork` (reported, not part of the floor): the GET alone, p50;
    # the GET and the durable record, p50 and p99.
    get_p50_s: float
    durable_p50_s: float
    durable_p99_s: float

    @property
    def total_s(self) -> float:
        return self.grpc_s + self.http_s


def measure_floor(
    root: Path, fake: TimedFake, data_dir: Path, query: str, samples: int, *, script: Path
) -> Floor:
    """The floor's parts, the trivial servicer started as `script --floor-server`."""
    fake.put_claims([FLOOR_CLAIM], 1)
    try:
        claim = [fake.url, floor_claim_path(query)]
        durable = grpc_floor(root, samples, [*claim, str(data_dir)], script=script)
        return Floor(
            grpc_s=statistics.median(grpc_floor(root, samples, script=script)),
            http_s=http_floor(fake, query, samples),
            read_kind=read_kind(query),
            fsync_s=fsync_write(data_dir, max(10, samples // 3)),
            get_p50_s=percentile(grpc_floor(root, samples, claim, script=script), 50),
            durable_p50_s=percentile(durable, 50),
            durable_p99_s=percentile(durable, 99),
        )
    finally:
        fake.drop_claims([FLOOR_CLAIM])
