"""Pulumi project and stack files read as the Pulumi CLI reads them (YAML 1.2 booleans)."""

from __future__ import annotations

import pytest
import yaml
from vke_gpu_dra_core.config import StackConfigError, load_pulumi_yaml, parse_bool, raw_from_stack_file


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


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0o17", 15),  # YAML 1.2 octal (PyYAML's YAML 1.1 reads a word)
        ("010", 8),  # a leading 0 is octal, as Go's ParseInt reads it
        ("1_000", 1000),
        ("0x1F", 31),
        ("-0b101", -5),
        ("1e3", 1000.0),
        ("1:30", "1:30"),  # YAML 1.1 sexagesimal is a word (PyYAML reads 90)
        ("2026-01-01", "2026-01-01"),  # a date stays a word, as yaml.v3 decodes it into a config value
        ("1.5", 1.5),
        ("08", 8.0),  # not an octal integer: Go's float pattern reads it
    ],
)
def test_numbers_and_dates_are_read_as_the_pulumi_cli_reads_them(text: str, value: object) -> None:
    assert load_pulumi_yaml(f"v: {text}") == {"v": value}
    assert type(load_pulumi_yaml(f"v: {text}")["v"]) is type(value)


def test_a_value_that_is_not_json_shaped_or_a_key_that_is_not_a_word_is_one_error_each() -> None:
    stack = load_pulumi_yaml(
        "123: 4\nvke-gpu-dra:cluster.name: !!binary aGVsbG8=\nvolcengine:region: !!set {a}\n"
    )
    with pytest.raises(StackConfigError) as info:
        raw_from_stack_file(stack)
    assert [str(i) for i in info.value.issues] == [
        "vke-gpu-dra:123 = (set): allowed: config keys are words such as nodePool.minReplicas",
        "vke-gpu-dra:cluster.name = a YAML bytes: allowed: a string, number, boolean, list or map",
        "volcengine:region = a YAML set: allowed: a string, number, boolean, list or map",
    ]
