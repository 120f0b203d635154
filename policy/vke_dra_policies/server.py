"""The analyzer server the Pulumi CLI talks to (policy/__main__.py starts it).

pulumi_policy's own server (`PolicyPack(...)`) hands policies properties without their secret markers
and no stack config; this one answers each request with a `Run` of its own: the stack of the last
ConfigureStack (the process environment's until then) and the request's resources decoded from the
wire with their secretness (wire.py), and runs the pack's table bound to that run. Everything it
needs of pulumi_policy's private API is in pulumi_policy_private.py.
"""

from __future__ import annotations

import sys
import time
from concurrent import futures
from dataclasses import replace
from typing import Any, Final

import grpc
from pulumi.runtime.proto import analyzer_pb2_grpc
from vke_gpu_dra_core import resources as r

from . import context, pack, wire
from .context import Run, StackInfo
from .pulumi_policy_private import AnalyzerServicer

_GRPC_OPTIONS: Final = [("grpc.max_receive_message_length", 400 * 1024 * 1024)]


class Servicer(AnalyzerServicer):
    """pulumi_policy's servicer, answering each analysis with the pack's policies bound to one run."""

    def __init__(self) -> None:
        super().__init__(
            pack.PACK_NAME,
            pack.PACK_VERSION,
            pack.POLICIES,
            pack.DEFAULT_LEVEL,
            description=pack.PACK_DESCRIPTION,
        )
        env = context.STACK
        self._stack = StackInfo(env.project, env.stack, dict(env.config))
        #: Each resource as Analyze saw it (its checked inputs), for AnalyzeStack in a preview.
        self._inputs: dict[str, r.Res] = {}

    def Analyze(self, request: Any, context_: Any) -> Any:
        run = Run(self._stack, {request.urn: wire.from_request(request)})
        self._inputs[request.urn] = run.resources[request.urn]
        return self.analyze_with(pack.policies(run), request, context_)

    def AnalyzeStack(self, request: Any, context_: Any) -> Any:
        outputs = {res.urn: wire.from_request(res) for res in request.resources}
        run = Run(self._stack, with_preview_inputs(outputs, self._inputs))
        return self.analyze_stack_with(pack.policies(run), request, context_)

    def ConfigureStack(self, request: Any, context_: Any) -> Any:
        previous = self._stack
        self._stack = StackInfo(
            project=request.project or previous.project,
            stack=request.stack or previous.stack,
            config=wire.config_from_request(request.config) or previous.config,
        )
        return super().ConfigureStack(request, context_)


def with_preview_inputs(outputs: dict[str, r.Res], inputs: dict[str, r.Res]) -> dict[str, r.Res]:
    """The stack's resources for the stack policies: each one's outputs, or, where it has none, the inputs
    Analyze saw for it.

    AnalyzeStack carries outputs only. In a preview, a resource whose provider's configuration is not yet
    known has none: every Kubernetes object of a stack that creates its cluster in the same update (the
    engine hands back an empty property map for it). Its inputs are what will be applied, and what the
    stack policies check (names, selectors, claims); the stack request's own view (protect, parent,
    dependencies) is kept.
    """
    merged = dict(outputs)
    for urn, res in outputs.items():
        seen = inputs.get(urn)
        if not res.props and seen is not None:
            merged[urn] = replace(res, props=seen.props, secret_paths=seen.secret_paths)
    return merged


def serve() -> None:
    """Start the analyzer on 127.0.0.1, print its port (the CLI reads it), serve until killed.

    This is what `pulumi_policy.PolicyPack(...)` does, with the servicer above in its place.
    """
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=_GRPC_OPTIONS)
    analyzer_pb2_grpc.add_AnalyzerServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sys.stdout.buffer.write(f"{port}\n".encode())
    sys.stdout.flush()
    try:
        while True:
            time.sleep(86400)
    except KeyboardInterrupt:
        server.stop(0)
