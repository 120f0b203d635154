"""The docs list the verification commands; the README opens with the two commands, and
docs/environments.md has the steps of the first one by hand.

The key tables of docs/configuration.md are generated from the key table (tests/program/test_config_table.py).
"""

from __future__ import annotations

import re

from vke_gpu_dra_core import config

from components.stack import verify_commands
from tests.program import harness

README = (harness.ROOT / "README.md").read_text()
VERIFY = (harness.ROOT / "docs" / "verify.md").read_text()
ENVIRONMENTS = (harness.ROOT / "docs" / "environments.md").read_text()


def bash_blocks(text: str) -> list[str]:
    """The bodies of the ```bash fenced blocks, in order."""
    return re.findall(r"^```bash\n(.*?)^```$", text, flags=re.M | re.S)


def commands(block: str) -> list[str]:
    """A block's command lines: comment-only and blank lines dropped, trailing comments cut."""
    lines = (re.sub(r"\s+#\s.*$", "", line).strip() for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def test_verification_commands_in_the_docs_are_the_stack_output() -> None:
    for command in verify_commands(config.load(harness.stack_raw_config("dev"))):
        assert command in VERIFY, command


def test_top_commands_bring_up_the_dev_stack_and_run_the_test_script() -> None:
    top = README.split("\n## ", 1)[0]  # before the first section
    blocks = bash_blocks(top)
    assert len(blocks) == 2, blocks
    first, second = (commands(block) for block in blocks)
    assert first == ["scripts/up dev"]  # at most three commands, this one first
    assert "`scripts/up local`" in top  # the stack without a cloud account
    assert second == ["scripts/test"]
    assert blocks[1] == "scripts/test\n"


def test_the_steps_by_hand_set_up_the_dev_stack_as_scripts_up_does() -> None:
    section = ENVIRONMENTS.split("\n## Bringing a stack up\n", 1)[1].split("\n## ", 1)[0]
    (block,) = bash_blocks(section)
    steps = commands(block)
    assert steps[0] == "scripts/setup"
    stack = next(i for i, line in enumerate(steps) if "--secrets-provider passphrase" in line)
    up = next(i for i, line in enumerate(steps) if "pulumi up --stack dev" in line)
    assert "pulumi stack select --create dev" in steps[stack]
    assert stack < up
    assert "--policy-pack policy" in steps[up]
