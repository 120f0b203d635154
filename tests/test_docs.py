"""The READMEs stay short front doors, every relative link in the docs leads somewhere that exists, and
the driver's reference pages name every flag."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 150
#: The driver's README is a front door too; its reference is in driver/docs/.
DRIVER_README_MAX_LINES = 100
DRIVER_DOCS = ROOT / "driver" / "docs"

#: The Markdown files whose links are checked: the front door, docs/, the package READMEs it links to and
#: the driver's reference pages.
DOCS = sorted(
    {
        ROOT / "README.md",
        ROOT / "policy" / "README.md",
        ROOT / "driver" / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *DRIVER_DOCS.glob("*.md"),
    }
)

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", flags=re.M | re.S)
_CODE_SPAN = re.compile(r"(`+).+?\1", flags=re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", flags=re.M)


def prose(text: str) -> str:
    """The text without fenced blocks and code spans, where brackets are not links."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def links(text: str) -> list[str]:
    return _LINK.findall(prose(text))


def is_relative(target: str) -> bool:
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not target.startswith("//")


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to '-', repeats numbered."""
    seen: Counter[str] = Counter()
    out = set()
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", plain.strip().lower()).replace(" ", "-")
        out.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return out


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(doc: Path) -> list[str]:
    problems = []
    for target in links(doc.read_text()):
        if not is_relative(target):
            continue
        path_part, _, fragment = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if not dest.exists():
            problems.append(f"{target}: no file {_shown(dest)}")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text()):
            problems.append(f"{target}: no heading #{fragment} in {_shown(dest)}")
    return problems


def test_readme_is_a_front_door_of_at_most_150_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_driver_readme_is_a_front_door_linking_every_reference_page() -> None:
    text = (ROOT / "driver" / "README.md").read_text()
    assert len(text.splitlines()) <= DRIVER_README_MAX_LINES, (
        "driver/README.md: move detail into driver/docs/"
    )
    pages = sorted(DRIVER_DOCS.glob("*.md"))
    assert pages
    assert [p.name for p in pages if f"docs/{p.name}" not in links(text)] == []


def test_driver_command_line_page_documents_every_flag_and_its_variable() -> None:
    from vke_gpu_dra.config import OPTIONS

    rows = [
        line
        for line in (DRIVER_DOCS / "command-line.md").read_text().splitlines()
        if line.startswith("| `--")
    ]
    documented = {tuple(cell.strip().strip("`") for cell in row.split("|")[1:3]) for row in rows}
    assert sorted({(o.flag, o.env) for o in OPTIONS} - documented) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_an_existing_file(doc: Path) -> None:
    assert broken_links(doc) == []


def test_the_link_check_finds_missing_files_and_headings(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# Title\n\n## Try it: `local` stack\n\n## Try it: `local` stack\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](there.md) [ok](there.md#try-it-local-stack) [ok](there.md#try-it-local-stack-1) [ok](#own)\n"
        "[web](https://example.com/x) `[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n\n# Own\n"
        "[gone](missing.md) [bad anchor](there.md#nope) ![img](pic.png)\n"
    )
    assert broken_links(doc) == [
        f"missing.md: no file {_shown(tmp_path / 'missing.md')}",
        f"there.md#nope: no heading #nope in {_shown(tmp_path / 'there.md')}",
        f"pic.png: no file {_shown(tmp_path / 'pic.png')}",
    ]


def _commands(doc: Path) -> list[tuple[str, str]]:
    """(command, its comment) of each line of the doc's bash blocks."""
    blocks = re.findall(r"^```bash\n(.*?)^```", doc.read_text(), flags=re.M | re.S)
    found = []
    for block in blocks:
        for line in block.splitlines():
            command, _, comment = line.partition(" #")
            if command.strip():
                found.append((command.strip(), comment.strip()))
    return found


@pytest.mark.parametrize("doc", ["README.md", "docs/environments.md"])
def test_every_command_the_front_doors_show_is_there_after_setup(doc: str) -> None:
    """Each command of the README's and environments.md's bash blocks names a script of the repository or
    a program `scripts/setup` puts into .venv/bin (on PATH after `. .venv/bin/activate`), or one of the
    shell's own or the user's (`export`, `mkdir`, `.`, `kind`). The engine tier runs them on the real
    CLI (tests/engine/test_up_script.py)."""
    bin_dir = Path(sys.executable).parent
    shell = {"export", "mkdir", ".", "kind"}
    for command, _ in _commands(ROOT / doc):
        program = command.split()[0]
        if program == "pulumi" and not (bin_dir / program).exists() and not shutil.which(program):
            continue  # scripts/setup could not install the CLI here (it said so); the tests run without it
        here = (ROOT / program).is_file() or (bin_dir / program).exists() or shutil.which(program)
        assert program in shell or here, (
            f"{doc}: {command!r}: {program} is neither a script here nor in {bin_dir}"
        )


def test_the_readmes_plan_command_answers_as_its_comment_says() -> None:
    [(command, comment)] = [c for c in _commands(ROOT / "README.md") if c[0].startswith("vke-gpu-dra plan")]
    argv = [str(Path(sys.executable).parent / "vke-gpu-dra"), *command.split()[1:]]
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert comment.endswith(": FITS") and "Deployment default/gpu-test: FITS" in run.stdout
