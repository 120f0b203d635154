"""The docs list the verification commands; the README opens with the two commands.

The key tables of docs/configuration.md are generated from the key table (tests/program/test_config_table.py).
"""

from __future__ import annotations

import re

from vke_gpu_dra_core import config

from components.stack import verify_commands
from tests.program import harness

README = (harness.ROOT / "README.md").read_text()
VERIFY = (harness.ROOT / "docs" / "verify.md").read_text()


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


def test_top_commands_set_up_the_dev_stack_and_run_the_test_script() -> None:
    top = README.split("\n## ", 1)[0]  # before the first section
    blocks = bash_blocks(top)
    assert len(blocks) == 2, blocks
    first, second = (commands(block) for block in blocks)
    assert first[0] == "scripts/setup"
    stack = next(i for i, line in enumerate(first) if "--secrets-provider passphrase" in line)
    up = next(i for i, line in enumerate(first) if "pulumi up --stack dev" in line)
    assert "pulumi stack select --create dev" in first[stack]
    assert stack < up
    assert "--policy-pack policy" in first[up]
    assert second == ["scripts/test"]
    assert blocks[1] == "scripts/test\n"
