"""The program's registrations in the shape the engine sends them to a policy pack.

`program_stack(stack, implementation)` runs the Pulumi program for an example stack under the
program's own mocks (tests/program/harness.py) and returns every registered resource (types, names,
camelCase inputs, protect, parent, dependencies, secrets as signature-wrapped values) plus the stack's
outputs and config. Broken variants are config changes or small mutations of these.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pulumi
from vke_gpu_dra_core import pulumi_types as pt

from tests.program import harness

PROJECT = "vke-gpu-dra"
SIG = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
ASSET_SIG = "c44067f5952c0a294b673a41bacd8c17"

STACKS = ("dev", "prod", "local")
NVIDIA_INCOMPATIBLE = (
    "driver.deviceSource",
    "driver.simulatedGpus",
    "driver.kubeletPluginOnAllNodes",
    "driver.image.build",
)
IMPLEMENTATIONS = ("python", "nvidia")

KUBECONFIG_TEXT = harness.FAKE_KUBECONFIG


def secret(value: Any) -> dict[str, Any]:
    """A value as the engine sends a secret to an analyzer."""
    return {SIG: SECRET_SIG, "value": value}


def string_asset(text: str) -> dict[str, Any]:
    return {SIG: ASSET_SIG, "text": text}


@dataclass
class SimRes:
    """One registered resource (what the analyzer receives)."""

    type: str
    name: str
    props: dict[str, Any]
    protect: bool = False
    parent: str = ""
    dependencies: list[str] = field(default_factory=list)
    urn: str = ""
    #: Outputs the engine stores as secrets whatever the provider returns.
    additional_secret_outputs: list[str] = field(default_factory=list)


class Stack(list[SimRes]):
    """The resources of one stack, with lookups for the mutations of the broken-stack tests."""

    def __init__(self, name: str, resources: list[SimRes], config: dict[str, str]) -> None:
        super().__init__(resources)
        self.name = name
        self.config = config

    def one(self, type_: str, name_part: str = "") -> SimRes:
        found = [r for r in self if r.type == type_ and name_part in r.name]
        assert len(found) == 1, f"expected one {type_} {name_part!r}, found {[r.name for r in found]}"
        return found[0]

    def mutated(self, fn: Callable[[Stack], None]) -> Stack:
        clone = Stack(self.name, [replace(r, props=copy.deepcopy(r.props)) for r in self], dict(self.config))
        fn(clone)
        return clone


def _wire(value: Any) -> Any:
    """A registered input as the engine hands it to an analyzer (assets as signature maps, no internals)."""
    if isinstance(value, pulumi.StringAsset):
        return string_asset(value.text)
    if isinstance(value, pulumi.FileAsset):
        return {SIG: ASSET_SIG, "path": value.path}
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items() if not k.startswith("__") and v is not None}
    if isinstance(value, list | tuple):
        return [_wire(v) for v in value]
    return value


def _is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(SIG) == SECRET_SIG


def _inputs(registered: harness.Registered) -> dict[str, Any]:
    """Inputs with every top-level key the SDK sent as secret wrapped as a secret (as the engine has it)."""
    props = _wire(registered.inputs)
    for key in registered.secret_inputs:
        if key in props and not _is_secret(props[key]):
            props[key] = secret(props[key])
    return props


def program_stack(
    stack: str,
    implementation: str,
    overrides: Mapping[str, str] | None = None,
    secrets: Mapping[str, str] | None = None,
    remove: tuple[str, ...] = (),
) -> Stack:
    """The registrations of Pulumi.<stack>.yaml with `implementation`, run under the program's mocks."""
    config = {"driver.implementation": implementation, **(overrides or {})}
    if implementation == "nvidia":  # NVIDIA's chart takes neither simulated GPUs nor an any-node plugin
        remove = (*remove, *NVIDIA_INCOMPATIBLE)
    run = harness.run_stack(stack, config, secrets=secrets, remove=remove)
    raw = harness.stack_raw_config(stack, config, secrets=secrets, remove=remove)
    resources = [
        SimRes(
            r.type,
            r.name,
            _inputs(r),
            protect=r.protect,
            parent=r.parent,
            dependencies=list(r.dependencies),
            urn=r.urn,
            additional_secret_outputs=list(r.additional_secret_outputs),
        )
        for r in run.resources
    ]
    outputs = {k: secret(_wire(v)) if k in run.secret_exports else _wire(v) for k, v in run.exports.items()}
    root = SimRes(
        pt.STACK,
        f"{PROJECT}-{stack}",
        outputs,
        urn=f"urn:pulumi:{stack}::{PROJECT}::{pt.STACK}::{PROJECT}-{stack}",
    )
    return Stack(stack, [root, *resources], {k: str(v) for k, v in raw.values.items()})


def after_up(stack: Stack) -> None:
    """Outputs the VKE provider adds once the cluster exists: the patch version and base64 kubeconfigs.

    The engine stores an output as secret when the resource lists it in additional_secret_outputs.
    """
    encoded = base64.b64encode(KUBECONFIG_TEXT.encode()).decode()
    for res in stack:
        if res.type != pt.CLUSTER:
            continue
        res.props["kubernetesVersion"] = "v1.34.2-vke.3"
        for key in ("kubeconfigPublic", "kubeconfigPrivate"):
            res.props[key] = secret(encoded) if key in res.additional_secret_outputs else encoded


def example_stacks() -> Iterator[tuple[str, str]]:
    for stack in STACKS:
        for implementation in IMPLEMENTATIONS:
            yield stack, implementation
