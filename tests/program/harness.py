"""Run the Pulumi program under mocks and return what it registered.

Usage (from a test; `run_stack` builds everything inside the calling test):

    from tests.program import harness

    run = harness.run_stack("dev")                                   # Pulumi.dev.yaml as is
    run = harness.run_stack("dev", {"driver.implementation": "nvidia"})   # plus overrides
    run = harness.run_stack("dev", secrets={"nodePool.password": "pw"})   # secret overrides
    release = run.one(pt.HELM_RELEASE)
    release.inputs["values"], release.provider, release.dependencies, release.protect
    run.exports["kubeconfig"], run.secret_exports                       # resolved stack outputs
    run.depends_on(release, pool)                                     # transitive ordering
    harness.to_policy_resources(run)                                  # pulumi_policy.PolicyResource list

How it works: `run_stack` loads `Pulumi.<stack>.yaml` (config values stringified as the engine does;
`secure:` values replaced by placeholders and marked secret), applies overrides, calls
`pulumi.runtime.set_mocks(..., preview=False)` with a recording mock monitor, sets the config,
and runs `components.stack.build()` inside `@pulumi.runtime.test`. The monitor records every
RegisterResource request: type, name, URN, inputs (as the provider would receive them, camelCase,
numbers as floats), provider reference, parent, dependencies, protect, ignoreChanges,
additionalSecretOutputs and which inputs are secret. Mocked resources echo their inputs back
(deep copies) plus the few computed fields the program reads; the invoke
`volcengine:vke/getKubeconfigs:getKubeconfigs` answers a base64 kubeconfig (`FAKE_KUBECONFIG`).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks
from vke_gpu_dra_core import config as config_mod
from vke_gpu_dra_core import pulumi_types as pt

from components import stack as stack_mod

ROOT = Path(__file__).resolve().parents[2]
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270"
KUBECONFIG_INVOKE = "volcengine:vke/getKubeconfigs:getKubeconfigs"
CR_TOKEN_INVOKE = "volcengine:cr/getAuthorizationTokens:getAuthorizationTokens"
DOCKER_IMAGE = "docker-build:index:Image"
FAKE_CR_USERNAME = "vke-gpu-dra@2100000001"
FAKE_CR_TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.fake-cr-token"
#: What the quickstart asks a user to set before the first `pulumi up` (docs/image-supply-chain.md).
USER_CONFIG: dict[str, dict[str, str]] = {
    "dev": {"driver.registry.name": "vke-gpu-dra-dev"},
    "prod": {"driver.registry.name": "vke-gpu-dra-prod"},
}


def fake_digest(tags: Any) -> str:
    """The digest the mocked build reports: a function of its tags, so a new tag is a new digest."""
    return "sha256:" + hashlib.sha256(json.dumps(tags, sort_keys=True).encode()).hexdigest()


FAKE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: vke
  cluster: {server: "https://203.0.113.10:6443"}
users:
- name: admin
  user: {token: fake-token}
contexts:
- name: vke
  context: {cluster: vke, user: admin}
current-context: vke
"""


@dataclass(frozen=True)
class Registered:
    """One RegisterResource request."""

    type: str
    name: str
    urn: str
    id: str
    custom: bool
    inputs: dict[str, Any]
    provider: str  # "<provider urn>::<id>", "" for components and default providers
    parent: str
    dependencies: tuple[str, ...]
    protect: bool
    ignore_changes: tuple[str, ...]
    additional_secret_outputs: tuple[str, ...]
    secret_inputs: frozenset[str]  # top-level input keys that are (or contain) secrets

    @property
    def provider_urn(self) -> str:
        return self.provider.rsplit("::", 1)[0] if self.provider else ""


@dataclass
class ProgramRun:
    """Everything one program run registered, plus its resolved exports."""

    resources: list[Registered]
    exports: dict[str, Any] = field(default_factory=dict)
    secret_exports: frozenset[str] = frozenset()
    invokes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def by_type(self, type_: str) -> list[Registered]:
        return [r for r in self.resources if r.type == type_]

    def with_prefix(self, prefix: str) -> list[Registered]:
        return [r for r in self.resources if r.type.startswith(prefix)]

    def one(self, type_: str, name_contains: str = "") -> Registered:
        found = [r for r in self.by_type(type_) if name_contains in r.name]
        if len(found) != 1:
            raise AssertionError(f"expected one {type_} ({name_contains!r}), found {[r.name for r in found]}")
        return found[0]

    def by_urn(self, urn: str) -> Registered:
        for r in self.resources:
            if r.urn == urn:
                return r
        raise KeyError(urn)

    def depends_on(self, resource: Registered, other: Registered) -> bool:
        """True if `resource` depends on `other`, directly or through other dependencies."""
        seen: set[str] = set()
        todo = list(resource.dependencies)
        while todo:
            urn = todo.pop()
            if urn == other.urn:
                return True
            if urn in seen:
                continue
            seen.add(urn)
            try:
                todo.extend(self.by_urn(urn).dependencies)
            except KeyError:
                continue
        return False


