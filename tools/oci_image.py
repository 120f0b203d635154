"""Container images written with no daemon and no registry: an OCI image layout in a tar archive, the form
`ctr images import` reads.

Reproducible: each layer is an uncompressed tar whose members are sorted, owned by root and dated 0, and every
JSON document is written with sorted keys, so the same files give the same digests on any machine. What goes
in is named by the caller (`Entry`), or read from a folder (`tree_entries`).

Standard library only: `scripts/up` uses it before the virtualenvs exist.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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
    def repository(self) -> str:
        return self.name.rsplit(":", 1)[0]

    @property
    def by_digest(self) -> str:
        return f"{self.repository}@{self.digest}"


@dataclass(frozen=True)
class Settings:
    """The image configuration's runtime part (the OCI config's `config`)."""

    cmd: Sequence[str] = ("/bin/sh",)
    entrypoint: Sequence[str] = ()
    env: Sequence[str] = (DEFAULT_PATH,)
    labels: Mapping[str, str] = field(default_factory=dict)
    user: str = ""
    workdir: str = ""

    def document(self) -> dict[str, Any]:
        config: dict[str, Any] = {"Env": list(self.env), "Labels": dict(self.labels)}
        if self.cmd:
            config["Cmd"] = list(self.cmd)
        if self.entrypoint:
            config["Entrypoint"] = list(self.entrypoint)
        if self.user:
            config["User"] = self.user
        if self.workdir:
            config["WorkingDir"] = self.workdir
        return config


def _tarinfo(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, link
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def _members(entries: Sequence[Entry]) -> dict[str, Entry]:
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
    return members


def write_layer(entries: Sequence[Entry], sink: BinaryIO) -> None:
    """The layer tar into `sink`: every parent directory added, members sorted by path. PAX headers
    only where USTAR stops (names over 100 bytes); a runtime reads both."""
    members = _members(entries)
    with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            entry = members[name]
            if entry.directory:
                tar.addfile(_tarinfo(name, tarfile.DIRTYPE, entry.mode))
            elif entry.link is not None:
                tar.addfile(_tarinfo(name, tarfile.SYMTYPE, 0o777, link=entry.link))
            elif entry.data is not None:
                info = _tarinfo(name, tarfile.REGTYPE, entry.mode, len(entry.data))
                tar.addfile(info, io.BytesIO(entry.data))
            else:
                with _open(entry) as source:
                    size = os.fstat(source.fileno()).st_size
                    tar.addfile(_tarinfo(name, tarfile.REGTYPE, entry.mode, size), source)


def layer(entries: Sequence[Entry]) -> bytes:
    """The layer tar's bytes (`write_layer`)."""
    buffer = io.BytesIO()
    write_layer(entries, buffer)
    return buffer.getvalue()


def _open(entry: Entry) -> BinaryIO:
    if entry.source is None:
        raise ImageError(f"layer entry {entry.path!r}: a file needs source or data")
    try:
        return entry.source.open("rb")
    except OSError as exc:
        raise ImageError(f"layer entry {entry.path!r}: {exc}") from None


