#!/usr/bin/env python3
"""Generate the gRPC stubs in src/vke_gpu_dra/kubelet/_proto from the .proto files in kubelet/proto.

Run from anywhere with the project's environment (grpcio-tools pinned in constraints.txt):

    python driver/scripts/generate_protos.py          # rewrite the checked-in stubs
    python driver/scripts/generate_protos.py --check  # exit 1 if the checked-in stubs are stale

The .proto files are mapped to the virtual path ``vke_gpu_dra/kubelet/_proto/...`` so the
generated modules import each other as ``vke_gpu_dra.kubelet._proto...`` and register unique file
names in the protobuf descriptor pool. Wire names come only from each file's ``package``.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = Path("vke_gpu_dra") / "kubelet"
PROTO_DIR = SRC / PACKAGE / "proto"
OUT_PACKAGE = PACKAGE / "_proto"
INIT_TEXT = '"""Generated code; regenerate with driver/scripts/generate_protos.py."""\n'


def generate(out_root: Path) -> list[Path]:
    """Generate all stubs below `out_root` (which plays the role of src/); return written files."""
    from grpc_tools import protoc  # noqa: PLC0415  (dev-only dependency, imported only when generating)

    protos = sorted(p.relative_to(PROTO_DIR) for p in PROTO_DIR.rglob("*.proto"))
    args = [
        "protoc",
        f"-I{OUT_PACKAGE.as_posix()}={PROTO_DIR}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *[(OUT_PACKAGE / p).as_posix() for p in protos],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    package_root = out_root / OUT_PACKAGE
    for directory in [package_root, *(d for d in package_root.rglob("*") if d.is_dir())]:
        (directory / "__init__.py").write_text(INIT_TEXT)
    return sorted(p for p in package_root.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh_root = Path(tmp)
        fresh = generate(fresh_root)
        target = SRC / OUT_PACKAGE
        if args.check:
            existing = sorted(p for p in target.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            rel_fresh = [p.relative_to(fresh_root / OUT_PACKAGE) for p in fresh]
            rel_existing = [p.relative_to(target) for p in existing]
            stale = rel_fresh != rel_existing or any(
                not filecmp.cmp(fresh_root / OUT_PACKAGE / r, target / r, shallow=False) for r in rel_fresh
            )
            if stale:
                print(f"generated stubs in {target} are stale; run {Path(__file__).name}", file=sys.stderr)
                return 1
            return 0
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(fresh_root / OUT_PACKAGE, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
