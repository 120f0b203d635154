"""The real `AutomationWorkspace` over pulumi.automation, driven against a stand-in `pulumi` executable.

The stand-in records each command line (and the backend URL it was given) and answers the few
commands the demo code runs, so the adapter's use of the Automation API is checked without the CLI.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from vke_gpu_dra_ops.pulumi_workspace import (
    AutomationWorkspace,
    PulumiError,
    StackFile,
    StackNotFound,
    WorkspaceOptions,
    find_pulumi_cli,
    summarize,
)

FAKE_CLI = """#!{python}
import json, os, sys
args = [a for a in sys.argv[1:] if a != "--non-interactive"]
with open(os.environ["FAKE_PULUMI_LOG"], "a") as log:
    log.write(json.dumps({{"args": args, "backend": os.environ.get("PULUMI_BACKEND_URL")}}) + "\\n")
if args[:1] == ["version"]:
    print("v3.272.0")
elif args[:2] == ["stack", "ls"]:
    print(os.environ.get("FAKE_PULUMI_STACKS", "[]"))
elif args[:3] == ["stack", "tag", "ls"]:
    print(json.dumps({{"vke-gpu-dra:demo": "true"}}))
elif args[:2] == ["stack", "select"] and "missing" in args:
    sys.stderr.write("error: no stack named 'missing' found\\n")
    sys.exit(255)
elif args[:2] == ["stack", "rm"]:
    sys.stderr.write("warning: deprecated flag\\nerror: stack 'demo-x' still has resources\\n")
    sys.exit(255)
"""


@pytest.fixture
def fake_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cli = bin_dir / "pulumi"
    cli.write_text(FAKE_CLI.format(python=sys.executable))
    cli.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}")
    monkeypatch.setenv("FAKE_PULUMI_LOG", str(log))
    return log


def calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
def workspace(tmp_path: Path, fake_cli: Path) -> AutomationWorkspace:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: vke-gpu-dra\nruntime: python\n")
    assert find_pulumi_cli() == ""
    return AutomationWorkspace(WorkspaceOptions(project, "file:///state/demo", None))


def test_stack_file_keeps_the_base_config_and_salt(workspace: AutomationWorkspace, tmp_path: Path) -> None:
    config = {"p:a": "1", "p:list": ["x", "y"], "p:secret": {"secure": "v1:AAA"}}
    workspace.write_stack_file("demo-x", StackFile(config=config, encryption_salt="v1:salt"))
    written = yaml.safe_load((tmp_path / "project" / "Pulumi.demo-x.yaml").read_text())
    assert written == {"encryptionsalt": "v1:salt", "config": config}


def test_commands_use_the_passphrase_provider_and_the_demo_backend(
    workspace: AutomationWorkspace, fake_cli: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "FAKE_PULUMI_STACKS", json.dumps([{"name": "demo-x", "current": False, "resourceCount": 3}])
    )
    stack = workspace.create_stack("demo-x")
    workspace.set_tag("demo-x", "vke-gpu-dra:demo", "true")
    stacks = workspace.list_stacks()
    tags = workspace.list_tags("demo-x")
    recorded = [c for c in calls(fake_cli) if c["args"] != ["version"]]
    assert stack.name == "demo-x"
    assert recorded[0]["args"] == ["stack", "init", "demo-x", "--secrets-provider", "passphrase"]
    assert ["stack", "tag", "set", "vke-gpu-dra:demo", "true", "--stack", "demo-x"] in [
        c["args"] for c in recorded
    ]
    assert {c["backend"] for c in recorded} == {"file:///state/demo"}
    assert [(s.name, s.resource_count) for s in stacks] == [("demo-x", 3)]
    assert tags == {"vke-gpu-dra:demo": "true"}


def test_cli_errors_become_one_line_pulumi_errors(workspace: AutomationWorkspace) -> None:
    with pytest.raises(StackNotFound, match="no stack named 'missing' found"):
        workspace.select_stack("missing")
    with pytest.raises(PulumiError) as exc:
        workspace.remove_stack("demo-x")
    assert str(exc.value) == "error: stack 'demo-x' still has resources"


def test_summarize_keeps_error_lines_or_the_last_line() -> None:
    text = "code: 255\n stdout: Previewing\n stderr: error: one\nerror: two\n"
    assert summarize(text) == "stderr: error: one | error: two"
    assert summarize("a\nb\n") == "b"
    assert summarize("") == "no output"
