"""From a clone to a deployed stack: what `scripts/up STACK` and `scripts/down STACK` run.

    python3 -m tools.up up STACK --preflight   # the stack's name, then scripts/setup when the venvs
                                               # are missing or stale (system python, before .venv)
    .venv/bin/python -m tools.up up STACK [--yes]
    .venv/bin/python -m tools.up down STACK [--yes]
    python3 -m tools.up stamp               # scripts/setup's last step: what it installed from

`up` uses the Pulumi backend the CLI is logged in to (`pulumi whoami`), else logs in to the file
backend ~/.pulumi-state (and says so in one line); installs the provider plugins the stack needs that
the CLI lacks, or names the command that installs one it cannot download; selects the stack or creates
it with the passphrase secrets provider; asks for the passphrase and for each key the stack still lacks
to deploy (descriptions from the key table), or, without a terminal, lists them all in one error
(exit 2); then `pulumi up --policy-pack policy`. A stack whose driver image is built into kind
(`driver.image.build: kind:<cluster>`, the `local` stack) gets its cluster from scripts/kind-up first;
where no Docker answers, from a local node instead (tools/local_node.py: as root on Linux, a one-node
cluster of the toolchain's containerd 2.1 and kubelet 1.37, the driver image built without a daemon), and
`pulumi up` runs with a copy of the stack file aimed at it (`--config-file`). `down` stops that node too.
`down` destroys the stack after a confirmation.

The module's top level is the standard library only: `--preflight` and `stamp` run before .venv exists.
Secret values (the passphrase, cloud credentials) go to the Pulumi CLI through its environment or its
standard input, never on a command line, and are never printed.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import local_node

#: The repository: scripts/up, scripts/down and scripts/setup run this from its root.
ROOT = Path.cwd()
#: The file backend `up` logs in to when the CLI is logged in to none.
STATE_DIR = "~/.pulumi-state"
#: What scripts/setup installs from: when one changes, the virtualenvs are stale.
SETUP_INPUTS = (
    "scripts/setup",
    "constraints.txt",
    "tools/install_kubectl.py",
    "tools/toolchain.py",
    "tools/pulumi_cli.py",
)
#: The requirement files scripts/setup installs; each local package they name (`-e ./core`) is an input
#: too, through its pyproject.toml.
REQUIREMENT_FILES = ("requirements.txt", "requirements-dev.txt", "policy/requirements.txt")
VENV_PYTHONS = (".venv/bin/python", "policy/venv/bin/python")
STAMP = ".venv/.setup-stamp.json"
PASSPHRASE_VARS = ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE")
#: Cloud credentials: the provider key (a secret) and the environment variable that stands in for it.
CREDENTIALS = (
    ("volcengine:accessKey", "VOLCENGINE_ACCESS_KEY"),
    ("volcengine:secretKey", "VOLCENGINE_SECRET_KEY"),
)
#: What tells the CLI which backend to use without a login (pkg/workspace: the environment wins over
#: credentials.json's `current`; an access token alone means Pulumi Cloud).
BACKEND_VARS = ("PULUMI_BACKEND_URL", "PULUMI_ACCESS_TOKEN")
#: A plugin download that has not finished by then will not (the CLI retries an unreachable host).
PLUGIN_INSTALL_TIMEOUT = 120
EXIT_FAILED = 1
EXIT_USAGE = 2


#: What messages start with: the script's name (`up` or `down`).
_prog = "up"


def say(message: str) -> None:
    print(f"{_prog}: {message}", flush=True)


class UpError(Exception):
    """A problem reported as one message; `code` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


# --- stacks and the set-up (standard library only) --------------------------------------------------


