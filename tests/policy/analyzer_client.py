"""Drive the real policy pack the way the Pulumi CLI does: a subprocess speaking the Analyzer gRPC API."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc
from vke_gpu_dra_core import pulumi_types as pt

from .stacks import SimRes

POLICY_DIR = Path(__file__).resolve().parents[2] / "policy"
LEVELS = {
    analyzer_pb2.ADVISORY: "advisory",
    analyzer_pb2.MANDATORY: "mandatory",
    analyzer_pb2.REMEDIATE: "remediate",
    analyzer_pb2.DISABLED: "disabled",
}


@dataclass(frozen=True)
class Diagnostic:
    policy: str
    level: str
    urn: str
    message: str


def _struct(props: Mapping[str, Any]) -> struct_pb2.Struct:
    return json_format.ParseDict(props, struct_pb2.Struct())


def _options(res: SimRes) -> analyzer_pb2.AnalyzerResourceOptions:
    return analyzer_pb2.AnalyzerResourceOptions(protect=res.protect, parent=res.parent)


class PackProcess:
    """The pack started as the CLI's `pulumi-analyzer-policy-python` starts it.

    That is `python -u -m pulumi.policy <engine> .` in the pack's directory, which runs
    `policy/__main__.py`; its first stdout line is the analyzer's port.
    """

    def __init__(self) -> None:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PULUMI_PROJECT": "vke-gpu-dra",
            "PULUMI_STACK": "test",
            "PULUMI_DRY_RUN": "true",
        }
        # A file, not a pipe: a chatty pack must never block; closed in close().
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:0", "."],
            cwd=POLICY_DIR,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        if not line.isdigit():
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.stderr.seek(0)
            err = self.stderr.read().decode(errors="replace")
            self.stderr.close()
            raise RuntimeError(f"policy pack did not print its port (got {line!r}): {err}")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{line}")
        self.stub = analyzer_pb2_grpc.AnalyzerStub(self.channel)

    def close(self) -> None:
        self.channel.close()
        self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.stderr.close()

    # --- RPCs ---

    def info(self) -> analyzer_pb2.AnalyzerInfo:
        return self.stub.GetAnalyzerInfo(empty_pb2.Empty())

    def configure(self, policy_config: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """Per-policy config; every policy at its default enforcement level unless the config says."""
        info = self.info()
        request = analyzer_pb2.ConfigureAnalyzerRequest()
        for policy in info.policies:
            props = dict((policy_config or {}).get(policy.name, {}))
            level = props.pop("enforcementLevel", None)
            entry = request.policyConfig[policy.name]
            entry.enforcementLevel = (
                policy.enforcementLevel
                if level is None
                else analyzer_pb2.EnforcementLevel.Value(level.upper())
            )
            entry.properties.CopyFrom(_struct(props))
        self.stub.Configure(request)

    def configure_stack(self, stack: str, config: Mapping[str, str]) -> None:
        request = analyzer_pb2.AnalyzerStackConfigureRequest(stack=stack, project="vke-gpu-dra")
        for key, value in config.items():
            request.config[key] = value
        self.stub.ConfigureStack(request)

    def analyze(self, res: SimRes) -> list[Diagnostic]:
        request = analyzer_pb2.AnalyzeRequest(
            type=res.type, name=res.name, urn=res.urn, properties=_struct(res.props), options=_options(res)
        )
        return _diagnostics(self.stub.Analyze(request))

    def analyze_stack(
        self, resources: Iterable[SimRes], outputs: Callable[[SimRes], Mapping[str, Any]] | None = None
    ) -> list[Diagnostic]:
        """`outputs`: what the engine hands over as each resource's properties (its outputs; by default
        the same as its inputs)."""
        request = analyzer_pb2.AnalyzeStackRequest(
            resources=[
                analyzer_pb2.AnalyzerResource(
                    type=res.type,
                    name=res.name,
                    urn=res.urn,
                    properties=_struct(outputs(res) if outputs else res.props),
                    options=_options(res),
                    parent=res.parent,
                    dependencies=res.dependencies,
                )
                for res in resources
            ]
        )
        return _diagnostics(self.stub.AnalyzeStack(request))

    def run(
        self, stack: Any, outputs: Callable[[SimRes], Mapping[str, Any]] | None = None
    ) -> list[Diagnostic]:
        """Preview/up as the engine runs it: stack config, Analyze per resource (its inputs), then
        AnalyzeStack (`outputs`, by default the inputs again)."""
        self.configure_stack(stack.name, stack.config)
        diags = [d for res in stack if res.type != pt.STACK for d in self.analyze(res)]
        return diags + self.analyze_stack(stack, outputs)


def _diagnostics(response: analyzer_pb2.AnalyzeResponse) -> list[Diagnostic]:
    return [
        Diagnostic(d.policyName, LEVELS[d.enforcementLevel], d.urn, d.message) for d in response.diagnostics
    ]
