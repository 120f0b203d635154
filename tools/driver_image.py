"""The driver's image built from driver/Dockerfile's recipe with no daemon and no registry, as an OCI archive
that `ctr images import` reads (the node tier, `scripts/node`, a machine without Docker).

    python3 -m tools.driver_image                 build (or reuse) the image; prints its name, digest, archive
    python3 -m tools.driver_image --refresh       read Debian's package lists again first

What it follows, step by step, is driver/Dockerfile itself: its build arguments (the Python line and Debian
release of `PYTHON_IMAGE`, the setuptools and wheel versions, VERSION), the runtime stage's labels,
environment, user and entrypoint are read from the file, and each RUN step the file holds must be one this
module knows how to follow (`FOLLOWED_RUNS`), so the two recipes cannot drift apart unnoticed: a changed step
is an error naming it.

* **Base layer, from Debian's packages** instead of the `python:<line>-slim-<release>` image: the Python of
  that line and Debian release (`python3.X-minimal`, `libpython3.X-stdlib`), libstdc++ (grpcio), `mount`
  (the plugin mounts the MPS tmpfs), `dash` (a shell) and `coreutils` (the MPS control daemon's `chroot`,
  the probes' `cat`, as Debian's required set has them in the python image), with `netbase` and `tzdata` as
  the python image has them, and every package they depend on, as apt resolves it against an empty system.
  The packages come from the machine's own Debian sources through a private apt state in the cache (the
  machine's apt is not touched); apt checks each against the signed release files. They are unpacked with
  `dpkg-deb -x` (no maintainer scripts run) into a merged-/usr tree; the standard library is byte-compiled
  and `ld.so.cache` written, as their maintainer scripts would; documentation is left out as Debian's slim
  images leave it out (each package's copyright stays); `/var/lib/dpkg/status` lists the packages (image
  scanners read it).
* **The wheels**, as the builder stage makes them: `pip wheel --no-build-isolation --constraint
  constraints.txt` of core/, kube/ and driver/ (copied first, as the Dockerfile's COPY does), with the
  Dockerfile's setuptools and wheel in a virtualenv of the cache; the dependencies' wheels come from PyPI.
* **The install layer**, as the runtime stage's RUN: `pip install --no-index` of the driver from those wheels,
  run with the image's own Python inside the base tree (a private mount namespace, an overlay whose upper
  folder becomes the layer, chroot), with pip run from its wheel so that no pip is left to uninstall; then
  `dra-gpu-kubelet-plugin --help` with the image's environment. Anything the step writes outside /usr/local
  is an error.

Reproducible: the layers are sorted tars of root's files dated 0 (`tools.oci_image`), bytecode is
hash-checked (SOURCE_DATE_EPOCH), and the archive is cached under a key of every input (the recipe, the
Debian packages' versions, the project's image inputs, the pins); the same inputs give the same digest.
The differences from the Docker-built image are listed in docs/image-supply-chain.md.

Needs root (mount namespaces, overlayfs, chroot), apt-get and dpkg-deb (Debian), and network access to the
machine's Debian mirror and PyPI the first time. Standard library only: it runs before the virtualenvs exist.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tools import oci_image, toolchain
from tools.oci_image import Image, ImageError, Settings

#: The repository (the build runs from its root, as scripts/toolchain does).
ROOT = toolchain.ROOT
DOCKERFILE = ROOT / "driver" / "Dockerfile"
#: Changes whenever the way the image is put together here changes: part of the cache key.
RECIPE = "1"
#: Archives kept in the cache, newest first (a test may build two revisions of the same code).
KEEP = 3
#: The repository of images built here (never pushed; `localhost` marks it as local, as for kind).
REPOSITORY = "localhost/vke-gpu-dra/dra-gpu-kubelet-plugin"
#: pip, run from its wheel inside the image (the python image's own pip is removed by the recipe anyway).
PIP_VERSION = "26.3"
#: Debian packages the base layer is made of (with what they depend on); `{python}` is the Python line.
DEBIAN_ROOTS = (
    "python{python}-minimal",
    "libpython{python}-stdlib",
    "libstdc++6",
    "mount",
    "dash",
    "coreutils",
    "netbase",
    "tzdata",
)
#: The RUN steps of driver/Dockerfile this module follows (whitespace folded), per stage.
FOLLOWED_RUNS = {
    "builder": (
        'pip install --no-cache-dir "setuptools==${SETUPTOOLS_VERSION}" "wheel==${WHEEL_VERSION}"',
        "pip wheel --no-cache-dir --no-build-isolation --constraint constraints.txt --wheel-dir /wheels "
        "./core ./kube .",
    ),
    "runtime": (
        "--mount=type=bind,from=builder,source=/wheels,target=/wheels "
        "SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH} "
        'pip install --no-cache-dir --no-index --find-links=/wheels "vke-gpu-dra-driver==${VERSION}" '
        "&& pip uninstall --yes pip && dra-gpu-kubelet-plugin --help >/dev/null",
    ),
}
#: What the Docker-built image's environment has from its base image (python:*-slim) that still holds.
BASE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")
#: Documentation Debian's slim images leave out (dpkg path-exclude); each package's copyright stays.
SLIM_EXCLUDE = ("usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian", "usr/share/groff")
PASSWD = "root:x:0:0:root:/root:/bin/sh\n"
GROUP = "root:x:0:\n"
TIMEOUT = 600.0
#: Where the host's tools (apt-get, chroot, unshare, ldconfig) are looked for.
HOST_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class RecipeError(ValueError):
    """driver/Dockerfile holds something this builder does not follow."""


@dataclass(frozen=True)
class Recipe:
    """What driver/Dockerfile says, read from it."""

    args: Mapping[str, str]
    runs: Mapping[str, tuple[str, ...]]
    env: tuple[str, ...]
    labels: Mapping[str, str]
    user: str
    entrypoint: tuple[str, ...]
    python: str = field(init=False)
    debian: str = field(init=False)

    def __post_init__(self) -> None:
        image = self.args.get("PYTHON_IMAGE", "")
        match = re.fullmatch(r"python:(3\.\d+)(?:\.\d+)?-slim-([a-z]+)", image)
        if not match:
            raise RecipeError(
                f"driver/Dockerfile: ARG PYTHON_IMAGE={image!r}; "
                "expected python:<3.X[.Y]>-slim-<debian release>"
            )
        object.__setattr__(self, "python", match.group(1))
        object.__setattr__(self, "debian", match.group(2))

    def expand(self, text: str, values: Mapping[str, str]) -> str:
        return re.sub(r"\$\{(\w+)\}", lambda m: values.get(m.group(1), self.args.get(m.group(1), "")), text)


def instructions(text: str) -> Iterator[tuple[str, str]]:
    """(instruction, arguments) of a Dockerfile: comments dropped, continuation lines joined."""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            keyword, _, rest = whole.partition(" ")
            yield keyword.upper(), " ".join(rest.split())
    if pending:
        raise RecipeError("driver/Dockerfile ends inside a continued line")


def _pairs(arguments: str, what: str) -> dict[str, str]:
    pairs = {}
    for word in shlex.split(arguments):
        key, sep, value = word.partition("=")
        if not sep:
            raise RecipeError(f"driver/Dockerfile: {what} {word!r} is not key=value")
        pairs[key] = value
    return pairs


@dataclass
class _Stage:
    """What one stage of the Dockerfile sets (the last one's is the image's)."""

    runs: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    user: str = ""
    entrypoint: tuple[str, ...] = ()

    def take(self, keyword: str, arguments: str) -> None:
        if keyword == "RUN":
            self.runs.append(arguments)
        elif keyword == "ENV":
            self.env += [f"{k}={v}" for k, v in _pairs(arguments, "ENV").items()]
        elif keyword == "LABEL":
            self.labels.update(_pairs(arguments, "LABEL"))
        elif keyword == "USER":
            self.user = arguments
        elif keyword == "ENTRYPOINT":
            try:
                self.entrypoint = tuple(json.loads(arguments))
            except (ValueError, TypeError):
                raise RecipeError(f"driver/Dockerfile: ENTRYPOINT {arguments!r} is not a JSON list") from None


def read_recipe(dockerfile: Path = DOCKERFILE) -> Recipe:
    """The recipe as the Dockerfile states it: global and stage ARG defaults, each stage's RUN steps, and
    the last (runtime) stage's ENV, LABEL, USER and ENTRYPOINT."""
    try:
        text = dockerfile.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError(f"{dockerfile}: {exc.strerror}") from None
    args: dict[str, str] = {}
    stages: dict[str, _Stage] = {}
    stage = _Stage()
    for keyword, arguments in instructions(text):
        if keyword == "ARG":
            name, _, default = arguments.partition("=")
            if default or name not in args:
                args[name] = default.strip('"')
        elif keyword == "FROM":
            words = arguments.split()
            stage = stages[words[2] if len(words) == 3 and words[1].upper() == "AS" else "runtime"] = _Stage()
        else:
            stage.take(keyword, arguments)
    runs = {name: tuple(each.runs) for name, each in stages.items()}
    recipe = Recipe(args, runs, tuple(stage.env), stage.labels, stage.user, stage.entrypoint)
    for name, steps in FOLLOWED_RUNS.items():
        if recipe.runs.get(name, ()) != steps:
            raise RecipeError(
                f"driver/Dockerfile's {name} stage runs {list(recipe.runs.get(name, ()))}; "
                f"tools/driver_image.py follows {list(steps)}: change both together"
            )
    return recipe


