"""scripts/toolchain (tools/toolchain.py): the pins, the cache keys, the shared binaries and the cache's
reuse, without Go (the builds themselves run in .ci/run, and the tiers use what they built)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tools import toolchain
from tools.toolchain import Recipe, Sums, ToolchainError

GO_MOD = """module example.local/toolchain/tool

go 1.26.0

require example.com/tool/v2 v2.3.4

require (
\texample.com/other v0.1.0 // indirect
\tk8s.io/kubernetes v1.37.2
)
"""
BUILD_TOML = """# a tool
module = "example.com/tool/v2"
version_command = ["tool", "--version"]

[binaries]
tool = "example.com/tool/v2/cmd/tool"

[stamp]
"example.com/tool/v2/version.Version" = "{version}"
"example.com/tool/v2/version.Minor" = "{minor}"

[files]
helper-script = "example.com/tool/v2:scripts/helper"
"""


def wrapper(tmp_path: Path, name: str = "tool", build_toml: str = BUILD_TOML) -> Path:
    folder = tmp_path / "wrappers" / name
    folder.mkdir(parents=True)
    (folder / "go.mod").write_text(GO_MOD)
    (folder / "go.sum").write_text("example.com/tool/v2 v2.3.4 h1:abc=\n")
    (folder / "build.toml").write_text(build_toml)
    return folder


def write_outputs(argv: list[str]) -> None:
    """What `go build -o DIR/ PACKAGES` leaves: one file per package (for the fakes of `_run`)."""
    if argv[:2] == ["go", "build"]:
        at = argv.index("-o")
        for package in argv[at + 2 :]:
            (Path(argv[at + 1]) / toolchain.exec_name(package)).write_text(package, encoding="utf-8")


def test_the_version_is_the_one_go_mod_requires() -> None:
    assert toolchain.module_version(GO_MOD, "example.com/tool/v2") == "v2.3.4"
    assert toolchain.module_version(GO_MOD, "k8s.io/kubernetes") == "v1.37.2"
    with pytest.raises(ToolchainError, match=r"go\.mod requires no version of example\.com/absent"):
        toolchain.module_version(GO_MOD, "example.com/absent")


def test_a_recipe_reads_build_toml_and_stamps_the_version(tmp_path: Path) -> None:
    recipe = toolchain.load_recipe(wrapper(tmp_path))
    assert (recipe.name, recipe.module, recipe.version) == ("tool", "example.com/tool/v2", "v2.3.4")
    assert recipe.outputs == ["helper-script", "tool"]
    assert recipe.version_command == ("tool", "--version")
    assert recipe.ldflags() == (
        "-s -w -X example.com/tool/v2/version.Minor=3 -X example.com/tool/v2/version.Version=v2.3.4"
    )


def test_a_pseudo_version_names_its_release(tmp_path: Path) -> None:
    toml = 'module = "example.com/tool/v2"\nrelease = "v2.3.4"\n[binaries]\ntool = "x"\n'
    toml += '[stamp]\n"v.V" = "{release}"\n'
    recipe = toolchain.load_recipe(wrapper(tmp_path, build_toml=toml))
    assert recipe.ldflags() == "-s -w -X v.V=v2.3.4"
    outcome = toolchain.Outcome(recipe, tmp_path, "cached", 1.0)
    assert toolchain.version_line(outcome) == "release v2.3.4"


@pytest.mark.parametrize(
    ("build_toml", "message"),
    [
        ('[binaries]\ntool = "x"\n', "module must name the Go module"),
        ('module = "example.com/tool/v2"\n', r"\[binaries\] names no binary"),
        ('module = "example.com/tool/v2"\n[binaries]\ntool = 3\n', r"\[binaries\] must map names to strings"),
        (
            'module = "example.com/tool/v2"\nversion_command = "tool"\n[binaries]\ntool = "x"\n',
            "version_command",
        ),
        (
            'module = "example.com/absent"\n[binaries]\ntool = "x"\n',
            "requires no version of example.com/absent",
        ),
        ('module = "example.com/tool/v2"\nrelease = 4\n[binaries]\ntool = "x"\n', "release must be a string"),
        ("module = \n", "tool: "),
    ],
)
def test_a_bad_build_toml_is_one_error_naming_the_file(tmp_path: Path, build_toml: str, message: str) -> None:
    with pytest.raises(ToolchainError, match=message):
        toolchain.load_recipe(wrapper(tmp_path, build_toml=build_toml))


CGO_TOML = """module = "example.com/tool/v2"
cgo = true
debian = ["libexample-dev"]
tags = ["seccomp", "no_docs"]
[binaries]
tool = "example.com/tool/v2/cmd/tool"
"""


def test_a_cgo_tool_is_built_with_cgo_and_its_tags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = toolchain.load_recipe(wrapper(tmp_path, build_toml=CGO_TOML))
    assert (recipe.cgo, recipe.tags, recipe.debian) == (True, ("seccomp", "no_docs"), ("libexample-dev",))
    plain_toml = 'module = "example.com/tool/v2"\n[binaries]\ntool = "example.com/tool/v2/cmd/tool"\n'
    plain = toolchain.load_recipe(wrapper(tmp_path, "plain", plain_toml))
    assert (plain.cgo, plain.tags, plain.debian) == (False, (), ())
    calls: list[tuple[list[str], str]] = []

    def run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
        calls.append((list(argv), (env or toolchain.go_env())["CGO_ENABLED"]))
        write_outputs(argv)
        return ""

    monkeypatch.setattr(toolchain, "_run", run)
    (tmp_path / "out").mkdir()
    toolchain.build(recipe, tmp_path / "out")
    toolchain.build(plain, tmp_path / "out")
    (cgo_argv, cgo_on), (plain_argv, plain_on) = calls
    assert cgo_argv[:4] == ["go", "build", "-tags", "seccomp,no_docs"] and cgo_on == "1"
    assert "-tags" not in plain_argv and plain_on == "0", "the CGO-off tools build as before"


def test_a_failed_cgo_build_names_the_packages_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = toolchain.load_recipe(wrapper(tmp_path, build_toml=CGO_TOML))

    def fail(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
        raise ToolchainError("`go build` failed (exit 1):\nfatal error: seccomp.h: No such file or directory")

    monkeypatch.setattr(toolchain, "_run", fail)
    with pytest.raises(ToolchainError, match=r"seccomp\.h(.|\n)*apt-get install gcc libexample-dev"):
        toolchain.build(recipe, tmp_path / "out")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("cgo = 1", "cgo must be true or false"),
        ('tags = "seccomp"', "tags must be a list of words"),
        ('tags = ["two words"]', "tags must be a list of words"),
        ('debian = ["libseccomp-dev"]', "debian names C packages, which only a cgo = true build uses"),
    ],
)
def test_bad_cgo_settings_are_one_error(tmp_path: Path, line: str, message: str) -> None:
    toml = f'module = "example.com/tool/v2"\n{line}\n[binaries]\ntool = "x"\n'
    with pytest.raises(ToolchainError, match=message):
        toolchain.load_recipe(wrapper(tmp_path, build_toml=toml))


GO_TOML = (
    'module = "example.com/tool/v2"\ngo = "go1.27.3"\n[binaries]\ntool = "example.com/tool/v2/cmd/tool"\n'
)


def test_a_tool_that_names_its_go_release_alone_builds_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubernetes-1.38 needs Go 1.27: its go commands get GOTOOLCHAIN=go1.27.3, every other tool keeps the
    machine's Go (GOTOOLCHAIN=local), and the Go release recorded is the one that built it."""
    newer = toolchain.load_recipe(wrapper(tmp_path, build_toml=GO_TOML))
    plain_toml = 'module = "example.com/tool/v2"\n[binaries]\ntool = "example.com/tool/v2/cmd/tool"\n'
    plain = toolchain.load_recipe(wrapper(tmp_path, "plain", plain_toml))
    assert (newer.go, plain.go) == ("go1.27.3", "")
    calls: list[tuple[str, str]] = []

    def run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
        toolchain_env = (env or toolchain.go_env())["GOTOOLCHAIN"]
        calls.append((argv[1], toolchain_env))
        write_outputs(argv)
        return "go1.27.3\n" if argv[1:] == ["env", "GOVERSION"] else ""

    monkeypatch.setattr(toolchain, "_run", run)
    (tmp_path / "out").mkdir()
    toolchain.build(newer, tmp_path / "out")
    toolchain.build(plain, tmp_path / "out")
    assert calls == [("build", "go1.27.3"), ("build", "local")]
    assert toolchain.go_version(newer.env()) == "go1.27.3" and calls[-1] == ("env", "go1.27.3")
    assert toolchain.go_env()["GOTOOLCHAIN"] == "local"


