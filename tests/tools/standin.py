"""A project copy with stand-ins for the Pulumi CLI, scripts/setup and scripts/kind-up (each records
what it was given in one log), for running scripts/up and scripts/down without a cloud or a cluster."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: What the real CLI 3.274.1 says, and its exit status, when it is logged in to no backend (the engine
#: tier runs the real one: tests/engine/test_up_script.py).
NOT_LOGGED_IN = "this command requires logging in; try running `pulumi login` first"
NOT_LOGGED_IN_EXIT = 3
#: The real CLI's last line for a plugin it cannot download (after 5 tries).
DOWNLOAD_FAILED = (
    "[resource plugin {name}-{version}] downloading from {server}: failed to download plugin: "
    "{name}-{version}: failed all 5 attempts"
)
#: The plugins the stacks need, in the stand-in's plugin cache unless a test says otherwise.
PLUGINS = (
    ("kubernetes", "4.25.0"),
    ("volcengine", "0.0.47"),
    ("docker-build", "0.0.22"),
    ("command", "1.2.1"),
)

#: The Pulumi CLI as far as scripts/up and scripts/down use it: stacks and plugins in $FAKE_DIR/state.json,
#: the login where the real CLI keeps it ($PULUMI_HOME/credentials.json's `current`), each call a JSON
#: line in $FAKE_DIR/log (with whether a passphrase reached it); secrets given on standard input are kept
#: in $FAKE_DIR/secrets.json for the tests to compare. With FAKE_OFFLINE set, plugin downloads fail.
PULUMI = """#!{python}
import json, os, sys
from pathlib import Path
import yaml

d = Path(os.environ["FAKE_DIR"])
argv = sys.argv[1:]
passphrase = os.environ.get("PULUMI_CONFIG_PASSPHRASE", "")
with open(d / "log", "a") as log:
    log.write(json.dumps({{"tool": "pulumi", "args": argv, "passphrase": bool(passphrase)}}) + "\\n")
if passphrase:
    (d / "passphrase").write_text(passphrase)
state_file = d / "state.json"
state = json.loads(state_file.read_text()) if state_file.exists() else {{"stacks": []}}
state.setdefault("plugins", {plugins})
credentials = Path(os.environ["PULUMI_HOME"]) / "credentials.json"
url = json.loads(credentials.read_text()).get("current", "") if credentials.exists() else ""
url = os.environ.get("PULUMI_BACKEND_URL") or url
a = [x for x in argv if x != "--non-interactive"]


def fail(message, code=255):
    print("error: " + message, file=sys.stderr)
    sys.exit(code)


def save():
    state_file.write_text(json.dumps(state))


def stack_file(stack):
    return Path.cwd() / f"Pulumi.{{stack}}.yaml"


if a[0] == "whoami":
    if os.environ.get("FAKE_WHOAMI_ERROR"):
        fail(os.environ["FAKE_WHOAMI_ERROR"])
    if not url:
        fail("{not_logged_in}", {not_logged_in_exit})
    print("User: alice")
    print("Organizations: ")
    print("Backend URL: " + url)
    print("Token type: personal")
elif a[0] == "login":
    credentials.parent.mkdir(parents=True, exist_ok=True)
    credentials.write_text(json.dumps({{"current": a[1]}}))
    print(f"Logged in to workstation as alice ({{a[1]}})")
elif a[:2] == ["plugin", "ls"]:
    print(json.dumps([{{"name": n, "kind": "resource", "version": v}} for n, v in state["plugins"]]))
elif a[:3] == ["plugin", "install", "resource"]:
    name, version = a[3], a[4]
    server = a[a.index("--server") + 1] if "--server" in a else "github://api.github.com/pulumi"
    if os.environ.get("FAKE_OFFLINE") and "--file" not in a:
        fail({download_failed!r}.format(name=name, version=version, server=server), 1)
    state["plugins"].append([name, version])
    save()
elif a[:2] == ["stack", "ls"]:
    print(json.dumps([{{"name": s, "current": False, "updateInProgress": False}} for s in state["stacks"]]))
elif a[:2] == ["stack", "select"]:
    if a[2] not in state["stacks"]:
        fail(f"no stack named '{{a[2]}}' found")
elif a[:2] == ["stack", "init"]:
    if not passphrase:
        fail("passphrase must be set with PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE")
    state["stacks"].append(a[2])
    save()
    path = stack_file(a[2])
    data = yaml.safe_load(path.read_text())
    data["encryptionsalt"] = "v1:c2FsdA==:v1:AAAA:BBBB"
    path.write_text(yaml.safe_dump(data))
    print(f"Created stack '{{a[2]}}'")
elif a[:2] == ["config", "set"]:
    stack = a[a.index("--stack") + 1]
    key, *value = a[a.index("--") + 1 :]
    full = key if ":" in key else "vke-gpu-dra:" + key
    path = stack_file(stack)
    data = yaml.safe_load(path.read_text())
    if "--secret" in a:
        secret = value[0] if value else sys.stdin.read()
        secrets_file = d / "secrets.json"
        secrets = json.loads(secrets_file.read_text()) if secrets_file.exists() else {{}}
        secrets[full] = secret
        secrets_file.write_text(json.dumps(secrets))
        data["config"][full] = {{"secure": "v1:ZW5jcnlwdGVk"}}
    else:
        data["config"][full] = value[0]
    path.write_text(yaml.safe_dump(data))
