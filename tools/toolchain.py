"""The binaries the test tiers run, built with this machine's Go from the Go module proxy into a cache
outside the repository, keyed by the pins.

    scripts/toolchain                      build what is missing, reuse what is cached; one line per tool
    scripts/toolchain --only helm,pulumi   the same for some tools
    scripts/toolchain --check              build nothing: exit 1 naming each tool that is not built
    scripts/toolchain --path NAME          the folder of one built tool (exit 1 when it is not built)
    scripts/toolchain --record             write each tool's SHA256SUMS from its build (after a pin change)

Each tool is a folder under toolchain/ (its wrapper module): `go.mod` and `go.sum` declare the module
versions (nothing of those projects is copied here), `build.toml` names the binaries, the version stamps
(`-ldflags -X`), files copied out of a module beside the binaries and files copied into the build, and
`SHA256SUMS` the binaries' digests as built with the Go release its first line names. A build runs in a
scratch copy of the wrapper with `-mod=readonly -trimpath`, CGO off and the machine's own Go
(GOTOOLCHAIN=local), so the same pins and Go release give the same bytes; the folder is moved into the
cache only when complete (`manifest.json` last), so an interrupted build leaves nothing that counts. A
tool that cannot be built without C (runc) says so in its build.toml (`cgo = true`, and the Debian
packages whose headers it needs); its bytes then also depend on the machine's C compiler and headers.
A tool whose go.mod needs a newer Go than the machine's names the Go release it is built with
(`go = "go1.27.3"`): that tool's go commands alone run with GOTOOLCHAIN set to it, which the go command
takes from the Go module proxy; every other tool keeps the machine's Go.

Where `../shared/toolchain/` (beside the clone; $VKE_GPU_DRA_SHARED_TOOLCHAIN elsewhere) holds files
whose SHA256 is the one recorded for every file of a tool, they are copied into the cache instead of
building. A cached tool is checked against its manifest before it is reused.

The cache: $VKE_GPU_DRA_TOOLCHAIN_CACHE, else $XDG_CACHE_HOME/vke-gpu-dra/toolchain, else
~/.cache/vke-gpu-dra/toolchain. Standard library only: it runs before the virtualenvs exist.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The repository: scripts/toolchain, scripts/setup and the tests run from its root.
ROOT = Path.cwd()
WRAPPERS = ROOT / "toolchain"
#: Changes whenever the way a tool is built changes (flags, layout): part of every cache key.
RECIPE = "1"
MANIFEST = "manifest.json"
SUMS = "SHA256SUMS"
#: The wrapper's files that decide what is built (SHA256SUMS only records the result).
KEY_FILES = ("go.mod", "go.sum", "build.toml")
#: The tools the control planes of the integration tier are made of, per Kubernetes minor.
KUBERNETES = {"1.34": "kubernetes-1.34", "1.37": "kubernetes-1.37", "1.38": "kubernetes-1.38"}
ETCD = "etcd"
#: What a folder of `kube_assets` holds (envtest's $KUBEBUILDER_ASSETS).
ASSET_BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
GO_FLAGS = "-mod=readonly -trimpath -buildvcs=false"


class ToolchainError(Exception):
    """A problem reported as one message (exit 1)."""


# --- recipes (pure) --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """One wrapper folder under toolchain/ and what build.toml says to make of it."""

    name: str
    folder: Path
    module: str
    version: str
    binaries: Mapping[str, str]
    stamp: Mapping[str, str] = field(default_factory=dict)
    #: output file -> "module:path inside it", copied beside the binaries (made executable).
    files: Mapping[str, str] = field(default_factory=dict)
    #: path in the build copy -> "module:path inside it", copied in before `go build`.
    embed: Mapping[str, str] = field(default_factory=dict)
    #: `binary args...` whose first output line shows the tool's version.
    version_command: tuple[str, ...] = ()
    #: The release a pseudo-version is (build.toml `release`), for a module without tags of its own.
    release: str = ""
    #: Build tags (`go build -tags`), as the project's own Makefile sets them.
    tags: tuple[str, ...] = ()
    #: CGO on (build.toml `cgo = true`): the tool has C code of its own (runc's nsenter, libseccomp).
    cgo: bool = False
    #: Debian packages a cgo build needs (their headers), named when the build fails.
    debian: tuple[str, ...] = ()
    #: The Go release the tool is built with (build.toml `go`), where its go.mod needs a newer Go than the
    #: machine's: GOTOOLCHAIN for this tool's go commands. "" builds with the machine's Go
    #: (GOTOOLCHAIN=local).
    go: str = ""

    def env(self) -> dict[str, str]:
        """The environment of this tool's go commands."""
        return go_env(cgo=self.cgo, toolchain=self.go)

    @property
    def outputs(self) -> list[str]:
        return sorted([*self.binaries, *self.files])

    def key(self) -> str:
        """sha256 over the files that decide the build, and RECIPE."""
        digest = hashlib.sha256(f"recipe {RECIPE}\n".encode())
        for path in self._key_paths():
            digest.update(path.relative_to(self.folder).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        return digest.hexdigest()

    def _key_paths(self) -> list[Path]:
        paths = [self.folder / name for name in KEY_FILES]
        paths += [p for p in self.folder.rglob("*.go") if p.is_file()]
        return sorted(paths, key=lambda p: p.relative_to(self.folder).as_posix())

    def ldflags(self) -> str:
        major, minor = _major_minor(self.version)
        values = {"version": self.version, "major": major, "minor": minor, "release": self.release}
        stamps = [
            f"-X {symbol}={template.format(**values)}" for symbol, template in sorted(self.stamp.items())
        ]
        return " ".join(["-s", "-w", *stamps])


def exec_name(package: str) -> str:
    """The file `go build -o DIR/` writes a main package to: its last path element, or the one before a
    major-version element (cmd/go's DefaultExecName)."""
    parts = package.rstrip("/").split("/")
    if len(parts) > 1 and re.fullmatch(r"v([2-9]|[1-9][0-9]+)", parts[-1]):
        return parts[-2]
    return parts[-1]


def _major_minor(version: str) -> tuple[str, str]:
    match = re.match(r"v(\d+)\.(\d+)\.", version)
    return (match.group(1), match.group(2)) if match else ("", "")


def module_version(go_mod: str, module: str) -> str:
    """The version go.mod requires of `module` (a `require` line, single or in a block)."""
    for line in go_mod.splitlines():
        words = line.split("//")[0].split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) == 2 and words[0] == module:
            return words[1]
    raise ToolchainError(f"go.mod requires no version of {module}")