def known_stacks(root: Path) -> list[str]:
    """The stacks of the repository: one `Pulumi.<stack>.yaml` each."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


def check_stack(stack: str, root: Path) -> None:
    stacks = known_stacks(root)
    if stack not in stacks:
        raise UpError(
            f"unknown stack {stack!r}: the stacks are those with a Pulumi.<stack>.yaml here: "
            + ", ".join(stacks),
            EXIT_USAGE,
        )


def local_packages(root: Path) -> list[str]:
    """The pyproject.toml of each local package the requirement files name (`-e ./core`, `-e ../ops[x]`)."""
    found: list[str] = []
    for name in REQUIREMENT_FILES:
        path = root / name
        lines = path.read_text().splitlines() if path.is_file() else []
        for line in lines:
            words = line.split("#", 1)[0].split()
            if len(words) == 2 and words[0] in ("-e", "--editable") and words[1].startswith("."):
                # normpath, not resolve: a clone reached through symbolic links keeps its own paths.
                package = Path(os.path.normpath(path.parent / words[1].split("[", 1)[0]))
                relative = (package / "pyproject.toml").relative_to(Path(os.path.normpath(root)))
                found.append(relative.as_posix())
    return sorted(set(found))


def setup_digests(root: Path) -> dict[str, str]:
    """sha256 of each set-up input ("absent" for one that does not exist)."""
    out = {}
    for name in (*SETUP_INPUTS, *REQUIREMENT_FILES, *local_packages(root)):
        path = root / name
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"
    return out


def write_stamp(root: Path) -> None:
    (root / STAMP).write_text(json.dumps({"inputs": setup_digests(root)}, indent=1, sort_keys=True) + "\n")


def setup_problem(root: Path) -> str | None:
    """Why scripts/setup must run (a virtualenv missing, its inputs changed since it ran), or None."""
    for python in VENV_PYTHONS:
        if not os.access(root / python, os.X_OK):
            return f"{python} is missing"
    try:
        recorded = json.loads((root / STAMP).read_text())["inputs"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{STAMP} is missing (scripts/setup did not finish)"
    changed = [name for name, digest in setup_digests(root).items() if recorded.get(name) != digest]
    if changed:
        return f"{', '.join(changed)} changed since scripts/setup ran"
    return None


def preflight(stack: str, root: Path, run: Callable[[Sequence[str]], int] | None = None) -> None:
    """The stack name, then scripts/setup when the virtualenvs are missing or stale."""
    check_stack(stack, root)
    problem = setup_problem(root)
    if problem is None:
        return
    say(f"setting up the virtualenvs ({problem}): scripts/setup")
    code = (run or _call)([str(root / "scripts" / "setup")])
    if code != 0:
        raise UpError(f"scripts/setup failed (exit {code})")


def _call(argv: Sequence[str]) -> int:
    return subprocess.call(list(argv))


# --- what a stack lacks (pure) ---------------------------------------------------------------------


@dataclass(frozen=True)
class Missing:
    """One thing a stack needs before `pulumi up`: a config key or the passphrase."""

    name: str
    description: str
    secret: bool
    #: Environment variables that stand in for it.
    env: tuple[str, ...] = ()

    def command(self, stack: str) -> str:
        if self.name == "PULUMI_CONFIG_PASSPHRASE":
            return "export PULUMI_CONFIG_PASSPHRASE=<passphrase> (or PULUMI_CONFIG_PASSPHRASE_FILE=<file>)"
        # A secret's value is asked for by the CLI (not echoed), so it stays out of the shell's history.
        value = " (asks for the value)" if self.secret else " <value>"
        flag = " --secret" if self.secret else ""
        set_it = f"pulumi config set --stack {stack}{flag} {self.name}{value}"
        if self.env:
            return f"export {self.env[0]}=<value>, or: {set_it}"
        return set_it


PASSPHRASE = Missing(
    "PULUMI_CONFIG_PASSPHRASE", "The passphrase that encrypts the stack's secrets.", secret=True
)


def missing_keys(stack_config: Mapping[str, Any], environ: Mapping[str, str]) -> list[Missing]:
    """The keys the stack still lacks to deploy, in the key table's order.

    `stack_config` is the `config:` mapping of Pulumi.<stack>.yaml (where `pulumi config set` writes):
    a key whose Required constraint fails where the key table applies it (`when`), and, for a stack on
    Volcengine, each credential set neither as a secret nor in its environment variable.
    """
    from vke_gpu_dra_core import config  # noqa: PLC0415 - the venv's; the module's top is stdlib only
    from vke_gpu_dra_core.config.constraints import Required  # noqa: PLC0415

    try:
        raw = config.raw_from_stack_file(stack_config)
    except config.StackConfigError as exc:
        raise UpError(str(exc), EXIT_USAGE) from None
    raw = config.RawConfig(raw.values, raw.secret_keys, environ)
    read, issues = config.read(raw)
    by_shown = {key.shown: key for key in config.ALL_KEYS}
    missing: list[Missing] = []
    for issue in issues:
        key = by_shown.get(issue.key)
        if key is None or not any(isinstance(c, Required) and c.allowed == issue.allowed for c in key.checks):
            continue
        missing.append(Missing(key.name, key.description, key.secret, (key.env,) if key.env else ()))
    if read.target == config.TARGET_VKE:
        by_name = {key.name: key for key in config.ALL_KEYS}
        for name, env in CREDENTIALS:
            if not environ.get(env) and name not in raw.values:
                missing.append(Missing(name, by_name[name].description, secret=True, env=(env,)))
    return missing


def missing_message(stack: str, missing: Sequence[Missing], exists: bool = True) -> str:
    lines = [
        f"stack {stack} lacks {len(missing)} setting(s) to deploy; set them and run scripts/up {stack} "
        "again (on a terminal it asks for them):"
    ]
    if not exists:
        lines.append(
            f"  (the stack does not exist yet; scripts/up {stack} creates it once the passphrase is set, "
            "and `pulumi config set` needs it)"
        )
    for item in missing:
        lines.append(f"  - {item.name}: {item.description}")
        lines.append(f"      {item.command(stack)}")
    return "\n".join(lines)


def needs_passphrase(stack_file: Mapping[str, Any], exists: bool, backend_url: str) -> bool:
    """Whether the stack's secrets are passphrase-encrypted (a new stack: `up` creates it so)."""
    provider = stack_file.get("secretsprovider")
    if provider:
        return bool(provider == "passphrase")
    if stack_file.get("encryptionsalt") or not exists:
        return True
    # An existing stack without a salt: Pulumi Cloud's own encryption, a DIY backend's passphrase.
    return not backend_url.startswith(("https://", "http://"))


