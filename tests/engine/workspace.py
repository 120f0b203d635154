"""The real Pulumi CLI on a copy of the project, as a user runs it from a clone.

A `Workspace` is a temporary folder with:

* `project/`: the repository's top-level entries linked in (the program, the pack, the chart, `.venv`,
  `policy/venv`), except the stack files, which are copied: `pulumi stack init` and `pulumi config set`
  write into them, and the repository's own must not change;
* `state/`: the file backend (`PULUMI_BACKEND_URL=file://…`), `home/`: `PULUMI_HOME` (no plugin cache:
  every plugin comes from PATH);
* `bin/`: the provider doubles (`vke_gpu_dra_testing.provider_double`) for the plugins the Go module
  proxy does not serve, first on PATH after the toolchain's `pulumi` and `pulumi-resource-kubernetes`.

Secrets use the passphrase provider (`PULUMI_CONFIG_PASSPHRASE`); automatic plugin downloads and the
update check are off, as nothing outside this machine is reachable.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.controlplane import ControlPlane
from tools import toolchain

ROOT = Path(__file__).resolve().parents[2]
#: The test virtualenv's bin folder (vke-gpu-dra, the plugin).
BIN = Path(sys.executable).parent
#: Plugins the Go module proxy serves no version of: the provider double answers for them.
DOUBLES = ("volcengine", "docker-build", "command")
#: Where the double's invoke answers come from (provider_double.INVOKES_ENV).
INVOKES_FILE = "invokes.json"
STACK_FILE_PREFIX = "Pulumi."
#: The driver image of the stacks aimed at the test cluster: prebuilt, never pulled (no container runtime
#: here; the node agent runs the plugin).
IMAGE = "vke-gpu-dra-cn-beijing.cr.volces.com/vke-gpu-dra/dra-gpu-kubelet-plugin@sha256:" + "5" * 64
SAMPLE_NAMESPACE = "gpu-samples"


class PulumiFailed(AssertionError):
    """A pulumi command exited non-zero when the test expected it to succeed."""


@dataclass(frozen=True)
class Step:
    """One resource's planned or applied operation (a resourcePreEvent)."""

    op: str
    urn: str
    type: str
    inputs: dict[str, Any]
    protect: bool
    diffs: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


@dataclass(frozen=True)
class Violation:
    """A policy's verdict on a resource (a policyEvent)."""

    policy: str
    level: str
    urn: str
    message: str