def _table(data: Mapping[str, Any], key: str, where: Path) -> dict[str, str]:
    value = data.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ToolchainError(f"{where}: [{key}] must map names to strings")
    return dict(value)


def _strings(data: Mapping[str, Any], key: str, where: Path) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v and " " not in v for v in value):
        raise ToolchainError(f"{where}: {key} must be a list of words (got {value!r})")
    return tuple(value)


def load_recipe(folder: Path) -> Recipe:
    where = folder / "build.toml"
    try:
        data = tomllib.loads(where.read_text(encoding="utf-8"))
        go_mod = (folder / "go.mod").read_text(encoding="utf-8")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ToolchainError(f"{folder.name}: {exc}") from None
    module = data.get("module")
    if not isinstance(module, str):
        raise ToolchainError(f"{where}: module must name the Go module whose version the tool is")
    binaries = _table(data, "binaries", where)
    if not binaries:
        raise ToolchainError(f"{where}: [binaries] names no binary")
    by_file: dict[str, list[str]] = {}
    for package in binaries.values():
        by_file.setdefault(exec_name(package), []).append(package)
    clash = sorted(packages for packages in by_file.values() if len(packages) > 1)
    if clash:
        raise ToolchainError(
            f"{where}: [binaries] {' and '.join(clash[0])} are built by one go command, which would write "
            f"both to {exec_name(clash[0][0])}: a package may appear once and no two may end in the same name"
        )
    release = data.get("release", "")
    if not isinstance(release, str):
        raise ToolchainError(f"{where}: release must be a string such as v4.25.0")
    command = data.get("version_command", [])
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        raise ToolchainError(f"{where}: version_command must be a list of strings")
    tags, debian = _strings(data, "tags", where), _strings(data, "debian", where)
    cgo = data.get("cgo", False)
    if not isinstance(cgo, bool):
        raise ToolchainError(f"{where}: cgo must be true or false (got {cgo!r})")
    if debian and not cgo:
        raise ToolchainError(f"{where}: debian names C packages, which only a cgo = true build uses")
    go = data.get("go", "")
    if not isinstance(go, str) or (go and not re.fullmatch(r"go\d+\.\d+\.\d+", go)):
        raise ToolchainError(
            f"{where}: go must name a Go release such as go1.27.3 (GOTOOLCHAIN for this tool), got {go!r}"
        )
    return Recipe(
        name=folder.name,
        folder=folder,
        module=module,
        version=module_version(go_mod, module),
        binaries=binaries,
        stamp=_table(data, "stamp", where),
        files=_table(data, "files", where),
        embed=_table(data, "embed", where),
        version_command=tuple(command),
        release=release,
        tags=tags,
        cgo=cgo,
        debian=debian,
        go=go,
    )


