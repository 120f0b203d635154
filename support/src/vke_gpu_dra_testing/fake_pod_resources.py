"""kubelet's PodResources API (`v1.PodResourcesLister`) on a real unix socket, for tests.

It speaks the real proto (the driver's generated stubs of kubelet's api.proto) and answers `List` with
the pods a test gives it, as kubelet does: one entry per active pod, its containers, and for each
container the claims it uses (`dynamic_resources`) when `dra_fields` is on (kubelet's
KubeletPodResourcesDynamicResources gate). `fail` makes the next calls fail with a gRPC status;
`hold` keeps `List` from answering until `release` (a kubelet that does not answer in time).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from vke_gpu_dra.kubelet._proto.podresources.v1 import api_pb2 as pb
from vke_gpu_dra.kubelet._proto.podresources.v1 import api_pb2_grpc as pb_grpc
from vke_gpu_dra_core import facts


@dataclass(frozen=True)
class UsedClaim:
    """A claim a container uses: its name and the devices (pool, device) kubelet keeps for it."""

    name: str
    devices: Sequence[tuple[str, str]] = ()
    driver: str = facts.DRIVER_NAME
    cdi_ids: Sequence[str] = ()


@dataclass
class FakePod:
    namespace: str
    name: str
    #: container name -> the claims it uses
    containers: Mapping[str, Sequence[UsedClaim]] = field(default_factory=dict)


class _Lister(pb_grpc.PodResourcesListerServicer):
    def __init__(self, fake: FakePodResources) -> None:
        self._fake = fake

    def List(self, request: pb.ListPodResourcesRequest, context: Any) -> pb.ListPodResourcesResponse:
        return self._fake.answer(context)


class FakePodResources:
    """The fake kubelet endpoint; `start()` binds `socket`, `stop()` removes it."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.pods: list[FakePod] = []
        self.dra_fields = True
        self.calls = 0
        self._failures: list[grpc.StatusCode] = []
        self._released = threading.Event()
        self._released.set()
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), self._server)

    def start(self) -> FakePodResources:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        if self._server.add_insecure_port(f"unix:{self.socket}") == 0:
            raise RuntimeError(f"cannot bind {self.socket}")
        self._server.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._server.stop(grace=None).wait()
        self.socket.unlink(missing_ok=True)

    def add_pod(self, namespace: str, name: str, **containers: Sequence[UsedClaim]) -> None:
        with self._lock:
            self.pods.append(FakePod(namespace, name, dict(containers) or {"main": ()}))

    def remove_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self.pods = [p for p in self.pods if (p.namespace, p.name) != (namespace, name)]

    def fail(self, code: grpc.StatusCode, times: int = 1) -> None:
        with self._lock:
            self._failures.extend([code] * times)

    def hold(self) -> None:
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def answer(self, context: Any) -> pb.ListPodResourcesResponse:
        with self._lock:
            self.calls += 1
            failure = self._failures.pop(0) if self._failures else None
            pods = list(self.pods)
            dra_fields = self.dra_fields
        self._released.wait()
        if failure is not None:
            context.abort(failure, "injected by the test")
        response = pb.ListPodResourcesResponse()
        for pod in pods:
            entry = response.pod_resources.add(name=pod.name, namespace=pod.namespace)
            for container, claims in pod.containers.items():
                resources = entry.containers.add(name=container)
                if not dra_fields:
                    continue
                for used in claims:
                    dynamic = resources.dynamic_resources.add(
                        claim_name=used.name, claim_namespace=pod.namespace
                    )
                    for pool, device in used.devices:
                        dynamic.claim_resources.add(
                            driver_name=used.driver,
                            pool_name=pool,
                            device_name=device,
                            cdi_devices=[pb.CDIDevice(name=i) for i in used.cdi_ids],
                        )
        return response
