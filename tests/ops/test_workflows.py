"""The GitHub workflows: they parse, use the stacks, paths and policy pack that exist, echo no secret."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from vke_gpu_dra_ops import demo

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
SETUP_ACTION = ROOT / ".github" / "actions" / "setup" / "action.yml"
PULUMI_ACTION = re.compile(r"^pulumi/actions@[0-9a-f]{40}$")
#: A remote action pinned by full commit SHA, its release tag in a comment (Renovate keeps both).
PINNED_USES = re.compile(
    r"^\s*(?:- )?uses: (?P<action>[\w.-]+/[\w./-]+)@(?P<ref>\S+)(?P<comment>\s+# v\d+\.\d+\.\d+)?\s*$"
)
#: Stacks CI does not preview or deploy: `local` targets a developer's own cluster.
LOCAL_ONLY = {"local"}


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), path
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def stack_files() -> set[str]:
    names = {p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in ROOT.glob("Pulumi.*.yaml")}
    return {n for n in names if not n.startswith("demo-")}


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job.get("steps", []))


def pulumi_steps(workflow: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    for job_name, job in workflow["jobs"].items():
        for step in steps(job):
            if PULUMI_ACTION.match(step.get("uses", "")):
                yield job_name, job, step


def all_files() -> list[Path]:
    return [*sorted(WORKFLOWS.glob("*.yaml")), SETUP_ACTION]


def test_every_workflow_parses_and_the_expected_ones_exist() -> None:
    names = {p.name for p in WORKFLOWS.glob("*.y*ml")}
    assert {"pr.yaml", "deploy.yaml", "driver-image.yaml"} <= names
    for path in all_files():
        data = load(path)
        assert "jobs" in data or data.get("runs", {}).get("using") == "composite", path


def test_stack_files_exist_for_the_ci_stacks() -> None:
    assert {"dev", "prod"} <= stack_files()


def test_pr_runs_setup_then_tests() -> None:
    pr = load(WORKFLOWS / "pr.yaml")
    assert "pull_request" in pr["on"]
    test = pr["jobs"]["test"]
    uses = [s.get("uses") for s in steps(test)]
    runs = [s.get("run", "").strip() for s in steps(test)]
    assert uses.index("./.github/actions/setup") < runs.index("scripts/test")
    setup_runs = [s.get("run", "").strip() for s in load(SETUP_ACTION)["runs"]["steps"]]
    assert "scripts/setup" in setup_runs
    for script in ("scripts/setup", "scripts/test"):
        assert os.access(ROOT / script, os.X_OK), script


def test_setup_creates_the_virtualenvs_pulumi_uses() -> None:
    program = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert program["runtime"]["options"]["virtualenv"] == ".venv"  # what scripts/setup creates
    assert "python3 -m venv .venv" in (ROOT / "scripts" / "setup").read_text()
    pack = yaml.safe_load((ROOT / "policy" / "PulumiPolicy.yaml").read_text())
    venv = pack["runtime"]["options"]["virtualenv"]
    setup = (ROOT / "scripts" / "setup").read_text()
    assert "cd policy" in setup and f"python3 -m venv {venv}" in setup
    assert "-r requirements.txt" in setup and (ROOT / "policy" / "requirements.txt").is_file()


def test_pr_previews_every_cloud_stack_with_the_policy_pack_and_comments() -> None:
    pr = load(WORKFLOWS / "pr.yaml")
    job = pr["jobs"]["preview"]
    matrix = set(job["strategy"]["matrix"]["stack"])
    assert matrix == stack_files() - LOCAL_ONLY
    assert "local" in (WORKFLOWS / "pr.yaml").read_text().split("name:")[0]  # the exclusion is explained
    assert job["permissions"]["pull-requests"] == "write"
    assert "matrix.stack" in job["concurrency"]["group"]
    (_, _, step), *rest = list(pulumi_steps(pr))
    assert rest == []
    uses = [s.get("uses", "") for s in steps(job)]
    assert uses.index("./.github/actions/setup") < uses.index(step["uses"])  # venvs before pulumi/actions
    w = step["with"]
    assert w["command"] == "preview"
    assert w["stack-name"] == "${{ matrix.stack }}"
    assert w["comment-on-pr"] is True
    assert w["policyPacks"] == "policy" and (ROOT / "policy" / "PulumiPolicy.yaml").is_file()
    assert w["cloud-url"].startswith("${{ secrets.")
    assert step["env"]["PULUMI_CONFIG_PASSPHRASE"] == "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"
    assert {"VOLCENGINE_ACCESS_KEY", "VOLCENGINE_SECRET_KEY"} <= set(step["env"])


def test_deploy_updates_dev_on_push_and_prod_by_approved_dispatch() -> None:
    deploy = load(WORKFLOWS / "deploy.yaml")
    assert deploy["on"]["push"]["branches"] == ["main"]
    assert "workflow_dispatch" in deploy["on"]
    ups = {step["with"]["stack-name"]: (job_name, job, step) for job_name, job, step in pulumi_steps(deploy)}
    assert set(ups) == stack_files() - LOCAL_ONLY
    for stack, (_, job, step) in ups.items():
        assert step["with"]["command"] == "up"
        assert step["with"]["policyPacks"] == "policy"
        assert job["concurrency"] == {"group": f"pulumi-{stack}", "cancel-in-progress": False}
        assert any("vke-gpu-dra verify --kubeconfig" in s.get("run", "") for s in steps(job))
    _, dev, _ = ups["dev"]
    _, prod, _ = ups["prod"]
    assert "github.event_name == 'push'" in dev["if"]
    assert prod["if"] == "github.event_name == 'workflow_dispatch' && inputs.stack == 'prod'"
    assert prod["environment"] == "production"


def test_driver_image_builds_the_dockerfile_with_sha_and_app_version_tags() -> None:
    wf = load(WORKFLOWS / "driver-image.yaml")
    job = wf["jobs"]["image"]
    build = next(s for s in steps(job) if s.get("uses", "").startswith("docker/build-push-action@"))
    w = build["with"]
    assert (w["context"], w["file"]) == ("driver", "driver/Dockerfile")
    assert (ROOT / w["file"]).is_file()
    assert "project=." in w["build-contexts"]
    tags = w["tags"]
    assert "${{ github.sha }}" in tags and "${{ steps.version.outputs.app-version }}" in tags
    assert "vars.DRIVER_IMAGE_REGISTRY" in job["env"]["IMAGE"]
    version = next(s for s in steps(job) if s.get("id") == "version")
    assert "driver/chart/Chart.yaml" in version["run"]
    assert re.search(r'^appVersion: *"?[^"\s]+"?\s*$', (ROOT / "driver/chart/Chart.yaml").read_text(), re.M)


def test_expired_demos_are_reaped_on_a_schedule() -> None:
    wf = load(WORKFLOWS / "demo-reap.yaml")
    assert wf["on"]["schedule"][0]["cron"]
    job = wf["jobs"]["reap"]
    script = next(s["run"] for s in steps(job) if "vke-gpu-dra demo reap" in s.get("run", ""))
    assert "--dry-run" in script
    assert job["env"][demo.BACKEND_ENV] == "${{ secrets.DEMO_BACKEND_URL }}"  # the variable demo reads
    assert [s for s in steps(job) if PULUMI_ACTION.match(s.get("uses", ""))]  # installs the CLI


# --------------------------------------------------------------------------- secrets


def secret_env_names(*scopes: dict[str, Any]) -> set[str]:
    return {k for scope in scopes for k, v in (scope.get("env") or {}).items() if "secrets." in str(v)}


def secret_leaks(data: dict[str, Any]) -> list[str]:
    """`run:` steps that put a secret into the script or print a secret-valued variable."""
    leaks = []
    jobs = data.get("jobs") or {"composite": {"steps": data.get("runs", {}).get("steps", [])}}
    for job_name, job in jobs.items():
        for step in steps(job):
            script = step.get("run")
            if script is None:
                continue
            where = f"{job_name}/{step.get('name', script.splitlines()[0])}"
            if "secrets." in script:
                leaks.append(f"{where}: ${{{{ secrets.* }}}} expanded into the script")
            if re.search(r"^\s*set\s+-[a-z]*x", script, re.M):
                leaks.append(f"{where}: set -x traces variables")
            for name in secret_env_names(data, job, step):
                if re.search(rf"\b(echo|printf|cat\s*<<)\b[^\n]*\${{?{name}\b", script):
                    leaks.append(f"{where}: prints ${name}")
    return leaks


@pytest.mark.parametrize("path", all_files(), ids=lambda p: p.name)
def test_no_run_step_echoes_a_secret(path: Path) -> None:
    assert secret_leaks(load(path)) == []


def test_the_secret_check_catches_leaks() -> None:
    bad = {
        "env": {"TOKEN": "${{ secrets.TOKEN }}"},
        "jobs": {
            "j": {
                "steps": [
                    {"name": "a", "run": "echo ${{ secrets.X }}"},
                    {"name": "b", "run": 'echo "token: $TOKEN"'},
                    {"name": "c", "run": "set -eux\nmake"},
                    {"name": "d", "env": {"K": "${{ secrets.K }}"}, "run": "printf '%s' \"${K}\""},
                    {"name": "ok", "run": 'test -n "$TOKEN" && echo configured'},
                ]
            }
        },
    }
    leaks = secret_leaks(bad)
    assert [leak.split(":")[0] for leak in leaks] == ["j/a", "j/b", "j/c", "j/d"]


def _uses_lines(path: Path) -> list[re.Match[str]]:
    found = [PINNED_USES.match(line) for line in path.read_text().splitlines() if "uses:" in line]
    return [m for m in found if m is not None]


@pytest.mark.parametrize("path", all_files(), ids=lambda p: p.name)
def test_remote_actions_are_pinned_by_commit_sha_with_the_tag_as_comment(path: Path) -> None:
    lines = [line for line in path.read_text().splitlines() if "uses:" in line and "./" not in line]
    matches = _uses_lines(path)
    assert len(matches) == len(lines), lines  # every remote `uses:` line has the pinned form
    for m in matches:
        assert re.fullmatch(r"[0-9a-f]{40}", m["ref"]), f"{path.name}: {m['action']}@{m['ref']} is not a SHA"
        assert m["comment"], f"{path.name}: {m['action']} has no tag comment"


def test_the_pin_check_catches_a_tag_reference(tmp_path: Path) -> None:
    wf = tmp_path / "wf.yaml"
    wf.write_text("jobs:\n  a:\n    steps:\n      - uses: actions/checkout@v4\n")
    (m,) = _uses_lines(wf)
    assert not re.fullmatch(r"[0-9a-f]{40}", m["ref"])


def test_every_checkout_keeps_no_credentials() -> None:
    checkouts = [
        (path.name, step)
        for path in all_files()
        for job in load(path).get("jobs", {}).values()
        for step in steps(job)
        if step.get("uses", "").startswith("actions/checkout@")
    ]
    assert len(checkouts) >= 5
    for name, step in checkouts:
        assert (step.get("with") or {}).get("persist-credentials") is False, name


def test_pr_preview_of_each_stack_uses_its_deploy_environment() -> None:
    preview = load(WORKFLOWS / "pr.yaml")["jobs"]["preview"]
    deploy = load(WORKFLOWS / "deploy.yaml")["jobs"]
    expected = {stack: deploy[stack]["environment"] for stack in ("dev", "prod")}
    assert expected == {"dev": "development", "prod": "production"}
    env = preview["environment"]
    # GitHub evaluates `a && 'x' || 'y'`; check both matrix values against deploy.yaml's environments.
    m = re.fullmatch(r"\$\{\{ matrix\.stack == '(\w+)' && '(\w+)' \|\| '(\w+)' \}\}", env)
    assert m, env
    chosen = {stack: m[2] if stack == m[1] else m[3] for stack in preview["strategy"]["matrix"]["stack"]}
    assert chosen == expected


def test_dependency_updates_cover_python_actions_and_the_dockerfile() -> None:
    import json

    renovate = json.loads((ROOT / ".github" / "renovate.json").read_text())
    managers = set(renovate["enabledManagers"])
    assert {"pip_requirements", "github-actions", "custom.regex"} <= managers
    assert "helpers:pinGitHubActionDigests" in renovate["extends"]
    (docker,) = [m for m in renovate["customManagers"] if m["datasourceTemplate"] == "docker"]
    dockerfile = (ROOT / "driver" / "Dockerfile").read_text()
    pattern = re.sub(r"\(\?<(?=[A-Za-z])", "(?P<", docker["matchStrings"][0])  # JS named groups
    match = re.search(pattern, dockerfile)
    assert match and match["depName"] == "python", "the base image ARG is not matched"
    assert "constraints" in renovate["pip_requirements"]["managerFilePatterns"][0]


def test_license_file_is_the_declared_apache_2() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    for declared in ("driver/pyproject.toml", "ops/pyproject.toml"):
        assert 'license = "Apache-2.0"' in (ROOT / declared).read_text(), declared
    assert 'licenses="Apache-2.0"' in (ROOT / "driver" / "Dockerfile").read_text()
