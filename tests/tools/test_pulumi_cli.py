"""scripts/setup's Pulumi CLI step (tools/pulumi_cli.py): nothing when the CLI is there; the official
installer with the internet; the toolchain's build, linked where the installer puts it, without."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tools import pulumi_cli, toolchain


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def no_cli_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    # Whether this machine's toolchain has the provider built is no business of these tests.
    monkeypatch.setattr(pulumi_cli.toolchain, "locate", lambda _name: None)


def test_the_pinned_release_is_the_toolchains() -> None:
    assert pulumi_cli.pinned_version() == toolchain.recipes()["pulumi"].version.removeprefix("v")
    assert pulumi_cli.pinned_version().startswith("3.")


def test_the_kubernetes_plugin_is_installed_under_its_own_release_which_the_program_asks_for() -> None:
    from vke_gpu_dra_core import pulumi_types

    recipe = toolchain.recipes()["pulumi-kubernetes"]
    assert pulumi_cli.provider_release() == recipe.release.removeprefix("v") == "4.25.0"
    # The program's providers ask for exactly this version: no "expected to have version" warning.
    assert pulumi_cli.provider_release() == pulumi_types.KUBERNETES_PROVIDER_VERSION


def test_a_cli_on_path_or_in_the_installers_place_is_kept(
    tmp_path: Path, no_cli_on_path: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pulumi_cli, "internet_reachable", lambda: pytest.fail("nothing to install"))
    home = tmp_path / "home"
    assert pulumi_cli.installed(home) is None
    cli = _executable(home / ".pulumi" / "bin" / "pulumi")
    assert pulumi_cli.installed(home) == str(cli)
    venv_bin = tmp_path / "venv-bin"
    venv_bin.mkdir()
    assert pulumi_cli.main([], home=home, venv_bin=venv_bin) == 0
    # Not on PATH: linked into the virtualenv, so `. .venv/bin/activate` finds it.
    assert os.readlink(venv_bin / "pulumi") == str(cli)
    assert f"the Pulumi CLI: {cli}, linked as {venv_bin / 'pulumi'}" in capsys.readouterr().out
    assert pulumi_cli.main([], home=home, venv_bin=venv_bin) == 0  # again: the link is its own, kept
    assert os.readlink(venv_bin / "pulumi") == str(cli)
    on_path = _executable(tmp_path / "bin" / "pulumi")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert pulumi_cli.installed(home) == str(on_path)
    (venv_bin / "pulumi").unlink()
    assert pulumi_cli.main([], home=home, venv_bin=venv_bin) == 0
    assert not (venv_bin / "pulumi").exists()  # on PATH already: no link
    assert f"the Pulumi CLI: {on_path} (on PATH)" in capsys.readouterr().out


def test_with_the_internet_the_official_installer_installs_the_pin(
    tmp_path: Path, no_cli_on_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed: list[str] = []

    def installer(version: str) -> None:  # the official installer's place
        installed.append(version)
        _executable(tmp_path / ".pulumi" / "bin" / "pulumi")

    monkeypatch.setattr(pulumi_cli, "internet_reachable", lambda: True)
    monkeypatch.setattr(pulumi_cli, "run_installer", installer)
    monkeypatch.setattr(pulumi_cli, "link_from_toolchain", lambda _home: pytest.fail("the internet is there"))
    assert pulumi_cli.main([], home=tmp_path, venv_bin=tmp_path / "venv-bin") == 0
    assert installed == [pulumi_cli.pinned_version()]


def test_without_the_internet_the_toolchains_cli_is_linked_and_its_provider_installed(
    tmp_path: Path, no_cli_on_path: None
) -> None:
    built = tmp_path / "cache"
    calls = tmp_path / "calls"
    cli_dir = built / "pulumi"
    _executable(cli_dir / "pulumi", f'#!/bin/sh\necho "$@" >> {calls}\n')
    for name in ("pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python"):
        _executable(cli_dir / name)
    (cli_dir / toolchain.MANIFEST).write_text("{}")
    provider = _executable(built / "pulumi-kubernetes" / "pulumi-resource-kubernetes")
    home = tmp_path / "home"

    cli = pulumi_cli.link_from_toolchain(home, build=lambda name: built / name)

    bin_dir = home / ".pulumi" / "bin"
    assert cli == bin_dir / "pulumi"
    assert sorted(p.name for p in bin_dir.iterdir()) == [
        "pulumi", "pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python"
    ]  # fmt: skip
    assert all(os.path.realpath(p) == str(cli_dir / p.name) for p in bin_dir.iterdir())
    assert calls.read_text().split() == [
        "plugin",
        "install",
        "resource",
        "kubernetes",
        "4.25.0",
        "--file",
        str(provider),
    ]
    # Idempotent: linking again replaces the links.
    pulumi_cli.link_from_toolchain(home, build=lambda name: built / name)
    assert len(calls.read_text().splitlines()) == 2


def test_a_failed_install_is_one_message(
    tmp_path: Path, no_cli_on_path: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail(_home: Path) -> Path:
        raise toolchain.ToolchainError("go is not on PATH")

    monkeypatch.setattr(pulumi_cli, "internet_reachable", lambda: False)
    monkeypatch.setattr(pulumi_cli, "link_from_toolchain", fail)
    assert pulumi_cli.main([], home=tmp_path) == 1
    assert "scripts/setup: could not install the Pulumi CLI: go is not on PATH" in capsys.readouterr().err


def test_the_workflows_run_the_cli_the_engine_tier_tests() -> None:
    workflows = sorted((toolchain.ROOT / ".github" / "workflows").glob("*.yaml"))
    versions = {
        line.split(":", 1)[1].strip()
        for path in workflows
        for line in path.read_text().splitlines()
        if line.strip().startswith("pulumi-version:")
    }
    assert versions == {pulumi_cli.pinned_version()}


def test_the_toolchains_provider_is_installed_under_its_release_and_an_earlier_label_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "pulumi-home"
    monkeypatch.setenv("PULUMI_HOME", str(home))
    provider_dir = tmp_path / "built"
    provider = _executable(
        provider_dir / "pulumi-resource-kubernetes", "#!/bin/sh\n# the toolchain's build\n"
    )
    # What an earlier scripts/setup left: the same binary under the SDK's version; and a real 4.30.0.
    for version, source in (("4.34.2", provider.read_text()), ("4.30.0", "#!/bin/sh\n# a download\n")):
        _executable(
            home / "plugins" / f"resource-kubernetes-v{version}" / "pulumi-resource-kubernetes", source
        )
    calls = tmp_path / "calls"
    listing = '[{"name": "kubernetes", "kind": "resource", "version": "4.34.2"}, ' + (
        '{"name": "kubernetes", "kind": "resource", "version": "4.30.0"}]'
    )
    cli = _executable(
        tmp_path / "bin" / "pulumi",
        f'#!/bin/sh\necho "$@" >> {calls}\n[ "$1 $2" = "plugin ls" ] && echo \'{listing}\'\nexit 0\n',
    )
    pulumi_cli.sync_toolchain_provider(str(cli), provider_dir)
    assert calls.read_text().splitlines() == [
        "plugin ls --json",
        f"plugin install resource kubernetes 4.25.0 --file {provider}",
        "plugin rm resource kubernetes 4.34.2 --yes",
    ]
    out = capsys.readouterr().out
    assert "removed the Kubernetes provider labelled 4.34.2: it is the toolchain's 4.25.0" in out
    calls.unlink()
    pulumi_cli.sync_toolchain_provider(str(cli), None)  # nothing built: nothing to do
    assert not calls.exists()
