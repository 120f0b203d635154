"""`python -m vke_gpu_dra_core.config --write`: regenerate Pulumi.yaml and docs/configuration.md's key
tables from the key table, in the repository root (the current directory, or --root).

`--check` writes nothing and exits 1 when either file differs; without options Pulumi.yaml is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .render import CONFIGURATION_DOC, PULUMI_YAML, render_configuration_doc, render_pulumi_yaml


def generated(root: Path) -> dict[Path, str]:
    """Each generated file under `root` -> the text it must have."""
    doc = root / CONFIGURATION_DOC
    return {
        root / PULUMI_YAML: render_pulumi_yaml(),
        doc: render_configuration_doc(doc.read_text(encoding="utf-8")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vke_gpu_dra_core.config", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite Pulumi.yaml and docs/configuration.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when either file is not as generated")
    parser.add_argument("--root", type=Path, default=Path(), help="repository root (default: .)")
    args = parser.parse_args(argv)
    if not args.write and not args.check:
        sys.stdout.write(render_pulumi_yaml())
        return 0
    if not (args.root / CONFIGURATION_DOC).is_file():
        print(
            f"error: {args.root / CONFIGURATION_DOC} not found: run from the repository root or pass --root",
            file=sys.stderr,
        )
        return 2
    try:
        files = generated(args.root)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stale = [
        path for path, text in files.items() if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    if args.check:
        for path in stale:
            print(f"{path}: not as generated; run python -m vke_gpu_dra_core.config --write", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(files[path], encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