def _contains_secret(value: Any) -> bool:
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_VALUE:
            return True
        return any(_contains_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(_contains_secret(v) for v in value)
    return False


def _unwrap_secrets(value: Any) -> Any:
    """Replace secret envelopes ({sig: secret, value: v}) by their values (secretness is in secret_inputs)."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_VALUE:
            return _unwrap_secrets(value.get("value"))
        return {k: _unwrap_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap_secrets(v) for v in value]
    return value


class ProgramMocks(pulumi.runtime.Mocks):
    """Echo inputs back; answer the kubeconfig invoke. With `preview`, a first preview: no resource
    exists yet, so none has an id."""

    def __init__(self, preview: bool = False) -> None:
        self.invokes: list[tuple[str, dict[str, Any]]] = []
        self.preview = preview

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = copy.deepcopy(args.inputs)
        if args.typ == pt.HELM_RELEASE:
            state["status"] = {
                "name": state.get("name", args.name),
                "namespace": state.get("namespace", ""),
                "status": "deployed",
                "chart": state.get("chart", ""),
                "version": state.get("version", ""),
            }
        if args.typ == DOCKER_IMAGE:
            state["digest"] = fake_digest(state.get("tags"))
            state["ref"] = f"{(state.get('tags') or ['image'])[0]}@{state['digest']}"
        return ("" if self.preview else f"{args.name}-id"), state

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:  # type: ignore[override]  # a bare dict is accepted
        self.invokes.append((args.token, copy.deepcopy(dict(args.args))))
        if args.token == KUBECONFIG_INVOKE:
            ids = list(args.args.get("ids") or ["kubeconfig-id"])
            encoded = base64.b64encode(FAKE_KUBECONFIG.encode()).decode()
            return {
                "ids": ids,
                "kubeconfigs": [
                    {
                        "kubeconfig": encoded,
                        "id": ids[0],
                        "kubeconfigId": ids[0],
                        "clusterId": "vke-cluster-id",
                        "type": "Public",
                    }
                ],
                "totalCount": 1,
            }
        if args.token == CR_TOKEN_INVOKE:
            return {
                "id": "cr-token",
                "registry": args.args.get("registry", ""),
                "tokens": [
                    {
                        "username": FAKE_CR_USERNAME,
                        "token": FAKE_CR_TOKEN,
                        "expireTime": "2026-12-01T15:00:00Z",
                    }
                ],
                "totalCount": 1,
            }
        return {}


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """A MockMonitor that also keeps the resource options of each registration."""

    def __init__(self, mocks: ProgramMocks) -> None:
        super().__init__(mocks)
        self.registrations: list[Registered] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type == pt.STACK:
            return response
        raw = json_format.MessageToDict(request.object)
        registration = self.resources[response.urn]
        self.registrations.append(
            Registered(
                type=request.type,
                name=request.name,
                urn=response.urn,
                id=response.id,
                custom=bool(request.custom),
                inputs=_unwrap_secrets(
                    copy.deepcopy(dict(pulumi.runtime.rpc.deserialize_properties(request.object)))
                ),
                provider=request.provider,
                parent=request.parent,
                dependencies=tuple(request.dependencies),
                protect=bool(request.protect),
                ignore_changes=tuple(request.ignoreChanges),
                additional_secret_outputs=tuple(request.additionalSecretOutputs),
                secret_inputs=frozenset(k for k, v in raw.items() if _contains_secret(v)),
            )
        )
        del registration
        return response


def stack_file_config(stack: str) -> dict[str, Any]:
    """The `config:` mapping of Pulumi.<stack>.yaml."""
    data = config_mod.load_pulumi_yaml((ROOT / f"Pulumi.{stack}.yaml").read_text())
    return dict(data.get("config") or {})


def stack_raw_config(
    stack: str,
    overrides: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    remove: Iterable[str] = (),
) -> config_mod.RawConfig:
    """Raw config of a stack file plus overrides (plain) and secrets (marked secret)."""
    values = stack_file_config(stack)
    for key, value in USER_CONFIG.get(stack, {}).items():
        values.setdefault(f"{config_mod.PROJECT}:{key}", value)
    for key in remove:
        full = key if ":" in key else f"{config_mod.PROJECT}:{key}"
        values.pop(full, None)
    for key, value in (overrides or {}).items():
        values[key if ":" in key else f"{config_mod.PROJECT}:{key}"] = value
    raw = config_mod.raw_from_stack_file(values)
    merged = dict(raw.values)
    secret_keys = set(raw.secret_keys)
    for key, value in (secrets or {}).items():
        full = key if ":" in key else f"{config_mod.PROJECT}:{key}"
        merged[full] = value
        secret_keys.add(full)
    return config_mod.RawConfig(values=merged, secret_keys=frozenset(secret_keys))


def run_program(raw: config_mod.RawConfig, stack: str = "test", *, preview: bool = False) -> ProgramRun:
    """Run components.stack.build() for `raw` under fresh mocks; return the registrations. `preview`:
    as a first `pulumi preview` (no ids; invokes with unknown arguments are not made)."""
    mocks = ProgramMocks(preview)
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project=config_mod.PROJECT, stack=stack, preview=preview, monitor=monitor)
    pulumi.runtime.set_all_config(dict(raw.values), secret_keys=sorted(raw.secret_keys))
    resolved: dict[str, Any] = {}
    secret: set[str] = set()

    async def resolve(key: str, output: pulumi.Output[Any]) -> None:
        resolved[key] = await output.future()
        if await output.is_secret():
            secret.add(key)

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        exports = stack_mod.build(config_mod.load(raw))
        tasks = [resolve(k, pulumi.Output.from_input(v)) for k, v in exports.items()]

        async def gather() -> None:
            await asyncio.gather(*tasks)

        return pulumi.Output.from_input(asyncio.ensure_future(gather()))

    program()
    return ProgramRun(
        resources=list(monitor.registrations),
        exports=resolved,
        secret_exports=frozenset(secret),
        invokes=list(mocks.invokes),
    )


def run_stack(
    stack: str,
    overrides: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    remove: Iterable[str] = (),
    *,
    preview: bool = False,
) -> ProgramRun:
    """run_program for Pulumi.<stack>.yaml (+ overrides / secrets / removed keys)."""
    return run_program(stack_raw_config(stack, overrides, secrets, remove), stack=stack, preview=preview)


def api_json(resource: Registered, api_version: str, kind: str) -> dict[str, Any]:
    """A registered Kubernetes resource as API JSON (integral floats back to ints)."""

    def fix(value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fix(v) for v in value]
        return value

    body = {k: fix(v) for k, v in resource.inputs.items()}
    body.setdefault("apiVersion", api_version)
    body.setdefault("kind", kind)
    return body


def to_policy_resources(run: ProgramRun) -> list[Any]:
    """The registrations as pulumi_policy.PolicyResource objects (props = echoed inputs)."""
    import pulumi_policy

    by_urn: dict[str, Any] = {}
    for r in run.resources:
        opts = pulumi_policy.PolicyResourceOptions(
            protect=r.protect,
            ignore_changes=list(r.ignore_changes),
            delete_before_replace=None,
            aliases=[],
            custom_timeouts=pulumi_policy.PolicyCustomTimeouts(0, 0, 0),
            additional_secret_outputs=list(r.additional_secret_outputs),
            parent=r.parent or None,
        )
        by_urn[r.urn] = pulumi_policy.PolicyResource(
            resource_type=r.type,
            props=copy.deepcopy(r.inputs),
            urn=r.urn,
            name=r.name,
            opts=opts,
            provider=None,
            parent=None,
            dependencies=[],
            property_dependencies={},
        )
    for r in run.resources:
        res = by_urn[r.urn]
        res.parent = by_urn.get(r.parent)
        res.dependencies = [by_urn[d] for d in r.dependencies if d in by_urn]
        provider_urn = r.provider_urn
        if provider_urn in by_urn:
            p = next(x for x in run.resources if x.urn == provider_urn)
            res.provider = pulumi_policy.PolicyProviderResource(
                resource_type=p.type, props=copy.deepcopy(p.inputs), urn=p.urn, name=p.name
            )
    return list(by_urn.values())


def dumps(run: ProgramRun) -> str:
    """A readable JSON summary (for debugging a failing test)."""
    return json.dumps(
        [
            {"type": r.type, "name": r.name, "provider": r.provider_urn, "deps": r.dependencies}
            for r in run.resources
        ],
        indent=1,
    )