def recipes(wrappers: Path = WRAPPERS) -> dict[str, Recipe]:
    return {p.parent.name: load_recipe(p.parent) for p in sorted(wrappers.glob("*/build.toml"))}


def select(all_recipes: Mapping[str, Recipe], only: str | None) -> list[Recipe]:
    if not only:
        return list(all_recipes.values())
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in all_recipes]
    if unknown:
        raise ToolchainError(
            f"--only {only}: no tool {', '.join(unknown)}; the tools: {', '.join(all_recipes)}"
        )
    return [all_recipes[n] for n in names]


@dataclass(frozen=True)
class Sums:
    """A wrapper's SHA256SUMS: the Go release the digests were recorded with, and file -> sha256."""

    go: str
    digests: Mapping[str, str]

    @classmethod
    def parse(cls, text: str) -> Sums:
        go, digests = "", {}
        for line in text.splitlines():
            if line.startswith("#"):
                match = re.search(r"\bgo(\d+\.\d+(?:\.\d+)?)\b", line)
                go = go or (f"go{match.group(1)}" if match else "")
                continue
            if line.strip():
                digest, name = line.split(maxsplit=1)
                digests[name.strip().lstrip("*")] = digest
        return cls(go, digests)

    def render(self, recipe: Recipe) -> str:
        head = (
            f"# {recipe.name} ({recipe.module} {recipe.version}) built by scripts/toolchain with {self.go}\n"
        )
        return head + "".join(f"{self.digests[name]}  {name}\n" for name in sorted(self.digests))

    def covers(self, outputs: Iterable[str]) -> bool:
        return all(name in self.digests for name in outputs)


def read_sums(recipe: Recipe) -> Sums | None:
    path = recipe.folder / SUMS
    return Sums.parse(path.read_text(encoding="utf-8")) if path.exists() else None


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# --- the cache ---------------------------------------------------------------------------------------


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("VKE_GPU_DRA_TOOLCHAIN_CACHE"):
        return Path(env["VKE_GPU_DRA_TOOLCHAIN_CACHE"]).expanduser()
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "vke-gpu-dra" / "toolchain"


def shared_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    given = env.get("VKE_GPU_DRA_SHARED_TOOLCHAIN")
    return Path(given).expanduser() if given else ROOT.parent / "shared" / "toolchain"


def tool_dir(recipe: Recipe, cache: Path) -> Path:
    return cache / f"{recipe.name}-{recipe.version}-{recipe.key()[:16]}"


def read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def locate(name: str, cache: Path | None = None, wrappers: Path = WRAPPERS) -> Path | None:
    """The folder of tool `name` built for the current pins, or None (nothing is checked but the manifest:
    the tests call this on every run)."""
    folder = wrappers / name
    if not (folder / "build.toml").exists():
        return None
    recipe = load_recipe(folder)
    path = tool_dir(recipe, cache or cache_root())
    manifest = read_manifest(path)
    if manifest is None or not all((path / name).exists() for name in recipe.outputs):
        return None
    return path


