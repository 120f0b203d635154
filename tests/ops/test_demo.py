"""`vke-gpu-dra demo`: tested through a fake workspace boundary (no Pulumi CLI needed)."""

from __future__ import annotations

import io
import json
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from vke_gpu_dra_core import facts
from vke_gpu_dra_ops import demo, demo_stacks
from vke_gpu_dra_ops.__main__ import build_parser, main
from vke_gpu_dra_ops.pulumi_workspace import (
    AutomationWorkspace,
    PulumiError,
    PulumiUnavailable,
    StackFile,
    StackInfo,
    StackNotFound,
    WorkspaceOptions,
    backend_url,
)

from tests.ops import fake_kube

NOW = datetime(2026, 11, 30, 10, 41, 7, tzinfo=UTC)
SALT = "v1:abc123:v1:def456:ghi789"
BASE: dict[str, Any] = {
    "config": {
        "vke-gpu-dra:region": "cn-beijing",
        "vke-gpu-dra:gpuInstanceType": "ecs.gni2.3xlarge",
        "vke-gpu-dra:nodePassword": {"secure": "v1:AAAA:BBBB"},
    },
    "encryptionsalt": SALT,
}


#: How the Pulumi CLI 3.274.1 closes a destroy (the engine tier's demo test reads the real one).
DESTROY_CLOSING = (
    "The resources in the stack have been deleted, but the history and configuration associated with the "
    "stack are still maintained. ",
    "If you want to remove the stack completely, run `pulumi stack rm {stack}`.",
)


@dataclass
class Output:
    value: Any
    secret: bool = False


@dataclass
class FakeStack:
    name: str
    ws: FakeWorkspace

    def up(self, **kwargs: Any) -> None:
        self.ws.calls.append(("up", self.name, {k: v for k, v in kwargs.items() if k != "on_output"}))
        kwargs["on_output"](f"Updating ({self.name}):")
        if self.ws.fail.get(("up", self.name)):
            raise PulumiError(self.ws.fail[("up", self.name)])

    def destroy(self, **kwargs: Any) -> None:
        self.ws.calls.append(("destroy", self.name, {k: v for k, v in kwargs.items() if k != "on_output"}))
        for line in (f"Destroying ({self.name})", "Resources:", "    - 5 deleted", "", *DESTROY_CLOSING):
            kwargs["on_output"](line.format(stack=self.name))
        if self.ws.fail.get(("destroy", self.name)):
            raise PulumiError(self.ws.fail[("destroy", self.name)])

    def outputs(self) -> Mapping[str, Any]:
        return self.ws.outputs.get(self.name, {})


@dataclass
class FakeWorkspace:
    """Implements the `DemoWorkspace` methods the demo code calls; records every call."""

    stacks: dict[str, StackInfo] = field(default_factory=dict)
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    files: dict[str, StackFile] = field(default_factory=dict)
    outputs: dict[str, dict[str, Output]] = field(default_factory=dict)
    fail: dict[tuple[str, str], str] = field(default_factory=dict)
    calls: list[tuple[str, str, Any]] = field(default_factory=list)

    def add(self, name: str, tags: dict[str, str], **info: Any) -> None:
        self.stacks[name] = StackInfo(name, **info)
        self.tags[name] = dict(tags)

    def list_stacks(self) -> list[StackInfo]:
        return list(self.stacks.values())

    def list_tags(self, stack_name: str) -> Mapping[str, str]:
        if stack_name not in self.stacks:
            raise StackNotFound(f"error: no stack named '{stack_name}' found")
        return dict(self.tags.get(stack_name, {}))

    def set_tag(self, stack_name: str, key: str, value: str) -> None:
        self.calls.append(("set_tag", stack_name, (key, value)))
        self.tags.setdefault(stack_name, {})[key] = value

    def write_stack_file(self, stack_name: str, stack_file: StackFile) -> None:
        self.files[stack_name] = stack_file

    def create_stack(self, stack_name: str) -> FakeStack:
        self.calls.append(("create_stack", stack_name, None))
        self.stacks[stack_name] = StackInfo(stack_name)
        return FakeStack(stack_name, self)

    def select_stack(self, stack_name: str) -> FakeStack:
        if stack_name not in self.stacks:
            raise StackNotFound(stack_name)
        return FakeStack(stack_name, self)

    def remove_stack(self, stack_name: str) -> None:
        self.calls.append(("remove_stack", stack_name, None))
        del self.stacks[stack_name]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import yaml

    proj = tmp_path / "project"
    proj.mkdir()
    (proj / "Pulumi.yaml").write_text("name: vke-gpu-dra\nruntime: python\n")
    (proj / "Pulumi.dev.yaml").write_text(yaml.safe_dump(BASE))
    (proj / "Pulumi.local.yaml").write_text("config: {}\n")
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "correct horse")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(demo.BACKEND_ENV, raising=False)
    return proj


