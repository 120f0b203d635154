"""Pulumi project and stack files read as the Pulumi CLI reads them (YAML 1.2 booleans)."""

from __future__ import annotations

import pytest
import yaml
from vke_gpu_dra_core.config import load_pulumi_yaml, parse_bool, raw_from_stack_file


@pytest.mark.parametrize("word", ["yes", "Yes", "YES", "no", "No", "on", "On", "off", "OFF", "y", "n"])
def test_yaml_1_1_boolean_words_are_strings(word: str) -> None:
    assert yaml.safe_load(f"v: {word}")["v"] in (True, False, word)  # PyYAML's own YAML 1.1 reading
    assert load_pulumi_yaml(f"v: {word}") == {"v": word}
    raw = raw_from_stack_file(load_pulumi_yaml(f"production: {word}"))
    assert parse_bool(raw.values["vke-gpu-dra:production"]) is None  # refused, as the program refuses it


@pytest.mark.parametrize(
    ("word", "value"), [("true", True), ("True", True), ("TRUE", True), ("false", False), ("FALSE", False)]
)
def test_yaml_1_2_booleans_stay_booleans(word: str, value: bool) -> None:
    assert load_pulumi_yaml(f"v: {word}") == {"v": value}
    assert parse_bool(raw_from_stack_file({"production": value}).values["vke-gpu-dra:production"]) is value


def test_everything_else_is_read_as_safe_yaml() -> None:
    doc = load_pulumi_yaml("a: 3\nb: [x, 'yes']\nc: {secure: v1:abc}\nd: null\ne: 1.5\n")
    assert doc == {"a": 3, "b": ["x", "yes"], "c": {"secure": "v1:abc"}, "d": None, "e": 1.5}
    with pytest.raises(yaml.YAMLError):
        load_pulumi_yaml("a: [unclosed")
    with pytest.raises(yaml.YAMLError):
        load_pulumi_yaml("a: !!python/object:os.system x")
