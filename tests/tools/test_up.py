"""The pure parts of tools/up.py: what a stack lacks, when the set-up is stale, what the CLI answers."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from vke_gpu_dra_core import pulumi_types

from tools import up

ROOT = Path(__file__).resolve().parents[2]


def stack_config(stack: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    return dict(data["config"])


def names(missing: list[up.Missing]) -> list[str]:
    return [item.name for item in missing]


def test_dev_lacks_its_cr_instance_and_the_credentials() -> None:
    missing = up.missing_keys(stack_config("dev"), {})
    assert names(missing) == ["driver.registry.name", "volcengine:accessKey", "volcengine:secretKey"]
    registry, access, _ = missing
    assert registry.description.startswith("build=cr: name of the Volcengine CR instance")
    assert not registry.secret and access.secret and access.env == ("VOLCENGINE_ACCESS_KEY",)


def test_credentials_count_from_the_environment_or_as_secrets() -> None:
    config = {**stack_config("dev"), "driver.registry.name": "vke-gpu-dra-cr"}
    env = {"VOLCENGINE_ACCESS_KEY": "ak", "VOLCENGINE_SECRET_KEY": "sk"}
    assert up.missing_keys(config, env) == []
    secrets = {"volcengine:accessKey": {"secure": "v1:x"}, "volcengine:secretKey": {"secure": "v1:y"}}
    assert up.missing_keys({**config, **secrets}, {}) == []


def test_the_region_may_come_from_its_environment_variable() -> None:
    config = {k: v for k, v in stack_config("dev").items() if k != "volcengine:region"}
    config["driver.registry.name"] = "vke-gpu-dra-cr"
    env = {"VOLCENGINE_ACCESS_KEY": "ak", "VOLCENGINE_SECRET_KEY": "sk"}
    (region,) = up.missing_keys(config, env)
    assert region.name == "volcengine:region" and region.env == ("VOLCENGINE_REGION",)
    assert up.missing_keys(config, {**env, "VOLCENGINE_REGION": "cn-beijing"}) == []


def test_a_stack_with_its_own_image_needs_no_registry() -> None:
    config = {**stack_config("prod"), "driver.image": "cr.example.com/dra/plugin:1.0"}
    assert "driver.registry.name" not in names(up.missing_keys(config, {}))


def test_local_lacks_nothing() -> None:
    assert up.missing_keys(stack_config("local"), {}) == []


def test_the_message_lists_every_missing_setting_with_its_command() -> None:
    missing = [up.PASSPHRASE, *up.missing_keys(stack_config("dev"), {})]
    message = up.missing_message("dev", missing, exists=True)
    assert message.splitlines() == [
        "stack dev lacks 4 setting(s) to deploy; set them and run scripts/up dev again (on a terminal it "
        "asks for them):",
        f"  - PULUMI_CONFIG_PASSPHRASE: {up.PASSPHRASE.description}",
        "      export PULUMI_CONFIG_PASSPHRASE=<passphrase> (or PULUMI_CONFIG_PASSPHRASE_FILE=<file>)",
        f"  - driver.registry.name: {missing[1].description}",
        "      pulumi config set --stack dev driver.registry.name <value>",
        "  - volcengine:accessKey: Access key (set it with --secret, or the environment variable "
        "VOLCENGINE_ACCESS_KEY).",
        "      export VOLCENGINE_ACCESS_KEY=<value>, or: pulumi config set --stack dev --secret "
        "volcengine:accessKey (asks for the value)",
        "  - volcengine:secretKey: Secret key (set it with --secret, or the environment variable "
        "VOLCENGINE_SECRET_KEY).",
        "      export VOLCENGINE_SECRET_KEY=<value>, or: pulumi config set --stack dev --secret "
        "volcengine:secretKey (asks for the value)",
    ]


@pytest.mark.parametrize(
    ("stack_file", "exists", "url", "needed"),
    [
        ({}, False, "file:///state", True),  # created with the passphrase provider
        ({}, False, "https://api.pulumi.com", True),
        ({"encryptionsalt": "v1:abc"}, True, "https://api.pulumi.com", True),
        ({}, True, "https://api.pulumi.com", False),  # Pulumi Cloud encrypts
        ({}, True, "s3://bucket/state", True),  # a DIY backend's default
        ({"secretsprovider": "awskms://alias/x"}, True, "s3://bucket/state", False),
        ({"secretsprovider": "passphrase"}, True, "https://api.pulumi.com", True),
    ],
)
def test_when_a_passphrase_is_needed(
    stack_file: dict[str, str], exists: bool, url: str, needed: bool
) -> None:
    assert up.needs_passphrase(stack_file, exists, url) is needed


def test_a_passphrase_file_counts_as_a_passphrase() -> None:
    assert up.has_passphrase({"PULUMI_CONFIG_PASSPHRASE_FILE": "/run/secrets/p"})
    assert not up.has_passphrase({"PULUMI_CONFIG_PASSPHRASE": ""})


def test_what_the_cli_answers_is_read() -> None:
    whoami = "User: alice\nOrganizations: alice, acme\nBackend URL: https://api.pulumi.com\nToken type: x\n"
    assert up.backend_from_whoami(whoami) == "https://api.pulumi.com"
    listed = json.dumps([{"name": "acme/vke-gpu-dra/dev", "current": True}, {"name": "local"}])
    assert up.stack_exists(listed, "dev") and up.stack_exists(listed, "local")
    assert not up.stack_exists(listed, "prod") and not up.stack_exists("[]", "dev")


def test_the_kind_cluster_of_a_stack() -> None:
    assert up.kind_cluster(stack_config("local")) == "vke-gpu-dra"
    assert up.kind_cluster(stack_config("dev")) is None


def test_stacks_are_the_stack_files() -> None:
    assert {"dev", "local", "prod"} <= set(up.known_stacks(ROOT))
    with pytest.raises(up.UpError) as raised:
        up.check_stack("staging", ROOT)
    assert raised.value.code == 2 and "dev, local, prod" in str(raised.value)


def test_the_setup_is_stale_when_an_input_changes_or_a_venv_is_missing(tmp_path: Path) -> None:
    for python in up.VENV_PYTHONS:
        (tmp_path / python).parent.mkdir(parents=True)
        (tmp_path / python).write_text("#!/bin/sh\n")
        (tmp_path / python).chmod(0o755)
    (tmp_path / "constraints.txt").write_text("pulumi==3.272.0\n")
    assert up.setup_problem(tmp_path) == f"{up.STAMP} is missing (scripts/setup did not finish)"
    up.write_stamp(tmp_path)
    assert up.setup_problem(tmp_path) is None
    (tmp_path / "constraints.txt").write_text("pulumi==3.273.0\n")
    assert up.setup_problem(tmp_path) == "constraints.txt changed since scripts/setup ran"
    up.write_stamp(tmp_path)
    (tmp_path / "requirements.txt").write_text("pulumi\n")  # a new input counts too
    assert up.setup_problem(tmp_path) == "requirements.txt changed since scripts/setup ran"
    (tmp_path / "policy/venv/bin/python").unlink()
    assert up.setup_problem(tmp_path) == "policy/venv/bin/python is missing"


def test_every_local_package_the_requirements_name_is_a_setup_input(tmp_path: Path) -> None:
    """A package added to the requirement files (`-e ./new`) makes the set-up stale when it changes."""
    assert {"core/pyproject.toml", "planner/pyproject.toml", "kube/pyproject.toml"} <= set(
        up.local_packages(ROOT)
    )
    (tmp_path / "policy").mkdir()
    (tmp_path / "requirements-dev.txt").write_text("-r requirements.txt\n-e ./newpkg[extra]  # x\npytest\n")
    (tmp_path / "policy/requirements.txt").write_text("-e ../core\n")
    assert up.local_packages(tmp_path) == ["core/pyproject.toml", "newpkg/pyproject.toml"]
    (tmp_path / "newpkg").mkdir()
    for python in up.VENV_PYTHONS:
        (tmp_path / python).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / python).write_text("#!/bin/sh\n")
        (tmp_path / python).chmod(0o755)
    up.write_stamp(tmp_path)
    assert up.setup_problem(tmp_path) is None
    (tmp_path / "newpkg/pyproject.toml").write_text("[project]\n")
    assert up.setup_problem(tmp_path) == "newpkg/pyproject.toml changed since scripts/setup ran"


def test_preflight_runs_setup_only_when_stale(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.dev.yaml").write_text("config: {}\n")
    calls: list[list[str]] = []

    def run(argv: Sequence[str]) -> int:
        calls.append(list(argv))
        return 0

    up.preflight("dev", tmp_path, run=run)
    assert calls == [[str(tmp_path / "scripts" / "setup")]]
    with pytest.raises(up.UpError, match=r"scripts/setup failed \(exit 3\)"):
        up.preflight("dev", tmp_path, run=lambda argv: 3)


def test_a_terminal_asks_until_it_gets_an_answer() -> None:
    answers = iter(["", "first", "other", "first", "first"])
    term = up.Terminal(ask=lambda prompt: next(answers), ask_secret=lambda prompt: next(answers))
    assert term.passphrase(new=True) == "first"  # empty refused, a differing repeat asked again
    values = iter(["  ", "vke-cr"])
    term = up.Terminal(ask=lambda prompt: next(values), ask_secret=lambda prompt: "")
    assert term.value(up.Missing("driver.registry.name", "d", secret=False)) == "vke-cr"


def test_the_entry_points_are_executable() -> None:
    for script in ("up", "down", "setup"):
        assert os.access(ROOT / "scripts" / script, os.X_OK), script


def test_a_stack_list_that_is_not_json_is_one_error() -> None:
    with pytest.raises(up.UpError, match="printed no list of stacks"):
        up.stack_exists("warning: a new version of Pulumi is available", "dev")


def test_logged_in_is_what_the_clis_own_settings_say(tmp_path: Path) -> None:
    home = tmp_path / "pulumi-home"
    env = {"PULUMI_HOME": str(home)}
    assert up.login_source(env) is None
    home.mkdir()
    (home / "credentials.json").write_text('{"accessTokens": {}}')  # after `pulumi logout`
    assert up.login_source(env) is None
    (home / "credentials.json").write_text("not json")
    assert up.login_source(env) is None
    (home / "credentials.json").write_text('{"current": "file:///state"}')
    assert up.login_source(env) == f"file:///state ({home / 'credentials.json'})"
    assert up.login_source({**env, "PULUMI_BACKEND_URL": "s3://b"}) == "PULUMI_BACKEND_URL=s3://b"
    assert up.login_source({"PULUMI_HOME": str(tmp_path), "PULUMI_ACCESS_TOKEN": "t"}) == (
        "Pulumi Cloud (PULUMI_ACCESS_TOKEN)"
    )
    # Without PULUMI_HOME the CLI's folder is in the account's home, whatever $HOME says.
    assert up.pulumi_home({}) == Path(pwd.getpwuid(os.getuid()).pw_dir) / ".pulumi"


def test_the_plugins_each_stack_needs() -> None:
    def needed(stack: str) -> list[tuple[str, str]]:
        config = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
        return [(p.name, p.version) for p in up.needed_plugins(config, {})]

    k8s = ("kubernetes", pulumi_types.KUBERNETES_PROVIDER_VERSION)
    assert needed("dev") == [k8s, ("volcengine", "0.0.47"), ("docker-build", "0.0.22")]
    assert needed("local") == [k8s, ("docker-build", "0.0.22"), ("command", "1.2.1")]
    volcengine = up.sdk_plugin("pulumi_volcengine")
    assert volcengine.install_args() == [
        "plugin", "install", "resource", "volcengine", "0.0.47", "--server", "github://api.github.com/volcengine"
    ]  # fmt: skip
    assert volcengine.release_page == "https://github.com/volcengine/pulumi-volcengine/releases/tag/v0.0.47"