# ---- Debian packages ----


def _run(argv: Sequence[str], what: str, **kwargs: object) -> str:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=TIMEOUT, check=False, **kwargs
        )  # type: ignore[call-overload]
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"{what}: {exc}") from None
    if done.returncode != 0:
        raise ImageError(
            f"{what} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}"
        )
    return str(done.stdout)


@dataclass(frozen=True)
class Apt:
    """apt-get with a private state folder: the machine's sources, an empty package status."""

    state: Path

    def options(self) -> list[str]:
        return [
            f"-oDir::State::Lists={self.state / 'lists'}",
            f"-oDir::State::status={self.state / 'status'}",
            f"-oDir::Cache={self.state / 'cache'}",
            "-oDebug::NoLocking=1",
            "-oAPT::Sandbox::User=root",
        ]

    def update(self, refresh: bool) -> None:
        (self.state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (self.state / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        (self.state / "status").touch()
        if refresh or not any((self.state / "lists").glob("*_Packages*")):
            _run(["apt-get", *self.options(), "-qq", "update"], "apt-get update (the image's package lists)")

    def resolve(self, roots: Sequence[str]) -> list[tuple[str, str]]:
        """(package, version) of `roots` and everything they depend on (no recommends), as apt would
        install them on an empty system."""
        out = _run(
            ["apt-get", *self.options(), "-s", "install", "--no-install-recommends", *roots],
            f"apt-get resolving {' '.join(roots)}",
        )
        found = re.findall(r"^Inst (\S+) \((\S+) ", out, flags=re.M)
        if not found:
            raise ImageError(f"apt-get resolved no packages for {' '.join(roots)}:\n{out[-1000:]}")
        return sorted(found)

    def download(self, packages: Sequence[tuple[str, str]], into: Path) -> list[Path]:
        into.mkdir(parents=True, exist_ok=True)
        wanted = {f"{name}_{version.replace(':', '%3a')}_" for name, version in packages}
        missing = [
            f"{n}={v}" for n, v in packages if not list(into.glob(f"{n}_{v.replace(':', '%3a')}_*.deb"))
        ]
        if missing:
            _run(["apt-get", *self.options(), "-qq", "download", *missing], "apt-get download", cwd=into)
        debs = sorted(p for p in into.glob("*.deb") if any(p.name.startswith(w) for w in wanted))
        if len(debs) != len(packages):
            raise ImageError(f"apt-get download gave {len(debs)} packages of {len(packages)} in {into}")
        return debs


def _merge_usr(root: Path) -> None:
    """/bin, /sbin and /lib* become links into /usr, as on every Debian system since bookworm."""
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        top = root / name
        if not top.is_dir() or top.is_symlink():
            continue
        target = root / "usr" / name
        target.mkdir(parents=True, exist_ok=True)
        for item in sorted(top.iterdir()):
            dest = target / item.name
            if dest.exists() or dest.is_symlink():
                if item.is_dir() and not item.is_symlink() and dest.is_dir():
                    shutil.copytree(item, dest, symlinks=True, dirs_exist_ok=True)
                    shutil.rmtree(item)
                    continue
                raise ImageError(f"merged /usr: /{name}/{item.name} and /usr/{name}/{item.name} both exist")
            item.rename(dest)
        top.rmdir()
        top.symlink_to(f"usr/{name}")


def _slim(root: Path) -> None:
    for relative in SLIM_EXCLUDE:
        shutil.rmtree(root / relative, ignore_errors=True)
    doc = root / "usr" / "share" / "doc"
    if doc.is_dir():
        for package in doc.iterdir():
            if package.is_dir() and not package.is_symlink():
                for item in package.iterdir():
                    if item.name != "copyright":
                        shutil.rmtree(item) if item.is_dir() and not item.is_symlink() else item.unlink()


def _dpkg_status(debs: Sequence[Path]) -> str:
    records = []
    for deb in debs:
        control = _run(["dpkg-deb", "-f", str(deb)], f"dpkg-deb -f {deb.name}").rstrip("\n")
        lines = control.splitlines()
        records.append("\n".join([lines[0], "Status: install ok installed", *lines[1:]]))
    return "\n\n".join(records) + "\n"


def _chroot(root: Path, argv: Sequence[str], env: Mapping[str, str], what: str) -> str:
    """`argv` run inside `root` with only `env` (and the image's PATH)."""
    chroot = shutil.which("chroot", path=HOST_PATH) or "chroot"
    return _run([chroot, str(root), *argv], what, env={"PATH": BASE_ENV[0].split("=", 1)[1], **env})


def build_base(debs: Sequence[Path], root: Path, python: str) -> None:
    """The base tree: the packages unpacked, /usr merged, slimmed, the system files their maintainer
    scripts would write (ld.so.cache, compiled standard library), and a root account."""
    for deb in debs:
        _run(["dpkg-deb", "-x", str(deb), str(root)], f"dpkg-deb -x {deb.name}")
    _merge_usr(root)
    _slim(root)
    for name in ("dev", "proc", "sys", "run", "root", "var/lib/dpkg", "usr/local/bin"):
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "etc" / "passwd").write_text(PASSWD)
    (root / "etc" / "group").write_text(GROUP)
    (root / "var" / "lib" / "dpkg" / "status").write_text(_dpkg_status(debs))
    _run(["ldconfig", "-r", str(root)], "ldconfig -r (the image's ld.so.cache)")
    # ldconfig's own cache of what it saw (inode numbers, times): not reproducible, and only a speed-up
    (root / "var" / "cache" / "ldconfig" / "aux-cache").unlink(missing_ok=True)
    _chroot(
        root,
        [f"/usr/bin/python{python}", "-m", "compileall", "-q", "-j", "1",
         "--invalidation-mode", "checked-hash", f"/usr/lib/python{python}"],
        {"SOURCE_DATE_EPOCH": "0", "HOME": "/root"},
        "compiling the standard library in the image",
    )  # fmt: skip


# ---- wheels and the install layer ----


def build_wheels(recipe: Recipe, cache: Path, into: Path, epoch: str) -> None:
    """The builder stage: the pinned build backend in a virtualenv, then `pip wheel` of copies of core/,
    kube/ and driver/ (their sources only, as the Dockerfile's COPY), constrained by constraints.txt."""
    venv = cache / f"builder-{recipe.args['SETUPTOOLS_VERSION']}-{recipe.args['WHEEL_VERSION']}"
    if not (venv / "bin" / "pip").exists():
        _run([sys.executable, "-m", "venv", str(venv)], "a virtualenv for the wheel build")
        _run(
            [str(venv / "bin" / "pip"), "install", "-q", f"setuptools=={recipe.args['SETUPTOOLS_VERSION']}",
             f"wheel=={recipe.args['WHEEL_VERSION']}"],
            "pip install of the build backend",
        )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="driver-image-src.") as scratch:
        build = Path(scratch)
        for name in ("core", "kube"):
            _copy_package(ROOT / name, build / name)
        _copy_package(ROOT / "driver", build / "driver")
        shutil.copy2(ROOT / "constraints.txt", build / "constraints.txt")
        _run(
            [str(venv / "bin" / "pip"), "wheel", "-q", "--no-build-isolation",
             "--constraint", "constraints.txt", "--wheel-dir", str(into), "./core", "./kube", "./driver"],
            "pip wheel (the builder stage)",
            cwd=build, env={**os.environ, "SOURCE_DATE_EPOCH": epoch, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )  # fmt: skip
    pip = cache / f"pip-{PIP_VERSION}-py3-none-any.whl"
    if not pip.exists():
        _run(
            [str(venv / "bin" / "pip"), "download", "-q", "--no-deps", "--only-binary", ":all:",
             "--dest", str(cache), f"pip=={PIP_VERSION}"],
            f"pip download pip=={PIP_VERSION}",
        )  # fmt: skip


def _copy_package(source: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        if (source / name).exists():
            shutil.copy2(source / name, dest / name)
    shutil.copytree(
        source / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    )


INSTALL_SCRIPT = r"""
set -eu
mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$UPPER,workdir=$WORK" "$MERGED"
mount -t tmpfs tmpfs "$MERGED/tmp"
mkdir "$MERGED/tmp/wheels"
mount --bind -o ro "$WHEELS" "$MERGED/tmp/wheels"
cp "$PIP" "$MERGED/tmp/pip.whl"
mount -t tmpfs tmpfs "$MERGED/dev"
touch "$MERGED/dev/null"
mount --bind /dev/null "$MERGED/dev/null"
mount -t proc proc "$MERGED/proc"
env -i $IMAGE_ENV HOME=/root SOURCE_DATE_EPOCH="$EPOCH" chroot "$MERGED" \
  "/usr/bin/python$PYTHON" /tmp/pip.whl/pip install -q --no-cache-dir --no-index --find-links=/tmp/wheels \
  --break-system-packages --root-user-action=ignore "vke-gpu-dra-driver==$VERSION"
env -i $IMAGE_ENV HOME=/root chroot "$MERGED" dra-gpu-kubelet-plugin --help >/dev/null
"""


def install_layer(recipe: Recipe, base: Path, *, wheels: Path, pip: Path, scratch: Path, epoch: str) -> Path:
    """The runtime stage's RUN in a private mount namespace: the upper folder of an overlay on the base
    tree, holding what `pip install` wrote; anything outside /usr/local is an error."""
    upper, work, merged = scratch / "upper", scratch / "work", scratch / "merged"
    for folder in (upper, work, merged):
        folder.mkdir()
    env = {
        "BASE": str(base), "UPPER": str(upper), "WORK": str(work), "MERGED": str(merged),
        "WHEELS": str(wheels), "PIP": str(pip), "EPOCH": epoch, "PYTHON": recipe.python,
        "VERSION": recipe.args["VERSION"], "IMAGE_ENV": " ".join(image_env(recipe)),
        "PATH": HOST_PATH,
    }  # fmt: skip
    _run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", INSTALL_SCRIPT],
        "the install step",
        env=env,
    )
    shutil.rmtree(work, ignore_errors=True)
    outside = []
    for path in upper.rglob("*"):
        relative = path.relative_to(upper).as_posix()
        folder_above = relative in ("usr", "usr/local") and path.is_dir() and not path.is_symlink()
        if not (relative.startswith("usr/local/") or folder_above):
            outside.append(relative)
    if outside:
        raise ImageError(f"the install step wrote outside /usr/local: {sorted(outside)[:10]}")
    return upper


def image_env(recipe: Recipe) -> list[str]:
    """The image's environment: the base image's PATH and LANG, then the runtime stage's ENV."""
    names = {item.split("=", 1)[0] for item in recipe.env}
    return [item for item in BASE_ENV if item.split("=", 1)[0] not in names] + list(recipe.env)


def settings(recipe: Recipe, revision: str, source_url: str) -> Settings:
    values = {"VERSION": recipe.args["VERSION"], "REVISION": revision, "SOURCE_URL": source_url}
    labels = {key: recipe.expand(value, values) for key, value in recipe.labels.items()}
    return Settings(
        cmd=(), entrypoint=recipe.entrypoint, env=tuple(image_env(recipe)), labels=labels, user=recipe.user
    )


# ---- the whole build, cached ----


def cache_root() -> Path:
    return toolchain.cache_root().parent / "images"


def image_inputs_hash() -> str:
    """sha256 over the files the image is made from (the Dockerfile's build contexts)."""
    digest = hashlib.sha256()
    files = [ROOT / "constraints.txt", DOCKERFILE, Path(__file__)]
    for folder in (ROOT / "core", ROOT / "kube", ROOT / "driver"):
        files += [folder / "pyproject.toml", folder / "README.md"]
        files += [
            p
            for p in (folder / "src").rglob("*")
            if p.is_file()
            and "__pycache__" not in p.parts
            and not any(x.endswith(".egg-info") for x in p.parts)
        ]
    for path in sorted(f for f in files if f.exists()):
        digest.update(
            path.relative_to(ROOT).as_posix().encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest()
        )
    return digest.hexdigest()


def git_revision() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build(
    *, cache: Path | None = None, refresh: bool = False, revision: str = "unknown", source_url: str = ""
) -> Image:
    """The driver image's archive (built, or reused from the cache when every input is the same)."""
    if os.geteuid() != 0:
        raise ImageError(
            "the driver image is built here as root (mount namespace, overlayfs, chroot); "
            "with Docker, build driver/Dockerfile instead (docs/image-supply-chain.md)"
        )
    for command in ("apt-get", "dpkg-deb", "unshare", "chroot", "ldconfig"):
        if shutil.which(command, path=HOST_PATH) is None:
            raise ImageError(f"the driver image build needs {command} (a Debian machine)")
    recipe = read_recipe()
    cache = cache or cache_root()
    with _locked(cache / ".lock"):
        apt = Apt(cache / "apt")
        apt.update(refresh)
        roots = [root.format(python=recipe.python) for root in DEBIAN_ROOTS]
        packages = apt.resolve(roots)
        epoch = "0"
        key_source = json.dumps(
            [RECIPE, recipe.args, recipe.runs, recipe.env, recipe.labels, recipe.user, recipe.entrypoint,
             packages, PIP_VERSION, image_inputs_hash(), revision, source_url],
            sort_keys=True,
        )  # fmt: skip
        key = hashlib.sha256(key_source.encode()).hexdigest()[:16]
        archive = cache / f"driver-{recipe.args['VERSION']}-{key}.tar"
        record = archive.with_suffix(".json")
        name = f"{REPOSITORY}:{recipe.args['VERSION']}"
        if archive.exists() and record.exists():
            saved = json.loads(record.read_text())
            return Image(saved["name"], saved["digest"], archive, saved["config"])
        debs = apt.download(packages, cache / "debs")
        with tempfile.TemporaryDirectory(dir=cache, prefix=".build-") as scratch_dir:
            scratch = Path(scratch_dir)
            base = scratch / "base"
            base.mkdir()
            build_base(debs, base, recipe.python)
            wheels = scratch / "wheels"
            build_wheels(recipe, cache, wheels, epoch)
            pip = cache / f"pip-{PIP_VERSION}-py3-none-any.whl"
            upper = install_layer(recipe, base, wheels=wheels, pip=pip, scratch=scratch, epoch=epoch)
            image = oci_image.build(
                archive,
                name,
                layers=[oci_image.tree_entries(base), oci_image.tree_entries(upper)],
                settings=settings(recipe, revision, source_url),
            )
        record.write_text(json.dumps({"name": image.name, "digest": image.digest, "config": image.config}))
        older = sorted(cache.glob("driver-*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in [p for p in older if p != archive][KEEP - 1 :]:
            stale.unlink(missing_ok=True)
            stale.with_suffix(".json").unlink(missing_ok=True)
        return image


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.driver_image", description=__doc__.split("\n")[0])
    parser.add_argument("--refresh", action="store_true", help="read Debian's package lists again first")
    parser.add_argument("--revision", default=None, help="the image's revision label (default: git HEAD)")
    parser.add_argument("--source-url", default="", help="the image's source label")
    args = parser.parse_args(argv)
    try:
        image = build(
            refresh=args.refresh, revision=args.revision or git_revision(), source_url=args.source_url
        )
    except (ImageError, RecipeError) as exc:
        print(f"driver image: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"name": image.name, "digest": image.digest, "archive": str(image.archive)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
