"""scripts/up and scripts/down from a clone, against a stand-in Pulumi CLI that records its commands: where
the real CLI cannot go here (scripts/setup run from scratch, scripts/kind-up without Docker, `pulumi up` and
`destroy` of a VKE stack) and for the order of the commands. The stand-in answers as the real CLI 3.274.1
does; the engine tier runs the scripts on the real one (tests/engine/test_up_script.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.tools.standin import Project

PASSPHRASE = "correct horse battery"
ACCESS_KEY = "AKLTexampleaccesskey"
SECRET_KEY = "c2VjcmV0LWtleS1leGFtcGxl"
UP_DEV = ["up", "--stack", "dev", "--policy-pack", "policy"]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project.make(tmp_path)


def _up_dev_with_keys(project: Project, **env: str) -> subprocess.CompletedProcess[str]:
    """`scripts/up dev --yes` with the passphrase and the Volcengine keys in the environment."""
    env = {"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, **env}
    return project.run(
        "up", "dev", "--yes", VOLCENGINE_ACCESS_KEY=ACCESS_KEY, VOLCENGINE_SECRET_KEY=SECRET_KEY, **env
    )


def test_a_fresh_clone_is_set_up_logged_in_to_the_file_backend_and_deployed(tmp_path: Path) -> None:
    project = Project.make(tmp_path, set_up=False)
    proc = _up_dev_with_keys(project)
    assert proc.returncode == 2, proc.stderr  # dev still lacks its CR instance name
    tools = [entry["tool"] for entry in project.log()]
    assert tools[0] == "setup"
    state = project.home / ".pulumi-state"
    assert state.is_dir()
    assert (
        f"up: not logged in to a Pulumi backend: using the local file backend file://{state} "
        f"(pulumi login file://{state})\n"
    ) in proc.stdout
    assert project.pulumi_calls()[:5] == [
        ["whoami", "--verbose"],
        ["login", f"file://{state}"],
        ["plugin", "ls", "--json"],
        ["stack", "ls", "--json"],
        ["stack", "init", "dev", "--secrets-provider", "passphrase"],
    ]
    assert "created the stack dev" in proc.stdout
    assert "driver.registry.name" in proc.stderr
    # The value set, the next run deploys and does not set up again.
    stack_file = project.root / "Pulumi.dev.yaml"
    data = yaml.safe_load(stack_file.read_text())
    data["config"]["vke-gpu-dra:driver.registry.name"] = "vke-gpu-dra-cr"
    stack_file.write_text(yaml.safe_dump(data))
    again = _up_dev_with_keys(project)
    assert again.returncode == 0, again.stderr
    assert [entry["tool"] for entry in project.log()].count("setup") == 1
    calls = project.pulumi_calls()
    assert ["stack", "select", "dev"] in calls
    assert calls[-1] == [*UP_DEV, "--yes"]
    assert project.log()[-1]["passphrase"] is True
    for secret in (PASSPHRASE, ACCESS_KEY, SECRET_KEY):
        assert secret not in proc.stdout + proc.stderr + again.stdout + again.stderr


def test_a_stale_setup_runs_again(project: Project) -> None:
    (project.root / "constraints.txt").write_text("pulumi==3.999.0\n")
    proc = project.run("up", "local", "--yes", PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)
    assert proc.returncode == 0, proc.stderr
    assert project.log()[0]["tool"] == "setup"
    assert "constraints.txt changed since scripts/setup ran" in proc.stdout


def test_uses_the_backend_the_cli_is_logged_in_to(project: Project) -> None:
    project.state(url="s3://team-state/vke-gpu-dra", stacks=("dev",))
    (project.root / "Pulumi.dev.yaml").write_text(
        (project.root / "Pulumi.dev.yaml")
        .read_text()
        .replace(
            '  vke-gpu-dra:driver.registry.create: "true"',
            '  vke-gpu-dra:driver.registry.create: "true"\n  vke-gpu-dra:driver.registry.name: team-cr',
        )
    )
    proc = _up_dev_with_keys(project)
    assert proc.returncode == 0, proc.stderr
    assert "using the Pulumi backend you are logged in to: s3://team-state/vke-gpu-dra" in proc.stdout
    assert project.pulumi_calls() == [
        ["whoami", "--verbose"],
        ["plugin", "ls", "--json"],
        ["stack", "ls", "--json"],
        ["stack", "select", "dev"],
        [*UP_DEV, "--yes"],
    ]
    assert "selected the stack dev" in proc.stdout
    assert not (project.home / ".pulumi-state").exists()


def test_without_a_terminal_one_error_lists_every_missing_setting(project: Project) -> None:
    proc = project.run("up", "dev")
    assert proc.returncode == 2
    err = proc.stderr
    assert err.count("up: ") == 1 and "lacks 4 setting(s)" in err
    assert "export PULUMI_CONFIG_PASSPHRASE=<passphrase>" in err
    assert "pulumi config set --stack dev driver.registry.name <value>" in err
    assert "name of the Volcengine CR instance the image is pushed to" in err  # the key table's words
    set_access_key = "pulumi config set --stack dev --secret volcengine:accessKey (asks for the value)"
    assert f"export VOLCENGINE_ACCESS_KEY=<value>, or: {set_access_key}" in err
    assert "export VOLCENGINE_SECRET_KEY=<value>" in err
    assert "the stack does not exist yet" in err
    calls = project.pulumi_calls()
    assert calls == [
        ["whoami", "--verbose"],
        ["login", calls[1][1]],
        ["plugin", "ls", "--json"],
        ["stack", "ls", "--json"],
    ]
    pulumi = [entry for entry in project.log() if entry["tool"] == "pulumi"]
    assert all(entry["args"][0] == "--non-interactive" for entry in pulumi)


def test_on_a_terminal_it_asks_for_the_passphrase_and_each_missing_key(project: Project) -> None:
    term = project.terminal("up", "dev")
    term.expect("Passphrase for the stack's secrets: ")
    term.send(PASSPHRASE)
    term.expect("Repeat the passphrase: ")
    term.send(PASSPHRASE)
    term.expect("created the stack dev")
    term.expect("name of the Volcengine CR instance")  # the key's description, then its prompt
    term.expect("driver.registry.name = ")
    term.send("vke-gpu-dra-cr")
    term.expect("volcengine:accessKey = ")
    term.send(ACCESS_KEY)
    term.expect("volcengine:secretKey = ")
    term.send(SECRET_KEY)
    term.expect("stand-in pulumi up done")
    assert term.wait() == 0
    assert (project.fake / "passphrase").read_text() == PASSPHRASE
    assert project.secrets() == {"volcengine:accessKey": ACCESS_KEY, "volcengine:secretKey": SECRET_KEY}
    calls = project.pulumi_calls()
    assert ["config", "set", "--stack", "dev", "--", "driver.registry.name", "vke-gpu-dra-cr"] in calls
    assert ["config", "set", "--stack", "dev", "--secret", "--", "volcengine:accessKey"] in calls
    assert calls[-1] == UP_DEV  # pulumi up asks its own confirmation on the terminal
    for secret in (PASSPHRASE, ACCESS_KEY, SECRET_KEY):
        assert secret not in term.output
        assert all(secret not in arg for call in calls for arg in call)
    config = yaml.safe_load((project.root / "Pulumi.dev.yaml").read_text())["config"]
    assert config["volcengine:accessKey"] == {"secure": "v1:ZW5jcnlwdGVk"}


def test_local_makes_the_kind_cluster_first(project: Project) -> None:
    proc = project.run("up", "local", "--yes", PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)
    assert proc.returncode == 0, proc.stderr
    log = project.log()
    assert log[0] == {"tool": "kind-up", "args": ["KIND_CLUSTER=vke-gpu-dra"]}
    assert project.pulumi_calls()[-1] == ["up", "--stack", "local", "--policy-pack", "policy", "--yes"]
    assert "lacks" not in proc.stderr  # local needs no cloud key


def test_without_a_terminal_up_needs_yes_to_deploy(project: Project) -> None:
    proc = project.run("up", "local", PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)
    assert proc.returncode == 2
    assert "scripts/up local --yes" in proc.stderr
    assert not any(call[0] == "up" for call in project.pulumi_calls())


def test_an_unknown_stack_is_one_error_naming_the_stacks(project: Project) -> None:
    proc = project.run("up", "staging")
    assert proc.returncode == 2
    assert "unknown stack 'staging'" in proc.stderr and "dev, local, prod" in proc.stderr
    assert project.log() == []
    assert project.run("down", "staging").returncode == 2


def test_down_refuses_without_a_terminal_and_without_yes(project: Project) -> None:
    project.state(url="file:///state", stacks=("dev",))
    proc = project.run("down", "dev", PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)
    assert proc.returncode == 2
    assert "scripts/down dev --yes" in proc.stderr
    assert project.pulumi_calls() == []


def test_down_without_a_terminal_is_refused_before_the_set_up(tmp_path: Path) -> None:
    project = Project.make(tmp_path, set_up=False)
    proc = project.run("down", "dev", PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)
    assert proc.returncode == 2
    assert proc.stderr == (
        "down: refusing to destroy stack dev without a terminal to confirm: scripts/down dev --yes\n"
    )
    assert project.log() == []  # neither scripts/setup nor pulumi ran


def test_down_with_yes_destroys(project: Project) -> None:
    project.state(url="file:///state", stacks=("dev",))
    proc = project.run("down", "dev", "--yes", PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)
    assert proc.returncode == 0, proc.stderr
    assert project.pulumi_calls()[-1] == ["destroy", "--stack", "dev", "--yes"]


@pytest.mark.parametrize(("answer", "destroyed", "code"), [("local", True, 0), ("no", False, 1)])
def test_down_on_a_terminal_destroys_once_confirmed(
    project: Project, answer: str, destroyed: bool, code: int
) -> None:
    project.state(url="file:///state", stacks=("local",))
    term = project.terminal("down", "local", PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)
    term.expect("Type the stack name: ")
    term.send(answer)
    assert term.wait() == code
    calls = project.pulumi_calls()
    assert (["destroy", "--stack", "local", "--yes"] in calls) is destroyed
    if destroyed:
        assert "kind delete cluster --name vke-gpu-dra" in term.output
    else:
        assert "nothing destroyed" in term.output


def test_help_runs_nothing(project: Project) -> None:
    for script in ("up", "down"):
        proc = project.run(script, "--help")
        assert proc.returncode == 0
        assert proc.stdout.count(f"usage: scripts/{script} [-h] [--yes] stack") == 1
    assert project.log() == []


def test_a_failing_login_is_reported_not_replaced_by_the_file_backend(project: Project) -> None:
    project.state(url="https://api.pulumi.com")
    error = "getting user info: [401] Unauthorized: invalid access token"
    proc = project.run("up", "local", "--yes", PULUMI_CONFIG_PASSPHRASE=PASSPHRASE, FAKE_WHOAMI_ERROR=error)
    assert proc.returncode == 1
    credentials = project.home / ".pulumi" / "credentials.json"
    assert proc.stderr == (
        "up: pulumi whoami failed for the backend you are logged in to, "
        f"https://api.pulumi.com ({credentials}): error: {error}\n"
    )
    assert project.pulumi_calls()[-1] == ["whoami", "--verbose"]
    assert not (project.home / ".pulumi-state").exists()


def test_a_backend_named_by_the_environment_counts_as_logged_in(project: Project) -> None:
    error = "read s3://bucket: no credentials"
    proc = project.run("up", "local", "--yes", PULUMI_BACKEND_URL="s3://bucket", FAKE_WHOAMI_ERROR=error)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"up: pulumi whoami failed for the backend you are logged in to, PULUMI_BACKEND_URL=s3://bucket: "
        f"error: {error}\n"
    )


def test_a_plugin_the_cli_lacks_is_installed_before_pulumi_up(project: Project) -> None:
    project.state(url="file:///state", stacks=("local",), plugins=(("kubernetes", "4.25.0"),))
    proc = project.run("up", "local", "--yes", PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)
    assert proc.returncode == 0, proc.stderr
    calls = project.pulumi_calls()
    assert calls[calls.index(["plugin", "ls", "--json"]) + 1 :][:2] == [
        ["plugin", "install", "resource", "docker-build", "0.0.22"],
        ["plugin", "install", "resource", "command", "1.2.1"],
    ]
    assert calls[-1] == ["up", "--stack", "local", "--policy-pack", "policy", "--yes"]
    assert "up: installing the Pulumi plugin command 1.2.1: pulumi plugin install resource command 1.2.1" in (
        proc.stdout
    )


def test_a_plugin_that_cannot_be_downloaded_is_one_line_with_the_command_before_pulumi_up(
    project: Project,
) -> None:
    plugins = (("kubernetes", "4.25.0"), ("docker-build", "0.0.22"))
    project.state(url="file:///state", stacks=("dev",), plugins=plugins)
    proc = _up_dev_with_keys(project, FAKE_OFFLINE="1")
    assert proc.returncode == 1
    [line] = proc.stderr.splitlines()
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    archive = f"pulumi-resource-volcengine-v0.0.47-linux-{machine}.tar.gz"
    assert line == (
        "up: the Pulumi plugin volcengine 0.0.47 is not installed and could not be downloaded "
        "([resource plugin volcengine-0.0.47] downloading from github://api.github.com/volcengine: failed to "
        "download plugin: volcengine-0.0.47: failed all 5 attempts): "
        f"download {archive} from https://github.com/volcengine/pulumi-volcengine/releases/tag/v0.0.47 "
        f"and run: pulumi plugin install resource volcengine 0.0.47 --file <path of {archive}>"
    )
    assert not any(call[0] == "up" for call in project.pulumi_calls())


def test_a_broken_stack_file_is_one_error(project: Project) -> None:
    (project.root / "Pulumi.dev.yaml").write_text("config:\n  vke-gpu-dra:sample.enabled: !!binary aGk=\n")
    proc = project.run("up", "dev", PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)
    assert proc.returncode == 2
    assert "sample.enabled" in proc.stderr and "Traceback" not in proc.stderr


def test_down_of_a_stack_the_backend_lacks_destroys_nothing(project: Project) -> None:
    project.state(url="file:///state", stacks=())
    proc = project.run("down", "dev", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert "down: stack dev does not exist in file:///state: nothing to destroy" in proc.stdout
    assert not any(call[0] == "destroy" for call in project.pulumi_calls())