def run_demo(
    ws: FakeWorkspace,
    project: Path,
    *argv: str,
    find_cli: Callable[[], str | None] = lambda: "",
    stdin: io.StringIO | None = None,
) -> tuple[int, str, str]:
    args = build_parser().parse_args(["demo", *argv, "--project-dir", str(project)])
    out, err = io.StringIO(), io.StringIO()
    opened: list[WorkspaceOptions] = []

    def open_workspace(options: WorkspaceOptions) -> FakeWorkspace:
        opened.append(options)
        return ws

    code = demo.run(
        args,
        open_workspace=open_workspace,
        find_cli=find_cli,
        stdout=out,
        stderr=err,
        stdin=stdin or io.StringIO(),
        demo_kwargs={"now": lambda: NOW},
    )
    if opened:
        assert opened[0].project_dir == project.resolve()
    return code, out.getvalue(), err.getvalue()


def test_up_creates_a_tagged_stack_from_the_base_runs_up_with_the_policy_pack_and_verifies(
    project: Path,
) -> None:
    ws = FakeWorkspace()
    cluster = fake_kube.healthy_cluster()
    with fake_kube.serve(cluster) as url:
        kubeconfig_path = fake_kube.write_kubeconfig(project / "kc.yaml", url)
        ws.outputs = {"*": {}}

        def outputs_for(name: str) -> dict[str, Output]:
            return {
                "kubeconfig": Output(kubeconfig_path.read_text(), secret=True),
                "clusterId": Output("cc123"),
            }

        original_create = ws.create_stack

        def create(name: str) -> FakeStack:
            ws.outputs[name] = outputs_for(name)
            return original_create(name)

        ws.create_stack = create  # type: ignore[method-assign, assignment]
        code, out, err = run_demo(ws, project, "up", "--user", "Alice.B", "--timeout", "0")

    assert code == 0, err
    created = [c[1] for c in ws.calls if c[0] == "create_stack"]
    assert len(created) == 1
    name = created[0]
    assert re.fullmatch(r"demo-alice-b-202611301041-[0-9a-f]{4}", name)
    config = {**BASE["config"], "vke-gpu-dra:driver.registry.namespace": name}  # its own CR namespace
    assert ws.files[name] == StackFile(config=config, encryption_salt=SALT, secrets_provider=None)
    assert ws.tags[name] == {
        "vke-gpu-dra:demo": "true",
        "vke-gpu-dra:expires-at": "2026-11-30T14:41:07Z",
        "vke-gpu-dra:base-stack": "dev",
        "vke-gpu-dra:owner": "Alice.B",
    }
    up = next(c for c in ws.calls if c[0] == "up")
    assert up[2] == {
        "policy_packs": [str(project.resolve() / "policy")],
        "color": "never",
        "show_secrets": False,
    }
    # the tags are set before the (long) update starts, so a failed up still expires
    assert [c[0] for c in ws.calls].index("up") > max(i for i, c in enumerate(ws.calls) if c[0] == "set_tag")
    assert f"Updating ({name}):" in err
    assert "[PASS] sample pod log lists a GPU" in out
    assert f"vke-gpu-dra demo down {name}" in out
    assert fake_kube.TOKEN not in out + err


