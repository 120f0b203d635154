"""`scripts/up` and `scripts/down` as a first-time user runs them: the toolchain's real Pulumi CLI 3.274.1,
an empty `HOME` and `PULUMI_HOME`, no Pulumi login, the Kubernetes provider installed into the plugin cache
under its own release as `scripts/setup` installs it without the internet, and nothing reachable outside
this machine (downloads go to a proxy that refuses them).

* without a terminal, not logged in: the file backend ~/.pulumi-state, said in one line; what `dev` lacks
  listed (exit 2);
* logged in elsewhere (`PULUMI_BACKEND_URL`): that backend;
* the Volcengine plugin missing: one line naming the command that installs it, before `pulumi up`;
* on a pseudo-terminal: the passphrase and each missing setting asked for, then the real `pulumi up` of `dev`
  previews (the provider double standing in for the providers the Go module proxy does not serve) with no
  version warning, and is declined; the tracked stack file's lines stay as they were;
* the `local` stack's settings aimed at the tier's Kubernetes 1.34 API server: `scripts/up --yes` brings it
  up and `scripts/down --yes` destroys it, with no version warning.

The scripts run from the workspace's project copy, whose `.venv` is the repository's: they need it set up
(`scripts/setup`), and skip saying so where it is stale rather than set it up again.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml
from vke_gpu_dra_core import facts
from vke_gpu_dra_core import pulumi_types as pt

from tests.integration.controlplane import ControlPlane
from tests.tools.standin import Terminal
from tools import toolchain, up

from .conftest import timed
from .kubelet import NodeAgent
from .workspace import BIN, DOUBLES, ROOT, SAMPLE_NAMESPACE, Workspace, run_group

PASSPHRASE = "engine tier passphrase"
ACCESS_KEY = "AKLTengine-tier"
SECRET_KEY = "engine-tier-secret"
#: The warning a preview printed when the provider's label and its own version differed.
VERSION_WARNING = "expected to have version"
CR_TOKEN = "volcengine:cr/getAuthorizationTokens:getAuthorizationTokens"


@pytest.fixture(autouse=True)
def set_up() -> None:
    problem = up.setup_problem(ROOT)
    if problem:
        pytest.skip(f"the virtualenvs are not set up ({problem}): run scripts/setup")


#: A proxy that refuses every connection: nothing outside this machine, whatever it can reach (loopback
#: connections, the engine's and the API server's, go direct).
OFFLINE = {
    name: value
    for key, value in (
        ("https_proxy", "http://127.0.0.1:9"),
        ("http_proxy", "http://127.0.0.1:9"),
        ("no_proxy", "127.0.0.1,localhost"),
    )
    for name in (key, key.upper())
}


def user_env(
    ws: Workspace, *, doubles: tuple[str, ...] = DOUBLES, offline: bool = False, **extra: str
) -> dict[str, str]:
    """A first-time user's environment: empty HOME and PULUMI_HOME, the toolchain's `pulumi` on PATH, the
    Kubernetes provider in the plugin cache (not on PATH), the provider double for `doubles` only, no
    backend, no passphrase; with `offline`, downloads refused."""
    home, pulumi_home, bin_dir = ws.root / "user-home", ws.root / "user-pulumi-home", ws.root / "user-bin"
    for folder in (home, pulumi_home, bin_dir):
        folder.mkdir(exist_ok=True)
    for name in doubles:
        target = bin_dir / f"pulumi-resource-{name}"
        if not target.exists():
            target.symlink_to(ws.bin / f"pulumi-resource-{name}")
    cli = toolchain.locate("pulumi")
    assert cli is not None
    system_path = [
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not Path(p, "pulumi").exists()
    ]
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PULUMI_", "VOLCENGINE_", "KUBECONFIG", "VIRTUAL_ENV"))
        and key.lower() not in ("https_proxy", "http_proxy", "no_proxy")
    }
    env.update(
        {
            "HOME": str(home),
            "PULUMI_HOME": str(pulumi_home),
            "PATH": os.pathsep.join([str(cli), str(bin_dir), *system_path]),
            **(OFFLINE if offline else {}),
        }
    )
    if (ws.root / "invokes.json").exists():
        env["PROVIDER_DOUBLE_INVOKES"] = str(ws.root / "invokes.json")
    env.update(extra)
    install_kubernetes_provider(env)
    return env


def install_kubernetes_provider(env: Mapping[str, str]) -> None:
    """What scripts/setup does without the internet: the toolchain's provider into the plugin cache under
    its own release (tools/pulumi_cli.py)."""
    provider = toolchain.locate("pulumi-kubernetes")
    assert provider is not None
    if (
        Path(env["PULUMI_HOME"]) / "plugins" / f"resource-kubernetes-v{pt.KUBERNETES_PROVIDER_VERSION}"
    ).exists():
        return
    subprocess.run(
        ["pulumi", "plugin", "install", "resource", "kubernetes", pt.KUBERNETES_PROVIDER_VERSION, "--file",
         str(provider / "pulumi-resource-kubernetes")],
        env=dict(env), check=True, capture_output=True, timeout=120,
    )  # fmt: skip


def script(
    ws: Workspace, name: str, *args: str, env: Mapping[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """scripts/NAME ARGS in the project copy, without a terminal (standard input /dev/null)."""
    argv = [str(ws.project / "scripts" / name), *args]
    stdout, stderr, code = run_group(argv, cwd=ws.project, env=env, timeout=timeout)
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


def file_backend(env: Mapping[str, str]) -> str:
    return f"file://{Path(env['HOME']) / '.pulumi-state'}"


def not_logged_in_line(env: Mapping[str, str]) -> str:
    url = file_backend(env)
    return f"up: not logged in to a Pulumi backend: using the local file backend {url} (pulumi login {url})\n"


def test_not_logged_in_and_without_a_terminal_up_uses_the_file_backend_and_lists_what_dev_lacks(
    workspace: Workspace,
) -> None:
    env = user_env(workspace)
    # What the real CLI answers: not logged in.
    whoami = subprocess.run(["pulumi", "whoami"], env=env, capture_output=True, text=True, check=False)
    assert whoami.returncode != 0 and "pulumi login" in whoami.stderr, whoami

    proc = script(workspace, "up", "dev", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert not_logged_in_line(env) in proc.stdout
    credentials = json.loads((Path(env["PULUMI_HOME"]) / "credentials.json").read_text())
    assert credentials["current"] == file_backend(env)
    assert proc.stderr.count("up: ") == 1 and "Traceback" not in proc.stderr
    for missing in (
        "PULUMI_CONFIG_PASSPHRASE",
        "driver.registry.name",
        "volcengine:accessKey",
        "volcengine:secretKey",
    ):
        assert f"  - {missing}: " in proc.stderr, proc.stderr
    # Run again: logged in now, the same backend.
    again = script(workspace, "up", "dev", env=env)
    assert again.returncode == 2
    assert f"up: using the Pulumi backend you are logged in to: {file_backend(env)}" in again.stdout


def test_a_backend_logged_in_to_elsewhere_is_used(workspace: Workspace) -> None:
    elsewhere = f"file://{workspace.root / 'state'}"
    env = user_env(workspace, PULUMI_BACKEND_URL=elsewhere)
    proc = script(workspace, "up", "dev", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"up: using the Pulumi backend you are logged in to: {elsewhere}\n" in proc.stdout
    assert not (Path(env["HOME"]) / ".pulumi-state").exists()


def test_a_missing_volcengine_plugin_is_one_line_with_the_command_before_pulumi_up(
    workspace: Workspace,
) -> None:
    env = user_env(
        workspace,
        doubles=tuple(d for d in DOUBLES if d != "volcengine"),
        offline=True,
        PULUMI_CONFIG_PASSPHRASE=PASSPHRASE,
        VOLCENGINE_ACCESS_KEY=ACCESS_KEY,
        VOLCENGINE_SECRET_KEY=SECRET_KEY,
    )
    proc = script(workspace, "up", "dev", "--yes", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(
        "up: the Pulumi plugin volcengine 0.0.47 is not installed and could not be downloaded ("
    )
    assert (
        line.endswith(
            "and run: pulumi plugin install resource volcengine 0.0.47 --file "
            "<path of pulumi-resource-volcengine-v0.0.47-linux-amd64.tar.gz>"
        )
        or "linux-arm64" in line
    ), line
    assert "https://github.com/volcengine/pulumi-volcengine/releases/tag/v0.0.47" in line
    assert "up: installing the Pulumi plugin volcengine 0.0.47" in proc.stdout
    # Nothing further: no stack, no `pulumi up`.
    assert "Previewing update" not in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def _set_cr_invokes(ws: Workspace) -> None:
    ws.set_invokes(
        {
            CR_TOKEN: {
                "id": "token-engine-tier",
                "registry": "vke-gpu-dra-dev",
                "tokens": [
                    {"username": "engine", "token": "token-engine-tier", "expireTime": "2026-12-02T12:00:00Z"}
                ],
            }
        }
    )


@pytest.fixture
def terminal_run(workspace: Workspace) -> Iterator[list[Terminal]]:
    started: list[Terminal] = []
    yield started
    for term in started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(term.pid, 9)


def test_on_a_terminal_up_asks_what_dev_lacks_and_previews_it_without_a_version_warning(
    workspace: Workspace, terminal_run: list[Terminal]
) -> None:
    _set_cr_invokes(workspace)
    env = user_env(workspace)
    tracked = (workspace.project / "Pulumi.dev.yaml").read_text().splitlines()
    term = Terminal.start([str(workspace.project / "scripts" / "up"), "dev"], {**env, "TERM": "xterm"})
    terminal_run.append(term)
    term.expect(not_logged_in_line(env).strip())
    term.expect("Passphrase for the stack's secrets: ")
    term.send(PASSPHRASE)
    term.expect("Repeat the passphrase: ")
    term.send(PASSPHRASE)
    term.expect("created the stack dev")
    term.expect("driver.registry.name = ")
    term.send("vke-gpu-dra-dev")
    term.expect("volcengine:accessKey = ")
    term.send(ACCESS_KEY)
    term.expect("volcengine:secretKey = ")
    term.send(SECRET_KEY)
    term.expect("Do you want to perform this update?", timeout=600)
    assert VERSION_WARNING not in term.output, term.output[-4000:]
    assert "error:" not in term.output, term.output[-4000:]
    term.send("no")
    code = term.wait(timeout=120)
    assert code != 0 and "confirmation declined" in term.output, term.output[-2000:]
    assert ACCESS_KEY not in term.output and SECRET_KEY not in term.output and PASSPHRASE not in term.output
    # The tracked stack file keeps every line it had; scripts/up added the salt and the settings.
    now = (workspace.project / "Pulumi.dev.yaml").read_text().splitlines()
    assert [line for line in tracked if line not in now] == []
    added = {
        line.split(":", 2)[1].strip() if line.startswith("  ") else line.split(":", 1)[0]
        for line in now
        if line not in tracked
    }
    assert {"encryptionsalt", "driver.registry.name"} <= added, added


def test_the_local_stack_goes_up_and_down_for_a_first_time_user(
    workspace: Workspace, plane: ControlPlane, gpu_node: tuple[str, NodeAgent]
) -> None:
    node, agent = gpu_node
    api = plane.admin()
    workspace.aim_at(plane, "local")  # the local stack's settings, its cluster the tier's API server
    env = user_env(workspace, PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)

    begin = time.monotonic()
    proc = script(workspace, "up", "local", "--yes", env=env)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}\n{agent.report()}"
    assert not_logged_in_line(env) in proc.stdout
    assert VERSION_WARNING not in proc.stdout + proc.stderr
    assert "created the stack local" in proc.stdout
    assert api.exists(f"/api/v1/namespaces/{facts.DRIVER_NAMESPACE}")
    assert api.items(f"/apis/apps/v1/namespaces/{SAMPLE_NAMESPACE}/deployments")
    state = yaml.safe_load((workspace.project / "Pulumi.local.yaml").read_text())
    assert "encryptionsalt" in state
    # `vke-gpu-dra plan` of the stack reads the cluster it went into: the 1.34 server, the node's GPUs.
    plan = subprocess.run(
        [str(BIN / "vke-gpu-dra"), "plan", "--stack-config", str(workspace.project / "Pulumi.local.yaml")],
        cwd=workspace.project, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert plan.stdout.startswith("Kubernetes 1.34 (")
    assert f"  {node}: nodes of the cluster = " in plan.stdout and "ecs." not in plan.stdout, plan.stdout

    down = script(workspace, "down", "local", "--yes", env=env)
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    assert VERSION_WARNING not in down.stdout + down.stderr
    assert not api.exists(f"/api/v1/namespaces/{SAMPLE_NAMESPACE}")
    timed("scripts/up local --yes, then scripts/down local --yes (first-time user)", time.monotonic() - begin)


def test_the_by_hand_steps_of_environments_md_run_as_written(workspace: Workspace) -> None:
    """docs/environments.md's by-hand block for dev, run by bash in the project copy after `scripts/setup`
    (done): `pulumi` is on PATH through `. .venv/bin/activate`; `pulumi up` is the preview of the same
    command (it would create a VKE cluster)."""
    if not (ROOT / ".venv" / "bin" / "pulumi").exists():
        pytest.skip("scripts/setup linked no pulumi into .venv/bin (one was on PATH when it ran)")
    _set_cr_invokes(workspace)
    text = (ROOT / "docs" / "environments.md").read_text()
    block = text.split("The same by hand, for `dev`:\n\n```bash\n", 1)[1].split("```", 1)[0]
    lines = [line.split("  #", 1)[0].rstrip() for line in block.splitlines()]
    assert lines[0] == "scripts/setup" and lines[1] == ". .venv/bin/activate"
    commands = [
        line.replace("<access key>", ACCESS_KEY)
        .replace("<secret key>", SECRET_KEY)
        .replace("<new CR instance name>", "vke-gpu-dra-dev")
        .replace("pulumi up ", "pulumi preview ")
        for line in lines[1:]
        if line
    ]
    env = user_env(workspace)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not Path(p, "pulumi").exists())
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(["command -v pulumi && exit 9 || true", *commands])],
        cwd=workspace.project, env={**env, "PULUMI_SKIP_UPDATE_CHECK": "true"},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert VERSION_WARNING not in run.stdout + run.stderr
    assert "Previewing update (dev)" in run.stdout, run.stdout[-3000:]
    assert "error:" not in run.stdout + run.stderr, run.stdout[-3000:] + run.stderr[-3000:]