def tree_entries(root: Path, under: str = "/") -> list[Entry]:
    """The files, folders and symlinks below `root` as entries at `under` in the image, with their modes
    (setuid and sticky bits included). Owners are not kept (every member is root's): a file owned by
    anyone else, or anything but a file, folder or symlink (a device node, a FIFO, an overlay
    whiteout), is an error naming it."""
    entries: list[Entry] = []
    base = under.rstrip("/")
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted([*dirs, *files]):
            path = Path(folder) / name
            inside = f"{base}/{path.relative_to(root).as_posix()}"
            info = path.lstat()
            if info.st_uid != 0 or info.st_gid != 0:
                raise ImageError(f"{inside}: owned by {info.st_uid}:{info.st_gid}; only root's files go in")
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                entries.append(Entry(inside, link=os.readlink(path)))
            elif stat.S_ISDIR(info.st_mode):
                entries.append(Entry(inside, mode=mode, directory=True))
            elif stat.S_ISREG(info.st_mode):
                entries.append(Entry(inside, mode=mode, source=path))
            else:
                raise ImageError(f"{inside}: not a file, folder or symlink (mode {oct(info.st_mode)})")
    return entries


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _hashed(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest(), path.stat().st_size


def build(
    archive: Path,
    name: str,
    entries: Sequence[Entry] | None = None,
    *,
    layers: Sequence[Sequence[Entry]] | None = None,
    settings: Settings | None = None,
    cmd: Sequence[str] | None = None,
) -> Image:
    """Write `archive` (an OCI image layout as a tar) holding one image tagged `name`
    (`registry/repository:tag`): one layer of `entries`, or `layers` bottom first; `cmd` overrides the
    settings' command. Layers are written to files beside the archive (never whole in memory), and the
    archive appears complete or not at all."""
    if ":" not in name.rsplit("/", 1)[-1]:
        raise ImageError(f"image name {name!r}: give a tag (repository:tag)")
    if (entries is None) == (layers is None):
        raise ImageError(f"image {name!r}: give either entries (one layer) or layers")
    chosen = settings or Settings()
    if cmd is not None:
        chosen = dataclasses.replace(chosen, cmd=tuple(cmd))
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=f".{archive.name}.") as scratch:
        blobs: dict[str, Path] = {}
        layer_descriptors: list[tuple[str, int]] = []
        for n, each in enumerate(layers if layers is not None else [entries or []]):
            path = Path(scratch) / f"layer-{n}"
            with path.open("wb") as sink:
                write_layer(each, sink)
            digest, size = _hashed(path)
            blobs[digest] = path
            layer_descriptors.append((digest, size))
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": chosen.document(),
            "rootfs": {"type": "layers", "diff_ids": [digest for digest, _ in layer_descriptors]},
            "created": "1970-01-01T00:00:00Z",
        }
        config_bytes = _json(config)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {
                "mediaType": MEDIA_CONFIG,
                "digest": digest_of(config_bytes),
                "size": len(config_bytes),
            },
            "layers": [
                {"mediaType": MEDIA_LAYER, "digest": d, "size": size} for d, size in layer_descriptors
            ],
        }
        manifest_bytes = _json(manifest)
        index = {
            "schemaVersion": 2,
            "mediaType": MEDIA_INDEX,
            "manifests": [
                {
                    "mediaType": MEDIA_MANIFEST,
                    "digest": digest_of(manifest_bytes),
                    "size": len(manifest_bytes),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                    },
                }
            ],
        }
        small = {
            "oci-layout": _json({"imageLayoutVersion": "1.0.0"}),
            "index.json": _json(index),
            **{f"blobs/sha256/{digest_of(b)[7:]}": b for b in (config_bytes, manifest_bytes)},
        }
        files: dict[str, bytes | Path] = {**small, **{f"blobs/sha256/{d[7:]}": p for d, p in blobs.items()}}
        partial = Path(scratch) / "archive.tar"
        with tarfile.open(partial, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for directory in ("blobs", "blobs/sha256"):
                tar.addfile(_tarinfo(directory, tarfile.DIRTYPE, 0o755))
            for member in sorted(files):
                content = files[member]
                if isinstance(content, bytes):
                    tar.addfile(_tarinfo(member, tarfile.REGTYPE, 0o644, len(content)), io.BytesIO(content))
                else:
                    with content.open("rb") as data:
                        size = content.stat().st_size
                        tar.addfile(_tarinfo(member, tarfile.REGTYPE, 0o644, size), data)
        partial.replace(archive)
    return Image(name, digest_of(manifest_bytes), archive, config)


def read_image(archive: Path) -> Image:
    """The image an archive written by `build` holds (its name and manifest digest, from index.json)."""
    try:
        with tarfile.open(archive) as tar:
            member = tar.extractfile("index.json")
            if member is None:
                raise KeyError("index.json")
            [entry] = json.loads(member.read())["manifests"]
    except (OSError, KeyError, ValueError, tarfile.TarError) as exc:
        raise ImageError(f"{archive}: not an OCI image archive of one image ({exc})") from None
    return Image(entry["annotations"]["io.containerd.image.name"], entry["digest"], archive)