def test_up_hands_verify_a_private_kubeconfig_file_and_deletes_it(project: Path) -> None:
    ws = FakeWorkspace()
    seen: dict[str, Any] = {}

    def fake_verify(path: str, values: Mapping[str, Any]) -> int:
        seen.update(path=path, mode=stat.S_IMODE(os.stat(path).st_mode), text=Path(path).read_text())
        seen["values"] = dict(values)
        return 1

    d = demo_stacks.Demo(ws, project, io.StringIO(), io.StringIO(), now=lambda: NOW)
    ws.outputs = {"demo-bob-202611301041-0001": {"kubeconfig": Output("apiVersion: v1\n", secret=True)}}
    code = d.up(
        base_stack="dev",
        ttl=timedelta(hours=1),
        user="bob",
        suffix="0001",
        kubeconfig_output="kubeconfig",
        verify=fake_verify,
    )
    assert code == 1  # verify's exit code
    assert seen["mode"] == 0o600
    assert seen["text"] == "apiVersion: v1\n"
    assert seen["values"] == {"kubeconfig": "apiVersion: v1\n"}
    assert not os.path.exists(seen["path"])


def test_a_stack_configured_with_kubeconfig_path_is_verified_with_that_file(project: Path) -> None:
    (project / "Pulumi.local.yaml").write_text(
        "config:\n  vke-gpu-dra:target: existing-cluster\n  vke-gpu-dra:kubeconfigPath: ~/.kube/config\n"
    )
    ws = FakeWorkspace()
    seen: list[str] = []

    def verify(path: str, values: Mapping[str, Any]) -> int:
        seen.append(path)
        return 0

    d = demo_stacks.Demo(ws, project, io.StringIO(), io.StringIO(), now=lambda: NOW)
    code = d.up(
        base_stack="local",
        ttl=timedelta(hours=1),
        user="bob",
        suffix="0002",
        kubeconfig_output="kubeconfig",
        verify=verify,
    )
    assert code == 0
    assert seen == [os.path.expanduser("~/.kube/config")]


def test_verify_settings_come_from_flags_then_stack_outputs() -> None:
    values = {
        "driverNamespace": "dra-system",
        "sample": {"namespace": "gpu-samples", "deployment": "gpu-demo", "resourceClaimTemplate": "one-gpu"},
    }
    args = build_parser().parse_args(["demo", "up", "--skip", "sample-log"])
    settings = demo.settings_from_stack(args, values)
    assert (settings.namespace, settings.workload_namespace) == ("dra-system", "gpu-samples")
    assert (settings.sample_deployment, settings.sample_claim_template) == ("gpu-demo", "one-gpu")
    assert settings.skip == frozenset({"sample-log"})
    args = build_parser().parse_args(["demo", "up", "--namespace", "a", "--workload-namespace", "b"])
    settings = demo.settings_from_stack(args, values)
    assert (settings.namespace, settings.workload_namespace) == ("a", "b")
    defaults = demo.settings_from_stack(build_parser().parse_args(["demo", "up"]), {})
    assert (defaults.namespace, defaults.workload_namespace) == (facts.DRIVER_NAMESPACE, "default")
    assert (defaults.sample_deployment, defaults.sample_claim_template) == ("gpu-test", "single-gpu")


def test_up_without_the_kubeconfig_output_names_the_flag(project: Path) -> None:
    ws = FakeWorkspace()
    code, _, err = run_demo(ws, project, "up", "--user", "c", "--kubeconfig-output", "kc")
    assert code == 1
    assert "has no kubeconfig output 'kc' (outputs: none); pass --kubeconfig-output or --kubeconfig" in err


def test_failed_up_keeps_the_stack_and_says_how_to_remove_it(project: Path) -> None:
    ws = FakeWorkspace()
    original = ws.create_stack

    def create(name: str) -> FakeStack:
        ws.fail[("up", name)] = "error: policy violation: vke-dra-node-labels"
        return original(name)

    ws.create_stack = create  # type: ignore[method-assign, assignment]
    code, out, err = run_demo(ws, project, "up", "--user", "d", "--skip-verify")
    name = next(iter(ws.stacks))
    assert code == 1
    assert f"pulumi up of {name} failed: error: policy violation: vke-dra-node-labels" in err
    assert out.strip() == f"tear it down: vke-gpu-dra demo down {name}"
    assert ws.tags[name]["vke-gpu-dra:demo"] == "true"


