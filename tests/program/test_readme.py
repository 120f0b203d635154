"""The README documents every config key and the program's verification commands."""

from __future__ import annotations

import json

from components import config
from components.stack import verify_commands
from tests.program import harness

README = (harness.ROOT / "README.md").read_text()


def test_every_config_key_is_documented_with_type_and_default() -> None:
    for key in config.KEYS:
        rows = [line for line in README.splitlines() if line.startswith(f"| `{config.PROJECT}:{key.name}` |")]
        assert len(rows) == 1, key.name
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        assert cells[1] == key.type, key.name
        default = key.default if key.type == "string" else json.dumps(key.default)
        assert cells[2] == (f"`{default}`" if default else '`""`'), key.name


def test_verification_commands_in_readme_are_the_stack_output() -> None:
    for command in verify_commands(config.load(harness.stack_raw_config("dev"))):
        assert command in README, command


def test_top_commands_use_the_dev_stack_and_the_test_script() -> None:
    first, second = [
        line for line in README.split("```bash", 1)[1].splitlines() if line and not line.startswith("#")
    ][:2]
    assert "scripts/setup" in first
    assert "--secrets-provider passphrase" in first
    assert "pulumi up --stack dev" in first
    assert second == "scripts/test"
