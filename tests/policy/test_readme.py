"""policy/README.md has one row per policy of the pack, with its level, what it guards and its fix."""

from __future__ import annotations

from pathlib import Path

from pulumi_policy import EnforcementLevel
from vke_dra_policies import pack

README = (Path(__file__).resolve().parents[2] / "policy" / "README.md").read_text()


def policy_rows() -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in README.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            name = cells[0].strip("`")
            assert name not in rows, f"policy {name} has two rows"
            rows[name] = cells[1:]
    return rows


def test_every_policy_has_one_row_with_its_level_what_it_guards_and_its_fix() -> None:
    rows = policy_rows()
    assert set(rows) == {p.name for p in pack.POLICIES}
    for policy in pack.POLICIES:
        level, guards, fix = rows[policy.name]
        expected = "advisory" if policy.enforcement_level == EnforcementLevel.ADVISORY else "mandatory"
        assert level == expected, policy.name
        assert guards and fix, policy.name
