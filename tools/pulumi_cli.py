"""The Pulumi CLI where it is missing: scripts/setup's last step.

    python3 tools/pulumi_cli.py            # nothing to install when `pulumi` is on PATH or in ~/.pulumi/bin

Where the CLI is missing it installs the release the toolchain pins (toolchain/pulumi/go.mod):

* with the internet reachable, through Pulumi's official installer
  (`curl -fsSL https://get.pulumi.com | sh -s -- --version X`), into ~/.pulumi/bin;
* else from the toolchain (scripts/toolchain builds it with Go from the Go module proxy): the CLI and
  what it runs Python programs and packs with are linked into ~/.pulumi/bin, where the installer puts
  them, and the toolchain's Kubernetes provider is installed into the CLI's plugin cache
  (`pulumi plugin install resource kubernetes VERSION --file …`) under its own release (4.25.0, the
  version the program asks for: `KUBERNETES_PROVIDER_VERSION` in core's pulumi_types), as the CLI
  cannot download it.

Wherever the CLI is, `.venv/bin/pulumi` links to it (unless `pulumi` is on PATH already), so that
`. .venv/bin/activate` puts it on PATH for every command the README and the docs show.

Standard library only: it runs with the system Python.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from tools import toolchain

INSTALLER = "https://get.pulumi.com"
#: The virtualenv whose bin folder gets a `pulumi` link.
VENV_BIN = toolchain.ROOT / ".venv" / "bin"


def say(message: str) -> None:
    print(f"scripts/setup: {message}", flush=True)


def installed(home: Path) -> str | None:
    """Where the CLI is: on PATH, or in ~/.pulumi/bin (the installer's place), else None."""
    found = shutil.which("pulumi")
    if found:
        return found
    candidate = home / ".pulumi" / "bin" / "pulumi"
    return str(candidate) if os.access(candidate, os.X_OK) else None


def internet_reachable(url: str = INSTALLER, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def pinned_version() -> str:
    """The CLI release the toolchain builds, without the `v` (3.274.1)."""
    return toolchain.recipes()["pulumi"].version.removeprefix("v")


def provider_release(name: str = "pulumi-kubernetes") -> str:
    """The release the toolchain builds a provider at, without the `v` (4.25.0): the version it is
    installed under, which is the version it reports itself."""
    release = toolchain.recipes()[name].release or toolchain.recipes()[name].version
    return release.removeprefix("v")


def run_installer(version: str) -> None:
    say(f"installing the Pulumi CLI {version} with the official installer ({INSTALLER})")
    script = subprocess.run(["curl", "-fsSL", INSTALLER], capture_output=True, text=True, check=True).stdout
    subprocess.run(["sh", "-s", "--", "--version", version, "--silent"], input=script, text=True, check=True)


def link_from_toolchain(home: Path, build: Callable[[str], Path] | None = None) -> Path:
    """Link the toolchain's CLI into ~/.pulumi/bin and install its Kubernetes provider into the plugin
    cache; returns the CLI's path."""
    build = build or _built
    cli = build("pulumi")
    bin_dir = home / ".pulumi" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted(cli.iterdir()):
        if path.name != toolchain.MANIFEST:
            target = bin_dir / path.name
            if target.is_symlink() or target.exists():
                target.unlink()
            target.symlink_to(path)
    pulumi = bin_dir / "pulumi"
    provider = build("pulumi-kubernetes") / "pulumi-resource-kubernetes"
    version = provider_release()
    subprocess.run(
        [str(pulumi), "plugin", "install", "resource", "kubernetes", version, "--file", str(provider)],
        check=True,
        env={**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"},
    )
    say(f"linked the toolchain's Pulumi CLI into {bin_dir}; its Kubernetes provider installed as {version}")
    return pulumi


def pulumi_home() -> Path:
    """The CLI's folder: PULUMI_HOME, else .pulumi in the account's home (the CLI asks the user database)."""
    if os.environ.get("PULUMI_HOME"):
        return Path(os.environ["PULUMI_HOME"])
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".pulumi"


def sync_toolchain_provider(cli: str, provider_dir: Path | None) -> None:
    """Where the toolchain has built the Kubernetes provider: installed under its release if the CLI's
    plugin cache lacks it, and the copies an earlier set-up installed under the SDK's version (4.34.2, a
    label its binary contradicts) removed."""
    if provider_dir is None:
        return
    provider = provider_dir / "pulumi-resource-kubernetes"
    env = {**os.environ, "PULUMI_SKIP_UPDATE_CHECK": "true"}
    listed = subprocess.run(
        [cli, "plugin", "ls", "--json"], capture_output=True, text=True, check=True, env=env
    ).stdout
    versions = {
        str(p.get("version", "")).removeprefix("v")
        for p in json.loads(listed or "[]") or []
        if p.get("kind") == "resource" and p.get("name") == "kubernetes"
    }
    release = provider_release()
    if release not in versions:
        subprocess.run(
            [cli, "plugin", "install", "resource", "kubernetes", release, "--file", str(provider)],
            check=True,
            env=env,
        )
        say(f"installed the toolchain's Kubernetes provider as {release}")
    content = provider.read_bytes()
    for version in sorted(versions - {release}):
        copy = pulumi_home() / "plugins" / f"resource-kubernetes-v{version}" / provider.name
        if copy.is_file() and copy.stat().st_size == len(content) and copy.read_bytes() == content:
            subprocess.run(
                [cli, "plugin", "rm", "resource", "kubernetes", version, "--yes"], check=True, env=env
            )
            say(f"removed the Kubernetes provider labelled {version}: it is the toolchain's {release}")


def _built(name: str) -> Path:
    found = toolchain.locate(name)
    if found is None:
        subprocess.run(
            [sys.executable, str(toolchain.ROOT / "tools" / "toolchain.py"), "--only", name], check=True
        )
        found = toolchain.locate(name)
    if found is None:
        raise toolchain.ToolchainError(f"{name} is not built")
    return found


def link_into_venv(cli: str, venv_bin: Path) -> str:
    """`venv_bin/pulumi` -> the CLI, unless `pulumi` is on PATH already; what to say about it."""
    on_path = shutil.which("pulumi")
    if on_path and Path(on_path).parent != venv_bin:
        return f"the Pulumi CLI: {cli} (on PATH)"
    if not venv_bin.is_dir():
        return f"the Pulumi CLI: {cli}; put {Path(cli).parent} on PATH"
    link = venv_bin / "pulumi"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(cli)
    return f"the Pulumi CLI: {cli}, linked as {link} (on PATH after `. .venv/bin/activate`)"


def main(argv: Sequence[str] | None = None, home: Path | None = None, venv_bin: Path = VENV_BIN) -> int:
    home = home or Path.home()
    where = installed(home)
    if where and Path(where).parent == venv_bin:  # our own link: where it points
        where = os.path.realpath(where)
    if not where:
        version = pinned_version()
        try:
            if internet_reachable():
                run_installer(version)
            else:
                say(f"{INSTALLER} is not reachable: the Pulumi CLI {version} comes from the toolchain")
                link_from_toolchain(home)
        except (subprocess.CalledProcessError, toolchain.ToolchainError) as exc:
            print(f"scripts/setup: could not install the Pulumi CLI: {exc}", file=sys.stderr)
            return 1
        where = installed(home)
        if not where:
            print(
                f"scripts/setup: the Pulumi CLI is not in {home / '.pulumi' / 'bin'} after its install",
                file=sys.stderr,
            )
            return 1
    try:
        sync_toolchain_provider(where, toolchain.locate("pulumi-kubernetes"))
    except (subprocess.CalledProcessError, ValueError, OSError) as exc:
        print(f"scripts/setup: could not install the toolchain's Kubernetes provider: {exc}", file=sys.stderr)
        return 1
    say(link_into_venv(where, venv_bin))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
