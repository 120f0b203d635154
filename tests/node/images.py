"""Container images built here, with no daemon and no registry: an OCI image layout in a tar archive, the
form `ctr images import` reads.

Reproducible: the layer is an uncompressed tar whose members are sorted, owned by root and dated 0, and
every JSON document is written with sorted keys, so the same files give the same digests on any machine.
What goes in is named by the caller: a file's bytes are read from a path on this machine (Debian's
busybox-static, the host's loader and libc), so an image is as reproducible as those packages are.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
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


class ImageError(ValueError):
    """An image that cannot be built from what was given."""


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a regular file (`source` or `data`), a directory or a symlink."""

    path: str  # inside the image, absolute
    mode: int = 0o755
    source: Path | None = None
    data: bytes | None = None
    link: str | None = None
    directory: bool = False


@dataclass(frozen=True)
class Image:
    """An image's name, its manifest digest (what a pod references by digest) and the archive."""

    name: str
    digest: str
    archive: Path
    config: Mapping[str, Any] = field(default_factory=dict)

    @property
    def by_digest(self) -> str:
        return f"{self.name.rsplit(':', 1)[0]}@{self.digest}"


def _tarinfo(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, link
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def layer(entries: Sequence[Entry]) -> bytes:
    """The layer tar: every parent directory added, members sorted by path."""
    members: dict[str, Entry] = {}
    for entry in entries:
        if not entry.path.startswith("/") or ".." in entry.path.split("/"):
            raise ImageError(f"layer entry {entry.path!r}: the path must be absolute and plain")
        parts = entry.path.strip("/").split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            members.setdefault(parent, Entry("/" + parent, directory=True))
        name = "/".join(parts)
        if name in members and not members[name].directory:
            raise ImageError(f"layer entry {entry.path!r} is given twice")
        members[name] = entry
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(members):
            entry = members[name]
            if entry.directory:
                tar.addfile(_tarinfo(name, tarfile.DIRTYPE, entry.mode))
            elif entry.link is not None:
                tar.addfile(_tarinfo(name, tarfile.SYMTYPE, 0o777, link=entry.link))
            else:
                data = entry.data if entry.data is not None else _read(entry)
                tar.addfile(_tarinfo(name, tarfile.REGTYPE, entry.mode, len(data)), io.BytesIO(data))
    return buffer.getvalue()


def _read(entry: Entry) -> bytes:
    if entry.source is None:
        raise ImageError(f"layer entry {entry.path!r}: a file needs source or data")
    try:
        return entry.source.read_bytes()
    except OSError as exc:
        raise ImageError(f"layer entry {entry.path!r}: {exc}") from None


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build(
    archive: Path,
    name: str,
    entries: Sequence[Entry],
    *,
    cmd: Sequence[str] = ("/bin/sh",),
    env: Sequence[str] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",),
    labels: Mapping[str, str] | None = None,
) -> Image:
    """Write `archive` (an OCI image layout as a tar) holding one image of one layer, tagged `name`
    (`registry/repository:tag`)."""
    if ":" not in name.rsplit("/", 1)[-1]:
        raise ImageError(f"image name {name!r}: give a tag (repository:tag)")
    blob = layer(entries)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": list(cmd), "Env": list(env), "Labels": dict(labels or {})},
        "rootfs": {"type": "layers", "diff_ids": [_digest(blob)]},
        "created": "1970-01-01T00:00:00Z",
    }
    config_bytes = _json(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": _digest(config_bytes), "size": len(config_bytes)},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": _digest(blob), "size": len(blob)}],
    }
    manifest_bytes = _json(manifest)
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": _digest(manifest_bytes),
                "size": len(manifest_bytes),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                },
            }
        ],
    }
    files = {
        "oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
        "index.json": _json(index),
        **{f"blobs/sha256/{_digest(b)[7:]}": b for b in (blob, config_bytes, manifest_bytes)},
    }
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for directory in ("blobs", "blobs/sha256"):
            tar.addfile(_tarinfo(directory, tarfile.DIRTYPE, 0o755))
        for path in sorted(files):
            data = files[path]
            tar.addfile(_tarinfo(path, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    return Image(name, _digest(manifest_bytes), archive, config)


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