def has_passphrase(environ: Mapping[str, str]) -> bool:
    return any(environ.get(name) for name in PASSPHRASE_VARS)


def kind_cluster(stack_config: Mapping[str, Any]) -> str | None:
    """The kind cluster a stack builds its driver image into (`driver.image.build: kind:<cluster>`)."""
    build = stack_config.get("vke-gpu-dra:driver.image.build")
    if isinstance(build, str) and build.startswith("kind:"):
        return build.removeprefix("kind:")
    return None


def backend_from_whoami(text: str) -> str:
    """The `Backend URL:` line of `pulumi whoami --verbose`."""
    for line in text.splitlines():
        if line.startswith("Backend URL:"):
            return line.partition(":")[2].strip()
    return ""


def stack_exists(stack_ls_json: str, stack: str) -> bool:
    """Whether `pulumi stack ls --json` lists the stack (bare, or org/project/stack on Pulumi Cloud)."""
    try:
        names = [entry.get("name", "") for entry in json.loads(stack_ls_json or "[]")]
    except (ValueError, AttributeError, TypeError):
        raise UpError(f"pulumi stack ls --json printed no list of stacks: {stack_ls_json[:200]!r}") from None
    return any(name == stack or name.endswith(f"/{stack}") for name in names)


# --- the Pulumi CLI --------------------------------------------------------------------------------