def test_skip_verify_reads_no_outputs(project: Path) -> None:
    ws = FakeWorkspace()
    code, out, _ = run_demo(ws, project, "up", "--user", "e", "--skip-verify", "--ttl", "90m")
    name = next(iter(ws.stacks))
    assert code == 0
    assert ws.tags[name]["vke-gpu-dra:expires-at"] == "2026-11-30T12:11:07Z"
    assert out.startswith(f"demo stack {name} is up (expires 2026-11-30T12:11:07Z)")


def test_up_with_json_output_keeps_stdout_one_document(project: Path) -> None:
    ws = FakeWorkspace()
    with fake_kube.serve(fake_kube.healthy_cluster()) as url:
        kubeconfig = fake_kube.write_kubeconfig(project / "kc.yaml", url)
        code, out, err = run_demo(
            ws,
            project,
            "up",
            "--user",
            "f",
            "--kubeconfig",
            str(kubeconfig),
            "--timeout",
            "0",
            "--output",
            "json",
        )
    assert code == 0
    assert json.loads(out)["result"] == "pass"
    assert "is up (expires 2026-11-30T14:41:07Z); tear it down: vke-gpu-dra demo down demo-f-" in err


def test_unknown_base_stack_lists_the_stacks(project: Path) -> None:
    code, _, err = run_demo(FakeWorkspace(), project, "up", "--base-stack", "qa")
    assert code == 2
    assert (
        err == "vke-gpu-dra demo up: --base-stack qa: no Pulumi.qa.yaml in the project (stacks: dev, local)\n"
    )


def test_base_stack_with_kms_secrets_is_refused(project: Path) -> None:
    (project / "Pulumi.prod.yaml").write_text(
        "secretsprovider: awskms://alias/x\nencryptedkey: abc\nconfig:\n  p:k:\n    secure: v1:x\n"
    )
    code, _, err = run_demo(FakeWorkspace(), project, "up", "--base-stack", "prod")
    assert code == 2
    assert "--base-stack prod: its secrets use the awskms://alias/x secrets provider" in err


def test_down_destroys_and_removes_a_demo_stack(project: Path) -> None:
    ws = FakeWorkspace()
    ws.add("demo-a-1", {"vke-gpu-dra:demo": "true"})
    code, out, _ = run_demo(ws, project, "down", "demo-a-1", "--yes")
    assert code == 0
    assert [(c[0], c[1]) for c in ws.calls] == [("destroy", "demo-a-1"), ("remove_stack", "demo-a-1")]
    assert ws.calls[0][2] == {"color": "never", "show_secrets": False}
    assert out == "destroyed and removed demo-a-1\n"


def test_down_does_not_pass_on_the_advice_to_remove_the_stack_it_removes(project: Path) -> None:
    ws = FakeWorkspace()
    ws.add("demo-a-1", {"vke-gpu-dra:demo": "true"})
    code, out, err = run_demo(ws, project, "down", "demo-a-1", "--yes")
    assert code == 0
    assert "Destroying (demo-a-1)" in err and "5 deleted" in err  # the rest of the progress streams
    assert "stack rm" not in err + out and "history and configuration" not in err


@pytest.mark.parametrize(
    ("stacks", "message"),
    [
        ({"dev": {}}, "vke-gpu-dra demo down: dev: not a demo stack (no tag vke-gpu-dra:demo=true)"),
        ({}, "vke-gpu-dra demo down: no stack 'dev' in the demo backend"),
    ],
)
def test_down_refuses_what_is_not_a_demo_stack(project: Path, stacks: dict[str, Any], message: str) -> None:
    ws = FakeWorkspace()
    for name, tags in stacks.items():
        ws.add(name, tags)
    code, _, err = run_demo(ws, project, "down", "dev", "--yes")
    assert code == 2
    assert err.startswith(message)
    assert not [c for c in ws.calls if c[0] in ("destroy", "remove_stack")]