def test_the_kubernetes_1_38_wrapper_alone_names_go_1_27() -> None:
    recipes = toolchain.recipes()
    assert recipes["kubernetes-1.38"].go == "go1.27.3"
    assert "go 1.27.0" in (recipes["kubernetes-1.38"].folder / "go.mod").read_text().splitlines()
    assert {r.name for r in recipes.values() if r.go} == {"kubernetes-1.38"}
    sums = toolchain.read_sums(recipes["kubernetes-1.38"])
    assert sums is not None and sums.go == "go1.27.3"


@pytest.mark.parametrize("value", ['"1.27.3"', '"go1.27"', "127", '"go1.27.3 "'])
def test_a_bad_go_release_is_one_error(tmp_path: Path, value: str) -> None:
    toml = f'module = "example.com/tool/v2"\ngo = {value}\n[binaries]\ntool = "x"\n'
    with pytest.raises(ToolchainError, match=r"go must name a Go release such as go1\.27\.3"):
        toolchain.load_recipe(wrapper(tmp_path, build_toml=toml))


def test_the_cache_key_follows_what_decides_the_build(tmp_path: Path) -> None:
    folder = wrapper(tmp_path)
    (folder / "cmd").mkdir()
    (folder / "cmd" / "main.go").write_text("package main\n")
    key = toolchain.load_recipe(folder).key()
    (folder / toolchain.SUMS).write_text("# recorded\n")
    assert toolchain.load_recipe(folder).key() == key, "SHA256SUMS records the result; it decides nothing"
    (folder / "cmd" / "main.go").write_text("package main\n\nfunc main() {}\n")
    changed = toolchain.load_recipe(folder).key()
    assert changed != key
    (folder / "go.sum").write_text("example.com/tool/v2 v2.3.4 h1:def=\n")
    assert toolchain.load_recipe(folder).key() not in (key, changed)