class Pulumi:
    """Runs the Pulumi CLI in the project directory with an environment that holds the passphrase."""

    def __init__(self, root: Path, environ: Mapping[str, str], executable: str = "pulumi") -> None:
        self.root = root
        self.env = {**environ, "PULUMI_SKIP_UPDATE_CHECK": "true"}
        self.executable = executable

    def capture(
        self, *args: str, stdin: str | None = None, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.executable, "--non-interactive", *args],
            cwd=self.root,
            env=self.env,
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )

    def check(self, *args: str, stdin: str | None = None) -> str:
        proc = self.capture(*args, stdin=stdin)
        if proc.returncode != 0:
            raise UpError(f"pulumi {' '.join(args[:2])} failed: {_errors(proc)}")
        return proc.stdout

    def attach(self, *args: str) -> int:
        """Run on the terminal (pulumi up/destroy show their progress)."""
        say(f"{shlex.join(['pulumi', *args])}")
        return subprocess.call([self.executable, *args], cwd=self.root, env=self.env)


def _errors(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return " | ".join(errors or lines[-1:]) or f"exit {proc.returncode}"


def find_pulumi() -> str:
    from vke_gpu_dra_ops.pulumi_workspace import find_pulumi_cli, missing_cli_message  # noqa: PLC0415

    root = find_pulumi_cli()
    if root is None:
        raise UpError(missing_cli_message())
    return "pulumi" if root == "" else str(Path(root) / "bin" / "pulumi")


def pulumi_home(environ: Mapping[str, str]) -> Path:
    """The CLI's own folder: PULUMI_HOME, else .pulumi in the account's home directory (the CLI asks the
    user database, as Go's user.Current does, not $HOME)."""
    if environ.get("PULUMI_HOME"):
        return Path(environ["PULUMI_HOME"])
    return Path(pwd.getpwuid(os.getuid()).pw_dir) / ".pulumi"


def login_source(environ: Mapping[str, str]) -> str | None:
    """What logs the CLI in to a backend, as the CLI reads it without asking anyone: PULUMI_BACKEND_URL,
    the `current` backend of PULUMI_HOME/credentials.json (what `pulumi login` writes, `pulumi logout`
    clears), or PULUMI_ACCESS_TOKEN (Pulumi Cloud). None: logged in to no backend."""
    if environ.get("PULUMI_BACKEND_URL"):
        return f"PULUMI_BACKEND_URL={environ['PULUMI_BACKEND_URL']}"
    credentials = pulumi_home(environ) / "credentials.json"
    try:
        current = json.loads(credentials.read_text()).get("current")
    except (OSError, ValueError, AttributeError):
        current = None
    if isinstance(current, str) and current:
        return f"{current} ({credentials})"
    if environ.get("PULUMI_ACCESS_TOKEN"):
        return "Pulumi Cloud (PULUMI_ACCESS_TOKEN)"
    return None


def use_backend(pulumi: Pulumi, home: Path) -> str:
    """The backend the CLI is logged in to, else the file backend STATE_DIR (logged in to now).

    Not logged in is what the CLI's own settings say (`login_source`), not a message of `pulumi whoami`:
    its words differ between releases and with the network (3.274.1 offline: "this command requires
    logging in; try running `pulumi login` first"). Logged in but failing is an error that names the
    backend."""
    proc = pulumi.capture("whoami", "--verbose")
    if proc.returncode == 0:
        url = backend_from_whoami(proc.stdout)
        say(f"using the Pulumi backend you are logged in to: {url}")
        return url
    source = login_source(pulumi.env)
    if source is not None:
        raise UpError(f"pulumi whoami failed for the backend you are logged in to, {source}: {_errors(proc)}")
    state = home / STATE_DIR.removeprefix("~/")
    state.mkdir(parents=True, exist_ok=True)
    url = f"file://{state}"
    say(f"not logged in to a Pulumi backend: using the local file backend {url} (pulumi login {url})")
    pulumi.check("login", url)
    return url


# --- provider plugins ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plugin:
    """A resource provider plugin the stack's program runs."""

    name: str
    version: str
    #: Where the CLI downloads it from when not Pulumi's own (`github://api.github.com/volcengine`).
    server: str = ""

    @property
    def archive(self) -> str:
        machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
        system = sys.platform.removesuffix("2")  # linux, darwin
        return f"pulumi-resource-{self.name}-v{self.version}-{system}-{machine}.tar.gz"

    @property
    def release_page(self) -> str:
        if self.server.startswith("github://api.github.com/"):
            owner = self.server.removeprefix("github://api.github.com/").strip("/")
            return f"https://github.com/{owner}/pulumi-{self.name}/releases/tag/v{self.version}"
        return f"https://github.com/pulumi/pulumi-{self.name}/releases/tag/v{self.version}"

    def install_args(self) -> list[str]:
        server = ["--server", self.server] if self.server else []
        return ["plugin", "install", "resource", self.name, self.version, *server]

    def by_hand(self) -> str:
        return (
            f"download {self.archive} from {self.release_page} and run: "
            f"pulumi plugin install resource {self.name} {self.version} --file <path of {self.archive}>"
        )


def sdk_plugin(package: str) -> Plugin:
    """The plugin an installed provider SDK asks for (its pulumi-plugin.json; the version from the
    package's metadata where that file names none)."""
    from importlib import metadata, resources  # noqa: PLC0415

    data = json.loads((resources.files(package) / "pulumi-plugin.json").read_text())
    version = data.get("version") or metadata.version(package.replace("_", "-"))
    return Plugin(data["name"], str(version), data.get("server", ""))


def needed_plugins(stack_config: Mapping[str, Any], environ: Mapping[str, str]) -> list[Plugin]:
    """The provider plugins the program runs for this stack, as it decides from the config: Kubernetes
    always (the version the program asks for), Volcengine for a stack on VKE, BuildKit when it builds the
    driver image, and the command provider when it loads the image into kind."""
    from vke_gpu_dra_core import config, pulumi_types  # noqa: PLC0415

    try:
        raw = config.raw_from_stack_file(stack_config)
    except config.StackConfigError as exc:
        raise UpError(str(exc), EXIT_USAGE) from None
    read, _ = config.read(config.RawConfig(raw.values, raw.secret_keys, environ))
    plugins = [Plugin("kubernetes", pulumi_types.KUBERNETES_PROVIDER_VERSION)]
    if read.target == config.TARGET_VKE:
        plugins.append(sdk_plugin("pulumi_volcengine"))
    build = read.driver_image.build if read.driver_image and read.driver_image.image is None else ""
    if build in (config.BUILD_CR, config.BUILD_KIND):
        plugins.append(sdk_plugin("pulumi_docker_build"))
    if build == config.BUILD_KIND:
        plugins.append(sdk_plugin("pulumi_command"))
    return plugins


def installed_plugins(pulumi: Pulumi) -> set[tuple[str, str]]:
    """(name, version) of each resource plugin in the CLI's plugin cache (`pulumi plugin ls --json`)."""
    text = pulumi.check("plugin", "ls", "--json")
    try:
        entries = json.loads(text or "[]") or []
        return {
            (e["name"], str(e["version"]).removeprefix("v")) for e in entries if e.get("kind") == "resource"
        }
    except (ValueError, TypeError, KeyError, AttributeError):
        raise UpError(f"pulumi plugin ls --json printed no list of plugins: {text[:200]!r}") from None


def ambient(plugin: Plugin, environ: Mapping[str, str]) -> bool:
    """A `pulumi-resource-NAME` on PATH, which the CLI runs whatever version is asked for."""
    return shutil.which(f"pulumi-resource-{plugin.name}", path=environ.get("PATH")) is not None


def ensure_plugins(pulumi: Pulumi, plugins: Sequence[Plugin]) -> None:
    """Install each plugin the CLI lacks; one line per plugin it cannot get, with the command that does."""
    have = installed_plugins(pulumi)
    lacking = [p for p in plugins if (p.name, p.version) not in have and not ambient(p, pulumi.env)]
    failed: list[str] = []
    for plugin in lacking:
        command = shlex.join(["pulumi", *plugin.install_args()])
        say(f"installing the Pulumi plugin {plugin.name} {plugin.version}: {command}")
        try:
            proc = pulumi.capture(*plugin.install_args(), timeout=PLUGIN_INSTALL_TIMEOUT)
            problem = None if proc.returncode == 0 else _errors(proc).removeprefix("error: ")
        except subprocess.TimeoutExpired:
            problem = f"no download in {PLUGIN_INSTALL_TIMEOUT} s"
        if problem is not None:
            failed.append(
                f"the Pulumi plugin {plugin.name} {plugin.version} is not installed and could not be "
                f"downloaded ({problem}): {plugin.by_hand()}"
            )
    if failed:
        raise UpError("\n".join(failed))


# --- prompts ---------------------------------------------------------------------------------------


@dataclass
class Terminal:
    """Where answers come from: `ask` for plain values, `ask_secret` without echo."""

    ask: Callable[[str], str] = input
    ask_secret: Callable[[str], str] = getpass.getpass

    def passphrase(self, new: bool) -> str:
        while True:
            first = self.ask_secret("Passphrase for the stack's secrets: ")
            if not first:
                say("the passphrase must not be empty")
                continue
            if not new or self.ask_secret("Repeat the passphrase: ") == first:
                return first
            say("the two passphrases differ; again")

    def value(self, item: Missing) -> str:
        print(f"{item.name} is not set. {item.description}", flush=True)
        while True:
            answer = (self.ask_secret if item.secret else self.ask)(f"{item.name} = ").strip()
            if answer:
                return answer
            say(f"{item.name} must not be empty")


# --- up and down -----------------------------------------------------------------------------------


def _stack_file(root: Path, stack: str) -> dict[str, Any]:
    import yaml  # noqa: PLC0415 - the venv's
    from vke_gpu_dra_core.config import load_pulumi_yaml  # noqa: PLC0415

    try:
        data = load_pulumi_yaml((root / f"Pulumi.{stack}.yaml").read_text()) or {}
    except yaml.YAMLError as exc:
        raise UpError(f"Pulumi.{stack}.yaml is not YAML: {exc}", EXIT_USAGE) from None
    if not isinstance(data, dict):
        raise UpError(f"Pulumi.{stack}.yaml is not a mapping", EXIT_USAGE)
    return data


def _stack_config(stack_file: Mapping[str, Any]) -> dict[str, Any]:
    config = stack_file.get("config") or {}
    return dict(config) if isinstance(config, Mapping) else {}


def _passphrase(
    pulumi: Pulumi, stack_file: Mapping[str, Any], exists: bool, url: str, term: Terminal | None
) -> Missing | None:
    """Puts the passphrase into the CLI's environment (asked on a terminal); PASSPHRASE when it lacks."""
    if has_passphrase(pulumi.env) or not needs_passphrase(stack_file, exists, url):
        return None
    if term is None:
        return PASSPHRASE
    pulumi.env["PULUMI_CONFIG_PASSPHRASE"] = term.passphrase(new=not exists)
    return None


def up(stack: str, yes: bool, root: Path, term: Terminal | None, environ: Mapping[str, str]) -> int:
    check_stack(stack, root)
    pulumi = Pulumi(root, environ, find_pulumi())
    stack_file = _stack_file(root, stack)
    cluster = kind_cluster(_stack_config(stack_file))
    node: NodeCluster | None = None
    if cluster is not None and not local_node.docker_answers(environ):
        node = local_node_cluster(stack, root, environ)
    elif cluster is not None:
        say(f"stack {stack} deploys into the kind cluster {cluster}: scripts/kind-up")
        code = subprocess.call(
            [str(root / "scripts" / "kind-up")], env={**environ, "KIND_CLUSTER": cluster}, cwd=root
        )
        if code != 0:
            raise UpError(f"scripts/kind-up failed (exit {code})")
    url = use_backend(pulumi, Path(environ.get("HOME") or Path.home()))
    # Before anything is asked: a plugin the CLI cannot get would fail `pulumi up` in tracebacks.
    planned = node.config(stack, stack_file) if node else stack_file
    ensure_plugins(pulumi, needed_plugins(_stack_config(planned), pulumi.env))
    exists = stack_exists(pulumi.check("stack", "ls", "--json"), stack)
    lacking = [p for p in [_passphrase(pulumi, stack_file, exists, url, term)] if p]
    if not lacking:
        if exists:
            pulumi.check("stack", "select", stack)
            say(f"selected the stack {stack}")
        else:
            pulumi.check("stack", "init", stack, "--secrets-provider", "passphrase")
            say(f"created the stack {stack} (secrets provider: passphrase)")
        stack_file = _stack_file(root, stack)  # `stack init` writes the salt
    keys = missing_keys(_stack_config(stack_file), pulumi.env)
    if term is None and (lacking or keys):
        raise UpError(missing_message(stack, lacking + keys, exists), EXIT_USAGE)
    for item in keys:
        answer = term.value(item) if term else ""
        args = ["config", "set", "--stack", stack]
        if item.secret:
            pulumi.check(*args, "--secret", "--", item.name, stdin=answer)
            say(f"set {item.name} (secret) in Pulumi.{stack}.yaml")
        else:
            pulumi.check(*args, "--", item.name, answer)
            say(f"set {item.name} = {answer} in Pulumi.{stack}.yaml")
    if term is None and not yes:
        raise UpError(
            "without a terminal, `pulumi up` cannot ask to confirm the update: "
            f"scripts/up {stack} --yes deploys without asking",
            EXIT_USAGE,
        )
    command = ["up", "--stack", stack, "--policy-pack", "policy", *(["--yes"] if yes else [])]
    if node is not None:  # the stack file as `stack init` left it (its salt), aimed at the local node
        path = node.write(stack, _stack_file(root, stack))
        say(f"stack {stack} runs with {path}: Pulumi.{stack}.yaml aimed at the local node")
        command += ["--config-file", str(path)]
    return pulumi.attach(*command)


@dataclass(frozen=True)
class NodeCluster:
    """The local node a kind stack runs on where there is no Docker (tools/local_node.py)."""

    served: local_node.LocalNode
    state: Mapping[str, Any]
    image: str

    def config(self, stack: str, stack_file: Mapping[str, Any]) -> dict[str, Any]:
        return json.loads(self.served.config_file(stack, stack_file, self.state, self.image).read_text())

    def write(self, stack: str, stack_file: Mapping[str, Any]) -> Path:
        return self.served.config_file(stack, stack_file, self.state, self.image)


def local_node_cluster(stack: str, root: Path, environ: Mapping[str, str]) -> NodeCluster:
    """No Docker here: the local node (started once, kept until scripts/down), and the driver image built
    without a daemon and imported into it."""
    reason = local_node.why_not(environ)
    if reason is not None:
        raise UpError(f"stack {stack} needs a cluster and no Docker answers here: {reason}")
    served = local_node.LocalNode(local_node.folder(environ))
    if served.state() is None:
        tools = ",".join(local_node.TOOLS)
        say(f"no Docker here: stack {stack} runs on a local node (containerd 2.1, kubelet 1.37)")
        if subprocess.call([str(root / "scripts" / "toolchain"), "--only", tools], cwd=root) != 0:
            raise UpError(f"scripts/toolchain --only {tools} failed")
    from tools import driver_image  # noqa: PLC0415 (runs as root under .venv; not needed for --preflight)

    try:
        state = served.start(root)
        say(f"the local node {state['node']} is up (kubeconfig {state['kubeconfig']})")
        image = driver_image.build(revision="local")
        reference = served.import_image(root, image.archive)
    except (local_node.LocalNodeError, driver_image.ImageError, driver_image.RecipeError) as exc:
        raise UpError(str(exc)) from None
    say(f"the driver image {reference} is in the node's containerd")
    return NodeCluster(served, state, reference)


def check_confirmable(stack: str, yes: bool, term: Terminal | None) -> None:
    """scripts/down asks before it destroys: without a terminal only --yes will do."""
    if term is None and not yes:
        raise UpError(
            f"refusing to destroy stack {stack} without a terminal to confirm: scripts/down {stack} --yes",
            EXIT_USAGE,
        )


def down(stack: str, yes: bool, root: Path, term: Terminal | None, environ: Mapping[str, str]) -> int:
    check_stack(stack, root)
    check_confirmable(stack, yes, term)
    pulumi = Pulumi(root, environ, find_pulumi())
    url = use_backend(pulumi, Path(environ.get("HOME") or Path.home()))
    if not stack_exists(pulumi.check("stack", "ls", "--json"), stack):
        say(f"stack {stack} does not exist in {url}: nothing to destroy")
        return 0
    lacking = _passphrase(pulumi, _stack_file(root, stack), True, url, term)
    if lacking is not None:
        raise UpError(missing_message(stack, [lacking]), EXIT_USAGE)
    if not yes and term is not None:
        answer = term.ask(f"Destroy every resource of stack {stack} ({url})? Type the stack name: ")
        if answer.strip() != stack:
            say("not confirmed; nothing destroyed")
            return EXIT_FAILED
    served = local_node.LocalNode(local_node.folder(environ))
    copy = served.path / f"Pulumi.{stack}.yaml"
    on_node = kind_cluster(_stack_config(_stack_file(root, stack))) is not None and copy.exists()
    if on_node and served.state() is None:
        raise UpError(
            f"stack {stack} was deployed on the local node, which is not running (scripts/node --serve "
            f"{served.path} would start a new, empty one): `pulumi stack rm {stack} --force` forgets its "
            "resources"
        )
    code = pulumi.attach(
        "destroy", "--stack", stack, "--yes", *(["--config-file", str(copy)] if on_node else [])
    )
    cluster = kind_cluster(_stack_config(_stack_file(root, stack)))
    if code == 0 and on_node:
        served.stop()
        copy.unlink(missing_ok=True)
        say(f"the local node is stopped and gone ({served.path})")
    elif code == 0 and cluster is not None:
        say(f"the kind cluster stays; remove it with: kind delete cluster --name {cluster}")
    return code


DESCRIPTIONS = {
    "up": "Set up, log in to a Pulumi backend, select or create the stack, ask for what it lacks to deploy, "
    "then pulumi up --policy-pack policy (docs/environments.md#bringing-a-stack-up).",
    "down": "Destroy the stack's resources after a confirmation (type the stack's name, or --yes).",
}


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m tools.up", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "down"):
        cmd = sub.add_parser(name, prog=f"scripts/{name}", description=DESCRIPTIONS[name])
        cmd.add_argument("stack", help="a stack of this repository: Pulumi.<stack>.yaml")
        cmd.add_argument(
            "--yes", action="store_true", help="do not ask to confirm (needed without a terminal)"
        )
        # The system python's first step, before .venv exists: the stack's name and the set-up.
        cmd.add_argument("--preflight", action="store_true", help=argparse.SUPPRESS)
    sub.add_parser("stamp")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    global _prog  # noqa: PLW0603 - one name for every message of this run
    args = parse(sys.argv[1:] if argv is None else argv)
    _prog = args.command
    term = Terminal() if sys.stdin.isatty() else None
    try:
        if args.command == "stamp":
            write_stamp(ROOT)
            return 0
        if args.preflight:
            if args.command == "down":  # refused before a set-up that could take minutes
                check_stack(args.stack, ROOT)
                check_confirmable(args.stack, args.yes, term)
            preflight(args.stack, ROOT)
            return 0
        run = up if args.command == "up" else down
        return run(args.stack, args.yes, ROOT, term, dict(os.environ))
    except UpError as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return exc.code
    except (EOFError, KeyboardInterrupt):
        print(f"\n{args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