def test_failed_destroy_keeps_the_stack(project: Path) -> None:
    ws = FakeWorkspace()
    ws.add("demo-a-1", {"vke-gpu-dra:demo": "true"})
    ws.fail[("destroy", "demo-a-1")] = "error: deleting cluster: timeout"
    code, _, err = run_demo(ws, project, "down", "demo-a-1", "--yes")
    assert code == 1
    assert "destroying demo-a-1 failed: error: deleting cluster: timeout" in err
    assert "demo-a-1" in ws.stacks


def _fleet() -> FakeWorkspace:
    ws = FakeWorkspace()
    ws.add("dev", {})
    ws.add(
        "demo-old-1",
        {
            "vke-gpu-dra:demo": "true",
            "vke-gpu-dra:expires-at": "2026-11-30T09:00:00Z",
            "vke-gpu-dra:owner": "o",
        },
        resource_count=42,
    )
    ws.add("demo-new-1", {"vke-gpu-dra:demo": "true", "vke-gpu-dra:expires-at": "2026-11-30T13:11:00Z"})
    ws.add("demo-bad-1", {"vke-gpu-dra:demo": "true", "vke-gpu-dra:expires-at": "soon"})
    ws.add(
        "demo-busy-1",
        {"vke-gpu-dra:demo": "true", "vke-gpu-dra:expires-at": "2026-11-29T00:00:00Z"},
        update_in_progress=True,
    )
    return ws


def test_list_shows_demo_stacks_with_expiry(project: Path) -> None:
    code, out, _ = run_demo(_fleet(), project, "list")
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["NAME", "BASE", "OWNER", "EXPIRES", "AT", "STATE", "RESOURCES"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"demo-bad-1", "demo-busy-1", "demo-new-1", "demo-old-1"}
    assert "2026-11-30T09:00:00Z  expired" in rows["demo-old-1"] and rows["demo-old-1"].endswith("42")
    assert "2h29m left" in rows["demo-new-1"]
    assert "no valid expiry" in rows["demo-bad-1"]


def test_list_json(project: Path) -> None:
    code, out, _ = run_demo(_fleet(), project, "list", "--output", "json")
    doc = {d["name"]: d for d in json.loads(out)}
    assert code == 0
    assert doc["demo-old-1"] == {
        "name": "demo-old-1",
        "expiresAt": "2026-11-30T09:00:00Z",
        "expired": True,
        "baseStack": None,
        "owner": "o",
        "resources": 42,
    }
    assert doc["demo-new-1"]["expired"] is False