@dataclass
class Events:
    """What the engine streamed for one preview, up, refresh or destroy (`--json`, one event a line)."""

    steps: list[Step] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    #: Stack policies that passed (policyAnalyzeStackSummaryEvent).
    passed: frozenset[str] = frozenset()
    diagnostics: list[tuple[str, str]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Events:
        events = cls()
        for line in text.splitlines():
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if "resourcePreEvent" in event:
                meta = event["resourcePreEvent"]["metadata"]
                new = meta.get("new") or meta.get("old") or {}
                events.steps.append(
                    Step(meta["op"], meta["urn"], meta["type"], dict(new.get("inputs") or {}),
                         bool(new.get("protect")), _diffs(meta))
                )  # fmt: skip
            elif "policyEvent" in event:
                e = event["policyEvent"]
                events.violations.append(
                    Violation(e["policyName"], e["enforcementLevel"], e["resourceUrn"], e["message"])
                )
            elif "policyAnalyzeStackSummaryEvent" in event:
                events.passed = frozenset(event["policyAnalyzeStackSummaryEvent"].get("passed") or ())
            elif "diagnosticEvent" in event:
                e = event["diagnosticEvent"]
                if e.get("severity") in ("error", "warning", "info"):
                    events.diagnostics.append((e["severity"], e["message"]))
            elif "summaryEvent" in event:
                events.summary = event["summaryEvent"]
        return events

    @property
    def result(self) -> str:
        return str(self.summary.get("result", ""))

    @property
    def changes(self) -> dict[str, int]:
        return dict(self.summary.get("resourceChanges") or {})

    def ops(self, *, custom_only: bool = True) -> dict[str, str]:
        """name -> operation, for the resources with a provider (components left out)."""
        return {s.name: s.op for s in self.steps if not custom_only or not _is_component(s.type)}

    def one(self, type_: str, name: str | None = None) -> Step:
        found = [s for s in self.steps if s.type == type_ and (name is None or s.name == name)]
        assert len(found) == 1, f"expected one {type_} {name or ''}, found {[s.name for s in found]}"
        return found[0]

    def errors(self) -> list[str]:
        return [message for severity, message in self.diagnostics if severity == "error"]


#: The toolchain's tools the engine tier (and the node tier's stacks) run: the CLI with its language host,
#: and the Kubernetes provider.
TOOLS = ("pulumi", "pulumi-kubernetes")


def missing_tools() -> str | None:
    """Why the tier's tools cannot run here (one line), or None when they are built."""
    missing = [name for name in TOOLS if toolchain.locate(name) is None]
    if missing:
        return (
            f"the toolchain's {', '.join(missing)} not built: build them with scripts/toolchain "
            "(Go 1.26 and the Go module proxy; docs/testing.md)"
        )
    return None


def tool_dirs() -> list[Path]:
    """The folders of the tier's tools; skips the test, saying how to build them, where one is missing."""
    reason = missing_tools()
    if reason:
        pytest.skip(reason)
    return [folder for name in TOOLS if (folder := toolchain.locate(name)) is not None]


def _diffs(meta: dict[str, Any]) -> tuple[str, ...]:
    """The properties a step changes: its top-level diff keys, else its detailed diff's paths."""
    return tuple(meta.get("diffs") or sorted((meta.get("detailedDiff") or {}).keys()))


def _is_component(type_: str) -> bool:
    return type_.startswith("vke-gpu-dra:index:") or type_ == "pulumi:pulumi:Stack"


@dataclass
class Run:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def events(self) -> Events:
        return Events.parse(self.stdout)


def run_group(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdin: str | None = None, timeout: float = 600
) -> tuple[str, str, int]:
    """Run a command in its own process group: (stdout, stderr, exit status). On timeout the whole group is
    killed (pulumi's plugins with it, which would outlive a killed `pulumi`), then TimeoutExpired."""
    process = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return stdout, stderr, process.returncode


@dataclass
class Workspace:
    root: Path
    tool_dirs: Sequence[Path]
    passphrase: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def project(self) -> Path:
        return self.root / "project"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @classmethod
    def create(cls, root: Path, tool_dirs: Sequence[Path]) -> Workspace:
        ws = cls(root, tool_dirs)
        ws.project.mkdir(parents=True)
        for entry in sorted(ROOT.iterdir()):
            if entry.name in (".git",) or entry.name.startswith(".pulumi"):
                continue
            target = ws.project / entry.name
            if entry.name.startswith(STACK_FILE_PREFIX) and entry.name != "Pulumi.yaml":
                target.write_bytes(entry.read_bytes())
            else:
                target.symlink_to(entry)
        for name in ("state", "home", "bin"):
            (root / name).mkdir()
        for package in DOUBLES:
            script = ws.bin / f"pulumi-resource-{package}"
            script.write_text(
                f'#!/bin/sh\nexec "{sys.executable}" -m vke_gpu_dra_testing.provider_double {package} "$@"\n'
            )
            script.chmod(0o755)
        return ws

    def env(self) -> dict[str, str]:
        path = os.pathsep.join([*(str(d) for d in self.tool_dirs), str(self.bin), os.environ.get("PATH", "")])
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PULUMI_", "VOLCENGINE_", "KUBECONFIG"))
        }
        env.update(
            {
                "PATH": path,
                "PULUMI_HOME": str(self.root / "home"),
                "PULUMI_BACKEND_URL": f"file://{self.root / 'state'}",
                "PULUMI_CONFIG_PASSPHRASE": self.passphrase,
                "PULUMI_SKIP_UPDATE_CHECK": "true",
                "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
                "PULUMI_SKIP_CONFIRMATIONS": "true",
                # `--json` streams the engine's events, one a line, previews included.
                "PULUMI_ENABLE_STREAMING_JSON_PREVIEW": "true",
                **self.extra_env,
            }
        )
        if (self.root / INVOKES_FILE).exists():
            env["PROVIDER_DOUBLE_INVOKES"] = str(self.root / INVOKES_FILE)
        return env

    def set_invokes(self, answers: Mapping[str, Any]) -> None:
        (self.root / INVOKES_FILE).write_text(json.dumps(dict(answers)))

    def pulumi(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 600,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Run:
        """`pulumi ARGS --non-interactive` in the project copy (`env` added to the workspace's)."""
        argv = ["pulumi", *args, "--non-interactive"]
        begin = time.monotonic()
        stdout, stderr, returncode = run_group(
            argv, cwd=self.project, env={**self.env(), **(env or {})}, stdin=stdin, timeout=timeout
        )
        run = Run(argv, returncode, stdout, stderr, time.monotonic() - begin)
        if check and run.returncode != 0:
            raise PulumiFailed(f"`{' '.join(argv)}` exited {run.returncode}:\n{run.output[-6000:]}")
        return run

    # --- the commands a user types --------------------------------------------------------------

    def stack_init(self, stack: str) -> None:
        self.pulumi("stack", "init", stack, "--secrets-provider", "passphrase")

    def config_set(self, stack: str, values: Mapping[str, str], *, secret: bool = False) -> None:
        """`pulumi config set` of each value, through stdin (a secret stays out of the process list)."""
        flag = ["--secret"] if secret else []
        for key, value in values.items():
            self.pulumi("config", "set", "--stack", stack, key, *flag, stdin=value)

    def config_rm(self, stack: str, keys: Iterable[str]) -> None:
        for key in keys:
            self.pulumi("config", "rm", "--stack", stack, key)

    def preview(self, stack: str, *args: str, check: bool = True) -> tuple[Run, Events]:
        """`pulumi preview --policy-pack policy` with the engine's events."""
        run = self.pulumi(
            "preview", "--stack", stack, "--policy-pack", "policy", "--json", *args, check=check
        )
        return run, run.events()

    def up(self, stack: str, *args: str, check: bool = True, timeout: float = 900) -> tuple[Run, Events]:
        """`pulumi up --yes --policy-pack policy` with the engine's events."""
        args = ("--stack", stack, "--yes", "--skip-preview", "--policy-pack", "policy", "--json", *args)
        run = self.pulumi("up", *args, check=check, timeout=timeout)
        return run, run.events()

    def aim_at(self, plane: ControlPlane, stack: str) -> None:
        """Write `stack`'s file: the local stack's settings (Pulumi.local.yaml) aimed at `plane` (an admin
        kubeconfig beside the project) with a prebuilt driver image."""
        kubeconfig = plane.write_kubeconfig(self.root / "kubeconfig", plane.admin().token, "engine-admin")
        local = yaml.safe_load((ROOT / "Pulumi.local.yaml").read_text())["config"]
        config = {k: v for k, v in local.items() if not k.startswith("vke-gpu-dra:kubeconfig")}
        del config["vke-gpu-dra:driver.image.build"]
        config.update(
            {
                "vke-gpu-dra:kubeconfigPath": str(kubeconfig),
                "vke-gpu-dra:driver.image": IMAGE,
                "vke-gpu-dra:driver.kubeletPluginOnAllNodes": False,
                "vke-gpu-dra:sample.namespace": SAMPLE_NAMESPACE,
                "vke-gpu-dra:sample.args": ["-c", "sleep 600"],
                # A release that cannot become ready fails the test in 3 minutes, not the default 10.
                "vke-gpu-dra:driver.timeoutSeconds": 180,
            }
        )
        self.stack_file(stack).write_text(yaml.safe_dump({"config": config}))

    def stack_file(self, stack: str) -> Path:
        return self.project / f"{STACK_FILE_PREFIX}{stack}.yaml"