def kube_assets(minor: str, cache: Path | None = None, wrappers: Path = WRAPPERS) -> Path | None:
    """A folder with etcd, kube-apiserver, kube-scheduler and kube-controller-manager of Kubernetes
    `minor` ("1.34", "1.37"): what $KUBEBUILDER_ASSETS names for envtest. None when either is not built."""
    cache = cache or cache_root()
    kube, etcd = locate(KUBERNETES[minor], cache, wrappers), locate(ETCD, cache, wrappers)
    if kube is None or etcd is None:
        return None
    assets = cache / "assets" / f"{kube.name}+{etcd.name}"
    if not (assets / "kube-apiserver").exists():
        staging = assets.with_name(f".{assets.name}.{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for binary in ASSET_BINARIES:
            (staging / binary).symlink_to((etcd if binary == ETCD else kube) / binary)
        try:
            staging.rename(assets)
        except OSError:  # another process made it first
            shutil.rmtree(staging, ignore_errors=True)
    return assets


# --- building ----------------------------------------------------------------------------------------


def go_env(*, cgo: bool = False, toolchain: str = "") -> dict[str, str]:
    """The go commands' environment: the machine's Go (GOTOOLCHAIN=local) unless `toolchain` names the Go
    release a tool needs (go1.27.3), which the go command then takes from the Go module proxy."""
    env = dict(os.environ)
    env.update({"CGO_ENABLED": "1" if cgo else "0", "GOFLAGS": GO_FLAGS, "GOTOOLCHAIN": toolchain or "local"})
    env["GOWORK"] = "off"
    return env


def go_version(env: Mapping[str, str] | None = None) -> str:
    """The Go release the go commands run under `env` use (a tool's own, else the machine's)."""
    go = shutil.which("go")
    if go is None:
        raise ToolchainError(
            "go is not on PATH: the toolchain is built with Go 1.26 from the Go module proxy "
            "(https://go.dev/doc/install), or copied from ../shared/toolchain"
        )
    return _run([go, "env", "GOVERSION"], cwd=ROOT, env=env).strip()


def _run(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None) -> str:
    result = subprocess.run(
        list(argv), cwd=cwd, env=dict(env or go_env()), capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip()
        raise ToolchainError(f"`{' '.join(argv)}` in {cwd} failed (exit {result.returncode}):\n{output}")
    return result.stdout


def module_file(spec: str, work: Path, env: Mapping[str, str] | None = None) -> Path:
    """`module:path` -> that file in the module cache (the module is downloaded as go.sum pins it)."""
    module, _, inner = spec.partition(":")
    # `go mod download` fetches the version go.mod requires (into the module cache) and names its folder.
    answer = _run(["go", "mod", "download", "-json", module], cwd=work, env=env)
    directory = str(json.loads(answer).get("Dir", ""))
    path = Path(directory) / inner
    if not directory or not path.is_file():
        raise ToolchainError(f"{spec}: not in {module} as go.mod pins it ({directory or 'not downloaded'})")
    return path


def build(recipe: Recipe, staging: Path) -> None:
    """Build `recipe` into `staging` (binaries and files), in a scratch copy of its wrapper."""
    with tempfile.TemporaryDirectory(prefix=f"toolchain-{recipe.name}-") as scratch:
        work = Path(scratch) / "src"
        shutil.copytree(recipe.folder, work)
        for target, spec in recipe.embed.items():
            destination = work / target
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(module_file(spec, work, recipe.env()), destination)
        ldflags = recipe.ldflags()
        own = sorted(package for package in recipe.binaries.values() if package.startswith("./"))
        if own:  # this repository's own Go code (a main of the wrapper) is vetted before it is built
            _run(["go", "vet", *own], cwd=work, env=recipe.env())
        tags = ["-tags", ",".join(recipe.tags)] if recipe.tags else []
        # One go command for all the binaries: the package graph is loaded once and the links run side by
        # side; each binary is the same as built alone.
        out = Path(scratch) / "bin"
        out.mkdir()
        packages = sorted(recipe.binaries.values())
        argv = ["go", "build", *tags, "-ldflags", ldflags, "-o", f"{out}{os.sep}", *packages]
        try:
            _run(argv, cwd=work, env=recipe.env())
        except ToolchainError as exc:
            if not recipe.cgo:
                raise
            needs = " ".join(["gcc", *recipe.debian])
            raise ToolchainError(
                f"{exc}\n{recipe.name} is built with cgo: it needs a C compiler and the headers of its "
                f"Debian packages (apt-get install {needs})"
            ) from None
        for name, package in sorted(recipe.binaries.items()):
            shutil.move(out / exec_name(package), staging / name)
        for name, spec in sorted(recipe.files.items()):
            shutil.copyfile(module_file(spec, work, recipe.env()), staging / name)
            (staging / name).chmod(0o755)


def shared_copies(recipe: Recipe, sums: Sums | None, shared: Path) -> dict[str, Path] | None:
    """Files under `shared` with the recorded SHA256 of each output, found by name; None unless all are."""
    if sums is None or not sums.covers(recipe.outputs) or not shared.is_dir():
        return None
    found: dict[str, Path] = {}
    for path in sorted(shared.rglob("*")):
        name = path.name
        if (
            name in recipe.outputs
            and name not in found
            and path.is_file()
            and sha256(path) == sums.digests[name]
        ):
            found[name] = path
    return found if len(found) == len(recipe.outputs) else None


@dataclass
class Outcome:
    recipe: Recipe
    path: Path
    source: str  # built, cached, shared
    seconds: float
    version_line: str = ""


def verify_cached(path: Path, recipe: Recipe) -> bool:
    manifest = read_manifest(path)
    if manifest is None:
        return False
    digests = manifest.get("files", {})
    return all(
        (path / name).is_file() and digests.get(name) == sha256(path / name) for name in recipe.outputs
    )


def ensure(recipe: Recipe, cache: Path, shared: Path, *, say: Any = print) -> Outcome:
    """The tool's folder in the cache: reused when its manifest checks out, else copied from `shared`
    (SHA256 as recorded) or built."""
    path = tool_dir(recipe, cache)
    if verify_cached(path, recipe):
        manifest = read_manifest(path) or {}
        return Outcome(recipe, path, "cached", float(manifest.get("seconds", 0.0)))
    if path.exists():
        say(f"toolchain: {path.name} is incomplete or altered; building it again")
        shutil.rmtree(path)
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{recipe.name}-", dir=cache))
    staging.chmod(0o755)  # mkdtemp's 0700 would keep the tools from other users
    try:
        sums = read_sums(recipe)
        begin = time.monotonic()
        copies = shared_copies(recipe, sums, shared)
        if copies is not None:
            for name, source in copies.items():
                shutil.copyfile(source, staging / name)
                (staging / name).chmod(0o755)
            source_kind, go = "shared", sums.go if sums else ""
        else:
            say(f"toolchain: building {recipe.name} ({recipe.module} {recipe.version}) ...")
            go = go_version(recipe.env())
            build(recipe, staging)
            source_kind = "built"
        seconds = time.monotonic() - begin
        digests = {name: sha256(staging / name) for name in recipe.outputs}
        if source_kind == "built" and sums is not None and sums.go == go:
            changed = sorted(n for n, d in digests.items() if n in sums.digests and sums.digests[n] != d)
            if changed:
                raise ToolchainError(
                    f"{recipe.name}: {', '.join(changed)} built with {go} differ from "
                    f"{recipe.folder / SUMS}, recorded with the same Go release: the build is not "
                    "reproducible here"
                )
        manifest = {
            "name": recipe.name, "module": recipe.module, "version": recipe.version, "go": go,
            "source": source_kind, "seconds": round(seconds, 1), "key": recipe.key(), "files": digests,
        }  # fmt: skip
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        try:
            staging.rename(path)
        except OSError:
            if not verify_cached(path, recipe):
                raise
            # Another run (scripts/setup's helm beside scripts/toolchain) put the same tool there first.
            shutil.rmtree(staging, ignore_errors=True)
            return Outcome(recipe, path, "cached", seconds)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Outcome(recipe, path, source_kind, seconds)


def version_line(outcome: Outcome) -> str:
    """The first line of the tool's version command, or "" when it has none."""
    command = outcome.recipe.version_command
    if not command:
        return f"release {outcome.recipe.release}" if outcome.recipe.release else ""
    argv = [str(outcome.path / command[0]), *command[1:]]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    lines = (result.stdout or result.stderr).strip().splitlines()
    return lines[0].strip() if lines else f"(exit {result.returncode}, no output)"


def record(recipe: Recipe, cache: Path) -> Path:
    """Write SHA256SUMS from the tool's build in the cache (with the Go release it was built with)."""
    path = tool_dir(recipe, cache)
    manifest = read_manifest(path)
    if manifest is None or manifest.get("source") != "built":
        raise ToolchainError(f"{recipe.name}: build it first (scripts/toolchain --only {recipe.name})")
    sums = Sums(str(manifest["go"]), dict(manifest["files"]))
    target = recipe.folder / SUMS
    target.write_text(sums.render(recipe), encoding="utf-8")
    return target


# --- what the proxy does not serve ---------------------------------------------------------------------


UNAVAILABLE = "unavailable.toml"


@dataclass(frozen=True)
class Unavailable:
    """A module the tiers would build if the proxy served it, and what runs instead."""

    name: str
    module: str  # path@version, as `go list -m` takes it
    instead: str


def unavailable(wrappers: Path = WRAPPERS) -> list[Unavailable]:
    data = tomllib.loads((wrappers / UNAVAILABLE).read_text(encoding="utf-8"))
    return [Unavailable(name, str(entry["module"]), str(entry["instead"])) for name, entry in data.items()]


def proxy_answer(module: str, timeout: float = 60.0) -> str:
    """What the Go module proxy says of `module` today: its version, or the first line of its refusal
    (`go list -m`, in a scratch module, nothing downloaded but the answer)."""
    env = {**go_env(), "GOFLAGS": "-mod=mod"}
    with tempfile.TemporaryDirectory(prefix="toolchain-probe-") as scratch:
        (Path(scratch) / "go.mod").write_text("module probe\n\ngo 1.26\n")
        try:
            result = subprocess.run(
                ["go", "list", "-m", "-f", "{{.Version}}", module],
                cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return f"no answer within {timeout:.0f} s"
    if result.returncode == 0:
        return f"served ({result.stdout.strip()}): build it"
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    refused = [
        line for line in lines if "server response" in line or "Forbidden" in line or "not found" in line
    ]
    return " ".join(refused[-2:] or lines[-1:]) or f"exit {result.returncode}"


# --- the command ------------------------------------------------------------------------------------


def summary(outcome: Outcome) -> str:
    took = f"built in {outcome.seconds:.0f} s" if outcome.source == "built" else outcome.source
    if outcome.source == "cached":
        took = f"cached (built in {outcome.seconds:.0f} s)"
    elif outcome.source == "shared":
        took = "copied from the shared toolchain (SHA256 as recorded)"
    version = f"  [{outcome.version_line}]" if outcome.version_line else ""
    return f"{outcome.recipe.name:<18} {outcome.recipe.version:<40} {took}{version}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/toolchain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated tools (folders of toolchain/)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="build nothing; exit 1 when a tool is not built")
    mode.add_argument("--path", metavar="NAME", help="print the folder of one built tool")
    mode.add_argument("--record", action="store_true", help="write SHA256SUMS from the builds in the cache")
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except ToolchainError as exc:
        print(f"toolchain: {exc}", file=sys.stderr)
        return 1


def _main(args: argparse.Namespace) -> int:
    all_recipes = recipes()
    cache = cache_root()
    if args.path:
        select(all_recipes, args.path)
        found = locate(args.path, cache)
        if found is None:
            print(
                f"toolchain: {args.path} is not built (scripts/toolchain --only {args.path})", file=sys.stderr
            )
            return 1
        print(found)
        return 0
    chosen = select(all_recipes, args.only)
    if args.check:
        missing = [r.name for r in chosen if locate(r.name, cache) is None]
        for name in missing:
            print(f"toolchain: {name} is not built", file=sys.stderr)
        return 1 if missing else 0
    if args.record:
        for recipe in chosen:
            print(f"toolchain: wrote {record(recipe, cache).relative_to(ROOT)}")
        return 0
    begin = time.monotonic()
    shared = shared_root()
    print(f"toolchain: cache {cache}" + (f"; shared binaries from {shared}" if shared.is_dir() else ""))
    for recipe in chosen:
        outcome = ensure(recipe, cache, shared)
        outcome.version_line = version_line(outcome)
        print(f"toolchain: {summary(outcome)}", flush=True)
    print(f"toolchain: {len(chosen)} tools ready in {time.monotonic() - begin:.0f} s")
    if not args.only and shutil.which("go"):
        for item in unavailable():
            print(f"toolchain: not built: {item.name} ({item.module}): {proxy_answer(item.module)}")
            print(f"toolchain:   instead: {item.instead}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