def test_list_needs_no_passphrase(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE")
    assert run_demo(FakeWorkspace(), project, "list")[0] == 0


def test_reap_destroys_only_expired_idle_demo_stacks(project: Path) -> None:
    ws = _fleet()
    code, out, err = run_demo(ws, project, "reap")
    assert code == 0
    assert [(c[0], c[1]) for c in ws.calls] == [("destroy", "demo-old-1"), ("remove_stack", "demo-old-1")]
    assert set(ws.stacks) == {"dev", "demo-new-1", "demo-bad-1", "demo-busy-1"}
    assert "demo-bad-1: no valid vke-gpu-dra:expires-at tag; left alone" in err
    assert "demo-busy-1: an update is in progress" in err
    assert out == "destroyed and removed demo-old-1\n"


def test_reap_dry_run_changes_nothing(project: Path) -> None:
    ws = _fleet()
    code, out, _ = run_demo(ws, project, "reap", "--dry-run")
    assert code == 0
    assert ws.calls == []
    assert out == "would destroy demo-old-1 (expired 2026-11-30T09:00:00Z)\n"


def test_reap_continues_after_a_failure_and_exits_1(project: Path) -> None:
    ws = _fleet()
    ws.add("demo-old-2", {"vke-gpu-dra:demo": "true", "vke-gpu-dra:expires-at": "2026-11-30T08:00:00Z"})
    ws.fail[("destroy", "demo-old-1")] = "error: boom"
    code, out, _ = run_demo(ws, project, "reap")
    assert code == 1
    assert "demo-old-1" in ws.stacks and "demo-old-2" not in ws.stacks
    assert out == "destroyed and removed demo-old-2\n"


@pytest.mark.parametrize("command", [["up"], ["down", "demo-x"], ["reap"]])
def test_missing_passphrase_is_one_clear_line(
    project: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE")
    ws = FakeWorkspace()
    code, out, err = run_demo(ws, project, *command)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"vke-gpu-dra demo {command[0]}: PULUMI_CONFIG_PASSPHRASE is not set")
    assert ws.calls == []


def test_project_dir_without_pulumi_yaml(project: Path, tmp_path: Path) -> None:
    args = build_parser().parse_args(["demo", "list", "--project-dir", str(tmp_path)])
    err = io.StringIO()
    code = demo.run(args, open_workspace=lambda o: FakeWorkspace(), find_cli=lambda: "", stderr=err)
    assert code == 2
    assert err.getvalue() == (
        f"vke-gpu-dra demo list: --project-dir {tmp_path}: no Pulumi.yaml there "
        "(run from the repository root or pass the project's directory)\n"
    )


def test_a_wrong_project_dir_is_named_before_a_missing_pulumi_cli(tmp_path: Path) -> None:
    args = build_parser().parse_args(["demo", "up", "--project-dir", str(tmp_path / "nope")])
    err = io.StringIO()
    code = demo.run(args, open_workspace=lambda o: FakeWorkspace(), find_cli=lambda: None, stderr=err)
    assert code == 2
    assert err.getvalue().startswith(
        f"vke-gpu-dra demo up: --project-dir {tmp_path / 'nope'}: no Pulumi.yaml"
    )


def test_missing_pulumi_cli_prints_one_line_with_the_install_command(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.chdir(project)
    assert main(["demo", "list"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "vke-gpu-dra demo list: the Pulumi CLI is not installed (no `pulumi` on PATH or in ~/.pulumi/bin); "
        "install it: curl -fsSL https://get.pulumi.com | sh\n"
    )


def test_real_workspace_without_the_cli_raises_the_same_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PulumiUnavailable, match=r"install it: curl -fsSL https://get.pulumi.com \| sh$"):
        AutomationWorkspace(WorkspaceOptions(tmp_path, "file:///x", None))


def test_file_backend_url_is_made_absolute_and_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert backend_url("file://~/.pulumi-demo") == f"file://{tmp_path}/.pulumi-demo"
    assert (tmp_path / ".pulumi-demo").is_dir()
    assert backend_url("s3://bucket/demos") == "s3://bucket/demos"


@pytest.mark.parametrize("value", ["4", "4x", "1m", "15d", "0h"])
def test_bad_ttl_is_a_usage_error(capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "up", "--ttl", value])
    assert exc.value.code == 2
    assert (
        f"argument --ttl: invalid value '{value}': expected a duration like 90m, 4h or 2d"
        in capsys.readouterr().err
    )


def test_demo_stack_files_are_git_ignored() -> None:
    root = Path(__file__).resolve().parents[2]
    assert "Pulumi.demo-*.yaml" in (root / ".gitignore").read_text().splitlines()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"config: [unclosed\n", "not valid YAML"),
        (b"config:\n  a: \x00\n", "not valid YAML (unacceptable character #x0000"),  # a ReaderError
        (b"\xff\xfe\x00binary", "not valid YAML ("),  # not UTF-8
        (b"- a\n- b\n", "is not a stack file"),
        (b"config: [a, b]\n", "is not a stack file"),
    ],
)
def test_malformed_base_stack_file_is_one_line(tmp_path: Path, content: bytes, problem: str) -> None:
    (tmp_path / "Pulumi.bad.yaml").write_bytes(content)
    with pytest.raises(demo_stacks.DemoError) as info:
        demo_stacks.read_stack_file(tmp_path, "bad")
    message = str(info.value)
    assert message.startswith("--base-stack bad: Pulumi.bad.yaml ") and problem in message, message
    assert "\n" not in message


