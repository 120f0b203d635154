"""driver/Dockerfile (parsed: no Docker engine needed) agrees with the chart and the driver project."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.chart.chartlib import REPO_ROOT, chart_metadata, default_values
from tools.driver_image import instructions

DRIVER_DIR = REPO_ROOT / "driver"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    def resolve(self, text: str) -> str:
        return re.sub(r"\$\{(\w+)\}", lambda m: self.global_args.get(m.group(1), m.group(0)), text)


def parse_dockerfile(path: Path) -> Dockerfile:
    """Instructions with continuation lines joined and comments dropped (as the daemonless build reads
    them, `tools.driver_image.instructions`), split into stages."""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, rest in instructions(path.read_text()):
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may precede FROM, got {keyword}"
            arg_name, _, default = rest.partition("=")
            global_args[arg_name] = default
        else:
            stages[-1].instructions.append((keyword, rest.strip()))
    return Dockerfile(global_args, stages)


def arg_defaults(stage: Stage) -> dict[str, str]:
    return {name: default.strip('"') for name, _, default in (a.partition("=") for a in stage.args("ARG"))}


def labels(stage: Stage) -> dict[str, str]:
    result: dict[str, str] = {}
    for rest in stage.args("LABEL"):
        for item in shlex.split(rest):
            key, _, value = item.partition("=")
            result[key] = value
    return result


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return parse_dockerfile(DRIVER_DIR / "Dockerfile")


@pytest.fixture(scope="module")
def runtime(dockerfile: Dockerfile) -> Stage:
    return dockerfile.stages[-1]


@pytest.fixture(scope="module")
def builder(dockerfile: Dockerfile) -> Stage:
    (stage,) = [s for s in dockerfile.stages if s.name == "builder"]
    return stage


def project_metadata() -> dict[str, object]:
    return tomllib.loads((DRIVER_DIR / "pyproject.toml").read_text())["project"]


def test_two_stages_on_a_pinned_python_slim_base(dockerfile: Dockerfile) -> None:
    assert [s.name for s in dockerfile.stages] == ["builder", None]
    for stage in dockerfile.stages:
        base = dockerfile.resolve(stage.base)
        assert re.fullmatch(r"python:3\.1[12]\.\d+-slim(-[a-z]+)?(@sha256:[0-9a-f]{64})?", base), base
    assert dockerfile.resolve(dockerfile.stages[0].base) == dockerfile.resolve(dockerfile.stages[1].base)


def test_builder_makes_wheels_with_the_pinned_constraints(builder: Stage) -> None:
    runs = " && ".join(builder.args("RUN"))
    assert "pip wheel" in runs
    assert "--constraint constraints.txt" in runs
    assert "--no-cache-dir" in runs
    assert "COPY --from=project constraints.txt ./constraints.txt" in [
        f"COPY {c}" for c in builder.args("COPY")
    ]
    for pin in re.findall(r'"(\w+)==\$\{(\w+)\}"', runs):
        assert arg_defaults(builder)[pin[1]], f"{pin[0]} is not pinned"


def test_runtime_installs_only_the_wheels(runtime: Stage) -> None:
    (run,) = runtime.args("RUN")
    assert run.startswith("--mount=type=bind,from=builder,source=/wheels,target=/wheels ")
    assert "--no-index --find-links=/wheels" in run
    assert "--no-cache-dir" in run
    assert not re.search(r"apt-get|apk |gcc|build-essential|pip wheel", run)
    assert runtime.args("COPY") == []  # nothing but the installed wheels
    assert "PIP_NO_CACHE_DIR=1" in " ".join(runtime.args("ENV"))


def test_entrypoint_is_the_console_script(runtime: Stage) -> None:
    (entrypoint,) = runtime.args("ENTRYPOINT")
    assert json.loads(entrypoint) == ["dra-gpu-kubelet-plugin"]
    scripts = project_metadata()["scripts"]
    assert isinstance(scripts, dict) and "dra-gpu-kubelet-plugin" in scripts


def test_runs_as_non_root_by_default(runtime: Stage) -> None:
    (user,) = runtime.args("USER")
    uid, _, gid = user.partition(":")
    assert int(uid) != 0 and int(gid) != 0


def test_reproducible_build_inputs(dockerfile: Dockerfile) -> None:
    for stage in dockerfile.stages:
        assert "SOURCE_DATE_EPOCH" in arg_defaults(stage), stage.name
        assert any("SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH}" in i for _, i in stage.instructions), stage.name


def test_oci_labels(runtime: Stage) -> None:
    found = labels(runtime)
    assert found["org.opencontainers.image.version"] == "${VERSION}"
    assert found["org.opencontainers.image.revision"] == "${REVISION}"
    assert found["org.opencontainers.image.source"] == "${SOURCE_URL}"
    assert found["org.opencontainers.image.title"] == "dra-gpu-kubelet-plugin"
    assert found["org.opencontainers.image.licenses"] == project_metadata()["license"]


def test_image_version_agrees_with_the_chart_and_the_project(runtime: Stage) -> None:
    version = arg_defaults(runtime)["VERSION"]
    assert version == chart_metadata()["appVersion"] == project_metadata()["version"]
    (run,) = runtime.args("RUN")
    assert f'"{project_metadata()["name"]}==${{VERSION}}"' in run  # installs exactly that version


def test_chart_default_image_is_this_image(runtime: Stage) -> None:
    image = default_values()["image"]
    assert image["tag"] == ""  # => appVersion, checked against VERSION above
    assert image["repository"].rsplit("/", 1)[1] == labels(runtime)["org.opencontainers.image.title"]


def test_dockerignore_sends_only_the_wheel_sources() -> None:
    patterns = [
        line.strip()
        for line in (DRIVER_DIR / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!src/"} <= set(patterns)
    assert "src/**/__pycache__" in patterns


def test_the_project_context_sends_only_what_the_builder_copies_and_the_tag_hashes(builder: Stage) -> None:
    # The repository root is the named context `project`: its .dockerignore lets through exactly the
    # files the builder copies from it, and the content-hash tag covers each of them.
    from components.driver_image import IMAGE_INPUTS

    copied = [c.split()[1] for c in builder.args("COPY") if c.startswith("--from=project ")]
    assert sorted(copied) == ["constraints.txt", "core", "kube"]
    patterns = [
        line.strip()
        for line in (DRIVER_DIR.parent / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*"
    let_through = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    outside_driver = {name for name in IMAGE_INPUTS if not name.startswith("driver/")}
    assert let_through == outside_driver
    assert all(name == "constraints.txt" or name.startswith(("core/", "kube/")) for name in let_through)
    assert {"core/src/**/__pycache__", "core/src/**/*.egg-info"} <= set(patterns)
    assert {"kube/src/**/__pycache__", "kube/src/**/*.egg-info"} <= set(patterns)
