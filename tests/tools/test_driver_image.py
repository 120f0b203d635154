"""tools/driver_image reads driver/Dockerfile's recipe and refuses one it does not follow (the build itself
runs in the node tier, tests/node/test_driver_image.py, as root)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tools import driver_image
from tools.driver_image import DOCKERFILE, RecipeError, read_recipe
from tools.oci_image import ImageError


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = DOCKERFILE.read_text()
    assert old in text, old
    path = tmp_path / "Dockerfile"
    path.write_text(text.replace(old, new, 1))
    return path


def test_the_recipe_is_what_the_dockerfile_says() -> None:
    recipe = read_recipe()
    assert (recipe.python, recipe.debian) == ("3.11", "bookworm")
    assert recipe.user == "65532:65532"
    assert recipe.entrypoint == ("dra-gpu-kubelet-plugin",)
    assert "PYTHONUNBUFFERED=1" in recipe.env
    assert recipe.args["SETUPTOOLS_VERSION"] and recipe.args["WHEEL_VERSION"]
    settings = driver_image.settings(recipe, revision="abc123", source_url="https://example.com/repo")
    assert settings.labels["org.opencontainers.image.revision"] == "abc123"
    assert settings.labels["org.opencontainers.image.source"] == "https://example.com/repo"
    assert settings.labels["org.opencontainers.image.version"] == recipe.args["VERSION"]
    assert settings.env[:2] == driver_image.BASE_ENV
    assert settings.cmd == ()


def test_the_version_is_the_charts_and_the_packages() -> None:
    import yaml  # the chart's appVersion, which the image's VERSION must equal

    chart = yaml.safe_load((DOCKERFILE.parent / "chart" / "Chart.yaml").read_text())
    assert read_recipe().args["VERSION"] == str(chart["appVersion"])


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("&& pip uninstall --yes pip", "&& pip uninstall --yes pip setuptools", "runtime stage runs"),
        ('"wheel==${WHEEL_VERSION}"', '"wheel==${WHEEL_VERSION}" build', "builder stage runs"),
        ("python:3.11.13-slim-bookworm", "python:3.11-alpine", "ARG PYTHON_IMAGE='python:3.11-alpine'"),
        ('ENTRYPOINT ["dra-gpu-kubelet-plugin"]', "ENTRYPOINT dra-gpu-kubelet-plugin", "not a JSON list"),
        ("PYTHONUNBUFFERED=1", "PYTHONUNBUFFERED", "ENV 'PYTHONUNBUFFERED' is not key=value"),
    ],
)
def test_a_recipe_it_does_not_follow_is_one_error_naming_it(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    with pytest.raises(RecipeError, match=re.escape(message)):
        read_recipe(_variant(tmp_path, old, new))


def test_a_missing_dockerfile_is_named(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="Dockerfile: No such file"):
        read_recipe(tmp_path / "Dockerfile")


def test_merged_usr_moves_the_top_folders_and_refuses_a_clash(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "dash").write_text("shell")
    (root / "bin" / "sh").symlink_to("dash")
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "python3.11").write_text("python")
    driver_image._merge_usr(root)
    assert os.readlink(root / "bin") == "usr/bin"
    assert (root / "usr" / "bin" / "dash").read_text() == "shell"
    assert os.readlink(root / "usr" / "bin" / "sh") == "dash"
    clash = tmp_path / "clash"
    (clash / "sbin").mkdir(parents=True)
    (clash / "sbin" / "ldconfig").write_text("a")
    (clash / "usr" / "sbin").mkdir(parents=True)
    (clash / "usr" / "sbin" / "ldconfig").write_text("b")
    with pytest.raises(ImageError, match="/sbin/ldconfig and /usr/sbin/ldconfig both exist"):
        driver_image._merge_usr(clash)


def test_slimming_keeps_each_packages_copyright(tmp_path: Path) -> None:
    doc = tmp_path / "usr" / "share" / "doc" / "libc6"
    doc.mkdir(parents=True)
    (doc / "copyright").write_text("licence")
    (doc / "changelog.Debian.gz").write_text("log")
    (tmp_path / "usr" / "share" / "man" / "man1").mkdir(parents=True)
    driver_image._slim(tmp_path)
    assert sorted(p.name for p in doc.iterdir()) == ["copyright"]
    assert not (tmp_path / "usr" / "share" / "man").exists()


def test_a_build_without_root_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ImageError, match=r"as root .*build driver/Dockerfile instead"):
        driver_image.build()