class Terminal(io.StringIO):
    """Typed answers on a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("answer", "destroyed"), [("demo-a-1\n", True), ("y\n", False), ("", False)])
def test_down_asks_for_the_stack_name_on_a_terminal(project: Path, answer: str, destroyed: bool) -> None:
    ws = FakeWorkspace()
    ws.add("demo-a-1", {"vke-gpu-dra:demo": "true"})
    code, _, err = run_demo(ws, project, "down", "demo-a-1", stdin=Terminal(answer))
    assert "Destroy demo stack demo-a-1 and all its resources? Type the stack name to confirm: " in err
    assert ("demo-a-1" not in ws.stacks) is destroyed
    assert code == (0 if destroyed else 1)
    if not destroyed:
        assert err.endswith("kept demo-a-1: not confirmed\n")


def test_down_without_a_terminal_refuses_unless_yes(project: Path) -> None:
    ws = FakeWorkspace()
    ws.add("demo-a-1", {"vke-gpu-dra:demo": "true"})
    code, _, err = run_demo(ws, project, "down", "demo-a-1", stdin=io.StringIO("demo-a-1\n"))
    assert code == 2
    assert err == (
        "vke-gpu-dra demo down: not destroying demo-a-1 without confirmation: stdin is not a terminal; "
        "pass --yes\n"
    )
    assert "demo-a-1" in ws.stacks
    code, _, _ = run_demo(ws, project, "down", "demo-a-1", "-y")
    assert code == 0 and "demo-a-1" not in ws.stacks


def test_list_yaml_is_the_json_document(project: Path) -> None:
    import yaml

    _, as_json, _ = run_demo(_fleet(), project, "list", "-o", "json")
    code, as_yaml, _ = run_demo(_fleet(), project, "list", "-o", "yaml")
    assert code == 0 and yaml.safe_load(as_yaml) == json.loads(as_json)


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        # the dev stack creates its CR instance: a demo reuses it and pushes into its own namespace
        (
            {"vke-gpu-dra:driver.registry.name": "acme-cr", "vke-gpu-dra:driver.registry.create": True},
            {
                "vke-gpu-dra:driver.registry.name": "acme-cr",
                "vke-gpu-dra:driver.registry.create": False,
                "vke-gpu-dra:driver.registry.namespace": "demo-a-1",
            },
        ),
        # an existing instance: only the namespace is the demo's
        (
            {"vke-gpu-dra:driver.registry.name": "acme-cr"},
            {
                "vke-gpu-dra:driver.registry.name": "acme-cr",
                "vke-gpu-dra:driver.registry.namespace": "demo-a-1",
            },
        ),
        # a given image or a kind build: nothing to share
        ({"vke-gpu-dra:driver.image": "r.io/x/p:1"}, {"vke-gpu-dra:driver.image": "r.io/x/p:1"}),
        ({"vke-gpu-dra:driver.image.build": "kind:k"}, {"vke-gpu-dra:driver.image.build": "kind:k"}),
    ],
)
def test_a_demo_shares_the_base_stacks_cr_instance_in_a_namespace_of_its_own(
    base: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert demo_stacks.demo_config(base, "demo-a-1") == expected


def test_a_base_stack_is_read_as_the_pulumi_cli_reads_it(tmp_path: Path) -> None:
    # YAML 1.2, as Pulumi: `on` is the word 'on' (which the program refuses), not true; a demo copies the
    # base stack's values as they are instead of turning them into booleans.
    (tmp_path / "Pulumi.base.yaml").write_text(
        "config:\n  vke-gpu-dra:sample.enabled: on\n  vke-gpu-dra:production: false\n"
    )
    stack = demo_stacks.read_stack_file(tmp_path, "base")
    assert stack.config == {"vke-gpu-dra:sample.enabled": "on", "vke-gpu-dra:production": False}