elif a[0] in ("up", "destroy"):
    print(f"stand-in pulumi {{a[0]}} done")
else:
    fail("the stand-in does not know: " + " ".join(a))
"""

#: scripts/setup's stand-in: makes the two virtualenvs (a python that is this test's) and the stamp.
SETUP = """#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")/.."
echo '{{"tool": "setup", "args": []}}' >> "$FAKE_DIR/log"
mkdir -p .venv/bin policy/venv/bin
printf '#!/bin/sh\\nexec {python} "$@"\\n' > .venv/bin/python
cp .venv/bin/python policy/venv/bin/python
chmod +x .venv/bin/python policy/venv/bin/python
python3 -m tools.up stamp
"""

#: What scripts/up and scripts/down run of tools/ (python3 -m tools.up).
UP_FILES = ("tools/up.py", "tools/local_node.py", "tools/toolchain.py")

#: A Docker whose daemon answers (the kind path); FAKE_NO_DOCKER=1 makes it not answer.
DOCKER = """#!/usr/bin/env bash
[ -z "${{FAKE_NO_DOCKER:-}}" ] || {{ echo "Cannot connect to the Docker daemon" >&2; exit 1; }}
"""

KIND_UP = """#!/usr/bin/env bash
echo "{{\\"tool\\": \\"kind-up\\", \\"args\\": [\\"KIND_CLUSTER=$KIND_CLUSTER\\"]}}" >> "$FAKE_DIR/log"
"""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


@dataclass
class Project:
    """A copy of the project's entry points and stack files, with the stand-ins."""

    root: Path
    fake: Path
    home: Path

    @classmethod
    def make(cls, tmp: Path, *, set_up: bool = True) -> Project:
        root, fake, home = tmp / "clone", tmp / "fake", tmp / "home"
        root.mkdir()
        for name in ("Pulumi.yaml", "Pulumi.dev.yaml", "Pulumi.local.yaml", "Pulumi.prod.yaml"):
            shutil.copy(ROOT / name, root / name)
        for name in (*UP_FILES, "constraints.txt", "scripts/up", "scripts/down"):
            _write(root / name, (ROOT / name).read_text())
        python = sys.executable
        _write(root / "scripts" / "setup", SETUP.format(python=python))
        _write(root / "scripts" / "kind-up", KIND_UP.format())
        pulumi = PULUMI.format(
            python=python,
            not_logged_in=NOT_LOGGED_IN,
            not_logged_in_exit=NOT_LOGGED_IN_EXIT,
            download_failed=DOWNLOAD_FAILED,
            plugins=json.dumps([list(p) for p in PLUGINS]),
        )
        _write(fake / "bin" / "pulumi", pulumi)
        _write(fake / "bin" / "docker", DOCKER.format())
        home.mkdir()
        project = cls(root, fake, home)
        if set_up:
            subprocess.run([str(root / "scripts" / "setup")], env=project.env(), check=True)
            (fake / "log").unlink()
        return project

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": f"{self.fake / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(self.home),
            # The real CLI's own folder is the account's home, not $HOME: every test names its own.
            "PULUMI_HOME": str(self.home / ".pulumi"),
            "FAKE_DIR": str(self.fake),
            "LANG": "C.UTF-8",
            **extra,
        }

    def state(
        self, url: str = "", stacks: tuple[str, ...] = (), plugins: tuple[tuple[str, str], ...] = PLUGINS
    ) -> None:
        """The backend logged in to (`url`, none when empty), its stacks, the CLI's plugin cache."""
        (self.fake / "state.json").write_text(
            json.dumps({"stacks": list(stacks), "plugins": [list(p) for p in plugins]})
        )
        credentials = self.home / ".pulumi" / "credentials.json"
        credentials.parent.mkdir(parents=True, exist_ok=True)
        credentials.write_text(json.dumps({"current": url} if url else {}))

    def log(self) -> list[dict[str, Any]]:
        path = self.fake / "log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def pulumi_calls(self) -> list[list[str]]:
        return [
            [a for a in entry["args"] if a != "--non-interactive"]
            for entry in self.log()
            if entry["tool"] == "pulumi"
        ]

    def secrets(self) -> dict[str, str]:
        path = self.fake / "secrets.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def run(self, script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """The script without a terminal (standard input from /dev/null, a session of its own)."""
        return subprocess.run(
            [str(self.root / "scripts" / script), *args],
            env=self.env(**env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,
            check=False,
        )

    def terminal(self, script: str, *args: str, **env: str) -> Terminal:
        return Terminal.start([str(self.root / "scripts" / script), *args], self.env(**env))


class Terminal:
    """A script on a pseudo-terminal of its own (its controlling terminal, as getpass needs)."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd, self.output = pid, fd, ""

    @classmethod
    def start(cls, argv: list[str], env: Mapping[str, str]) -> Terminal:
        pid, fd = pty.fork()
        if pid == 0:  # the child: its stdin, stdout, stderr and /dev/tty are the pty
            try:
                os.execve(argv[0], argv, dict(env))
            finally:
                os._exit(127)
        return cls(pid, fd)

    def expect(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"no {text!r} on the terminal; it shows:\n{self.output}")

    def send(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")

    def wait(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self._read(max(deadline - time.monotonic(), 0.01)):
            pass
        for _ in range(600):
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"the script did not end; the terminal shows:\n{self.output}")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:  # the child closed the pty
            return False
        self.output += chunk.decode(errors="replace")
        return bool(chunk)