def test_only_names_the_tools_there_are(tmp_path: Path) -> None:
    recipes = {"tool": toolchain.load_recipe(wrapper(tmp_path))}
    assert toolchain.select(recipes, None) == list(recipes.values())
    assert toolchain.select(recipes, " tool ,") == [recipes["tool"]]
    with pytest.raises(ToolchainError, match="--only tool,nope: no tool nope; the tools: tool"):
        toolchain.select(recipes, "tool,nope")


def test_sums_round_trip_with_the_go_release(tmp_path: Path) -> None:
    recipe = toolchain.load_recipe(wrapper(tmp_path))
    sums = Sums("go1.26.8", {"tool": "a" * 64, "helper-script": "b" * 64})
    parsed = Sums.parse(sums.render(recipe))
    assert parsed == sums
    assert parsed.covers(recipe.outputs)
    assert not Sums("go1.26.8", {"tool": "a" * 64}).covers(recipe.outputs)


def _recorded(recipe: Recipe, files: dict[str, bytes]) -> None:
    sums = Sums("go1.26.8", {name: hashlib.sha256(data).hexdigest() for name, data in files.items()})
    (recipe.folder / toolchain.SUMS).write_text(sums.render(recipe))


def _shared(tmp_path: Path, files: dict[str, bytes]) -> Path:
    """A shared folder holding `files` (name -> bytes)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    for name, data in files.items():
        (shared / name).write_bytes(data)
    return shared


def test_shared_binaries_are_used_when_every_digest_matches(tmp_path: Path) -> None:
    recipe = toolchain.load_recipe(wrapper(tmp_path))
    files = {"tool": b"\x7fELF tool", "helper-script": b"#!/bin/sh\n"}
    _recorded(recipe, files)
    shared = tmp_path / "shared"
    (shared / "bin").mkdir(parents=True)
    (shared / "bin" / "tool").write_bytes(files["tool"])
    (shared / "helper-script").write_bytes(files["helper-script"])
    (shared / "tool").write_bytes(b"another build")  # same name, other bytes: not taken
    cache = tmp_path / "cache"

    outcome = toolchain.ensure(recipe, cache, shared, say=lambda _m: None)

    assert outcome.source == "shared"
    assert (outcome.path / "tool").read_bytes() == files["tool"]
    assert os.access(outcome.path / "helper-script", os.X_OK)
    manifest = json.loads((outcome.path / toolchain.MANIFEST).read_text())
    assert (manifest["source"], manifest["go"], manifest["version"]) == ("shared", "go1.26.8", "v2.3.4")
    assert toolchain.locate("tool", cache, recipe.folder.parent) == outcome.path
    # The second time the cache is reused, after its files are checked against the manifest.
    assert toolchain.ensure(recipe, cache, shared, say=lambda _m: None).source == "cached"


def test_an_altered_cache_entry_is_not_reused(tmp_path: Path) -> None:
    recipe = toolchain.load_recipe(wrapper(tmp_path))
    files = {"tool": b"tool", "helper-script": b"script"}
    _recorded(recipe, files)
    shared = _shared(tmp_path, files)
    cache = tmp_path / "cache"
    path = toolchain.ensure(recipe, cache, shared, say=lambda _m: None).path
    (path / "tool").write_bytes(b"tampered")
    said: list[str] = []

    outcome = toolchain.ensure(recipe, cache, shared, say=said.append)

    assert outcome.source == "shared" and (outcome.path / "tool").read_bytes() == b"tool"
    assert said == [f"toolchain: {path.name} is incomplete or altered; building it again"]


def test_a_run_that_finishes_second_keeps_what_the_first_put_in_place(tmp_path: Path) -> None:
    """scripts/setup builds helm while scripts/toolchain may build it too: the later rename finds the tool
    there, checks it and keeps it."""
    recipe = toolchain.load_recipe(wrapper(tmp_path))
    files = {"tool": b"tool", "helper-script": b"script"}
    _recorded(recipe, files)
    shared = _shared(tmp_path, files)
    cache = tmp_path / "cache"
    real_copy = shutil.copyfile
    first: list[Path] = []
    other_run = [True]

    def copy_while_another_run_finishes(source: Path, target: Path) -> object:
        if other_run.pop() if other_run else False:  # the other run completes while this one copies
            first.append(toolchain.ensure(recipe, cache, shared, say=lambda _m: None).path)
        return real_copy(source, target)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(toolchain.shutil, "copyfile", copy_while_another_run_finishes)
        outcome = toolchain.ensure(recipe, cache, shared, say=lambda _m: None)
    assert outcome.path == first[0] and outcome.source == "cached"
    assert (outcome.path / "tool").read_bytes() == b"tool"
    assert [p.name for p in cache.iterdir()] == [first[0].name]  # no staging folder left


def test_shared_binaries_missing_one_output_are_not_used(tmp_path: Path) -> None:
    recipe = toolchain.load_recipe(wrapper(tmp_path))
    files = {"tool": b"tool", "helper-script": b"script"}
    _recorded(recipe, files)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "tool").write_bytes(files["tool"])
    assert toolchain.shared_copies(recipe, toolchain.read_sums(recipe), shared) is None
    assert toolchain.shared_copies(recipe, None, shared) is None


def test_nothing_built_is_located_and_an_interrupted_build_leaves_nothing(tmp_path: Path) -> None:
    recipe = toolchain.load_recipe(wrapper(tmp_path))
    cache = tmp_path / "cache"
    assert toolchain.locate("tool", cache, recipe.folder.parent) is None
    assert toolchain.locate("absent", cache, recipe.folder.parent) is None
    # A tool folder without its manifest (a build cut short before the rename) does not count.
    partial = toolchain.tool_dir(recipe, cache)
    partial.mkdir(parents=True)
    (partial / "tool").write_bytes(b"half")
    assert toolchain.locate("tool", cache, recipe.folder.parent) is None


def test_kube_assets_are_one_folder_of_the_four_binaries(tmp_path: Path) -> None:
    wrappers, cache = tmp_path / "wrappers", tmp_path / "cache"
    kube_toml = 'module = "k8s.io/kubernetes"\n[binaries]\n' + "".join(
        f'{b} = "k8s.io/kubernetes/cmd/{b}"\n'
        for b in ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
    )
    built = {}
    for name, toml in (
        ("kubernetes-1.37", kube_toml),
        ("etcd", 'module = "k8s.io/kubernetes"\n[binaries]\netcd = "x"\n'),
    ):
        recipe = toolchain.load_recipe(wrapper(tmp_path, name, toml))
        path = toolchain.tool_dir(recipe, cache)
        path.mkdir(parents=True)
        for output in recipe.outputs:
            (path / output).write_text(output)
        (path / toolchain.MANIFEST).write_text("{}")
        built[name] = path
    assert toolchain.kube_assets("1.34", cache, wrappers) is None, "1.34 is not built here"

    assets = toolchain.kube_assets("1.37", cache, wrappers)

    assert assets is not None
    assert sorted(p.name for p in assets.iterdir()) == sorted(toolchain.ASSET_BINARIES)
    assert (assets / "etcd").resolve() == built["etcd"] / "etcd"
    assert (assets / "kube-apiserver").read_text() == "kube-apiserver"
    assert toolchain.kube_assets("1.37", cache, wrappers) == assets


def test_the_cache_is_outside_the_repository() -> None:
    assert toolchain.cache_root({"VKE_GPU_DRA_TOOLCHAIN_CACHE": "/x/tc"}) == Path("/x/tc")
    assert toolchain.cache_root({"XDG_CACHE_HOME": "/x/cache"}) == Path("/x/cache/vke-gpu-dra/toolchain")
    assert toolchain.cache_root({}) == Path.home() / ".cache" / "vke-gpu-dra" / "toolchain"
    assert toolchain.shared_root({}) == toolchain.ROOT.parent / "shared" / "toolchain"


# --- the project's own wrappers ------------------------------------------------------------------


def test_every_wrapper_builds_a_pinned_module_and_records_its_digests() -> None:
    recipes = toolchain.recipes()
    assert set(recipes) >= {"etcd", "helm", "pulumi", "pulumi-kubernetes", *toolchain.KUBERNETES.values()}
    assert set(recipes) >= {"containerd", "runc", "cni-plugins", "crictl"}, "the node tier's binaries"
    for recipe in recipes.values():
        assert recipe.version.startswith("v"), recipe.name
        sums = toolchain.read_sums(recipe)
        assert sums is not None and sums.covers(recipe.outputs), f"{recipe.name}: SHA256SUMS lacks an output"
        assert sums.go.startswith("go1."), recipe.name


def test_the_kubernetes_wrappers_pin_every_staging_module_to_the_matching_tag() -> None:
    for minor, name in toolchain.KUBERNETES.items():
        recipe = toolchain.recipes()[name]
        assert recipe.version.startswith(f"v{minor}."), name
        staging = "v0." + recipe.version.removeprefix("v1.")
        go_mod = (recipe.folder / "go.mod").read_text()
        replaces = [line.split() for line in go_mod.splitlines() if line.startswith("replace k8s.io/")]
        assert len(replaces) >= 30, name
        assert all(words[3] == words[1] and words[4] == staging for words in replaces), name


def test_check_and_path_build_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VKE_GPU_DRA_TOOLCHAIN_CACHE", str(tmp_path))
    assert toolchain.main(["--check", "--only", "helm"]) == 1
    assert toolchain.main(["--path", "helm"]) == 1
    assert toolchain.main(["--path", "nope"]) == 1
    err = capsys.readouterr().err
    assert "toolchain: helm is not built" in err
    assert "helm is not built (scripts/toolchain --only helm)" in err
    assert "--only nope: no tool nope" in err
    assert not any(tmp_path.iterdir())


def test_what_the_proxy_does_not_serve_is_named_with_what_runs_instead() -> None:
    items = {u.name: u for u in toolchain.unavailable()}
    assert {"pulumi-language-python", "pulumi-resource-volcengine", "pulumi-kubernetes 4.34.2"} <= set(items)
    assert all("@" in u.module and u.instead for u in items.values())


def test_the_proxys_answer_is_its_refusal_or_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    go = tmp_path / "go"
    go.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        "  *served*) echo v1.2.3 ;;\n"
        '  *) echo "go: example.com/x@latest: reading https://proxy/x/@v/list: 403 Forbidden" >&2\n'
        '     echo "\tserver response: This module version is not available." >&2; exit 1 ;;\n'
        "esac\n"
    )
    go.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert toolchain.proxy_answer("example.com/served@latest") == "served (v1.2.3): build it"
    assert toolchain.proxy_answer("example.com/x@latest") == (
        "go: example.com/x@latest: reading https://proxy/x/@v/list: 403 Forbidden "
        "server response: This module version is not available."
    )


@pytest.mark.skipif(not shutil.which("gofmt"), reason="gofmt is not installed (it comes with Go)")
def test_the_wrappers_own_go_code_is_gofmt_clean() -> None:
    result = subprocess.run(
        ["gofmt", "-l", str(toolchain.WRAPPERS)], capture_output=True, text=True, check=True
    )
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("package", "file"),
    [
        ("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
        ("./cmd/pulumi-language-python", "pulumi-language-python"),
        ("github.com/pulumi/pulumi/pkg/v3/cmd/pulumi", "pulumi"),
        ("example.com/tool/v2", "tool"),
        ("example.com/tool/v12", "tool"),
        ("example.com/v1", "v1"),
        ("example.com/tool/v0", "v0"),
        ("tool", "tool"),
    ],
)
def test_the_file_a_package_is_built_to_is_the_go_commands(package: str, file: str) -> None:
    assert toolchain.exec_name(package) == file


def test_all_binaries_come_from_one_go_command_and_get_their_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = (
        'module = "example.com/tool/v2"\n[binaries]\n'
        'tool = "example.com/tool/v2"\nhelper-renamed = "./cmd/helper"\n'
    )
    recipe = toolchain.load_recipe(wrapper(tmp_path, build_toml=toml))
    calls: list[list[str]] = []

    def run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
        calls.append(list(argv))
        if argv[1] == "vet":
            return ""
        assert argv[argv.index("-o") + 1].endswith(os.sep), "-o names a folder"
        write_outputs(argv)
        return ""

    monkeypatch.setattr(toolchain, "_run", run)
    staging = tmp_path / "out"
    staging.mkdir()
    toolchain.build(recipe, staging)
    vet, argv = calls
    assert vet == ["go", "vet", "./cmd/helper"], "the wrapper's own Go code is vetted first"
    assert argv[-2:] == ["./cmd/helper", "example.com/tool/v2"]
    assert (staging / "tool").read_text() == "example.com/tool/v2"
    assert (staging / "helper-renamed").read_text() == "./cmd/helper"


def test_two_binaries_the_go_command_would_write_to_one_file_are_one_error(tmp_path: Path) -> None:
    toml = (
        'module = "example.com/tool/v2"\n[binaries]\na = "example.com/x/tool"\nb = "example.com/y/tool/v3"\n'
    )
    with pytest.raises(ToolchainError, match=r"example.com/x/tool and example.com/y/tool/v3 .* to tool"):
        toolchain.load_recipe(wrapper(tmp_path, build_toml=toml))
