"""Images of the node tier's pods, written with `tools.oci_image` (no daemon, no registry): what goes in is
named by the caller, a file's bytes read from a path on this machine (Debian's busybox-static, the host's
loader and libc), so an image is as reproducible as those packages are.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tools.oci_image import Entry, Image, ImageError, build, layer

__all__ = [
    "APPLETS",
    "BUSYBOX",
    "Entry",
    "Image",
    "ImageError",
    "build",
    "busybox_entries",
    "host_libraries",
    "layer",
]

#: Debian's busybox-static: a shell and the usual commands in one static binary.
BUSYBOX = Path("/bin/busybox")
#: The applets the node's images link to busybox.
APPLETS = (
    "sh",
    "ls",
    "cat",
    "env",
    "test",
    "sleep",
    "echo",
    "stat",
    "id",
    "grep",
    "true",
    "mkdir",
    "cut",
    "mknod",
    "sed",
)


def busybox_entries() -> list[Entry]:
    """Debian's static busybox as /bin/busybox with its applets, and the folders a container expects."""
    if not os.access(BUSYBOX, os.X_OK):
        raise ImageError(f"{BUSYBOX} is missing: apt-get install busybox-static")
    entries = [Entry("/bin/busybox", source=BUSYBOX)]
    entries += [Entry(f"/bin/{applet}", link="busybox") for applet in APPLETS]
    entries += [Entry(f"/{d}", directory=True) for d in ("dev", "proc", "sys", "etc", "run", "var")]
    entries.append(Entry("/tmp", mode=0o1777, directory=True))
    return entries


def host_libraries(binary: Path) -> list[Entry]:
    """The loader and the shared libraries `binary` links against, copied from this machine (as
    `ldd` names them), for a dynamically linked program in an image without a distribution."""
    ldd = subprocess.run(["ldd", str(binary)], check=True, capture_output=True, text=True).stdout
    entries = []
    for line in ldd.splitlines():
        words = line.split()
        path = words[2] if "=>" in words and len(words) > 2 else (words[0] if words else "")
        if path.startswith("/"):
            entries.append(Entry(path, mode=0o755, source=Path(os.path.realpath(path))))
    return entries
