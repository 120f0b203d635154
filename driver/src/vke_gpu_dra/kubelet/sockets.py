"""Unix-domain gRPC servers: socket file housekeeping and server construction."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from concurrent import futures
from pathlib import Path

import grpc

from .socket_names import MAX_SOCKET_PATH_BYTES

__all__ = ["MAX_SOCKET_PATH_BYTES", "SocketError", "prepare_socket_path", "remove_socket", "unix_server"]

log = logging.getLogger(__name__)


class SocketError(Exception):
    """A socket path cannot be used."""


def prepare_socket_path(path: Path) -> None:
    """Make sure `path` can be bound: parent directory exists, a stale socket of ours is removed.

    Refuses paths that are too long and existing files that are not sockets (never deletes
    anything that is not a socket).
    """
    if not path.is_absolute():
        raise SocketError(f"socket path {path} must be absolute")
    if len(os.fsencode(str(path))) > MAX_SOCKET_PATH_BYTES:
        raise SocketError(f"socket path {path} is longer than {MAX_SOCKET_PATH_BYTES} bytes")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise SocketError(f"{path} exists and is not a socket; refusing to replace it")
    log.info("removing stale socket", extra={"fields": {"path": str(path)}})
    path.unlink()


def remove_socket(path: Path) -> None:
    """Remove our socket file if it is still there (gRPC usually removes it on stop)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()


def unix_server(*paths: Path, max_workers: int, name: str) -> grpc.Server:
    """A gRPC server with a thread pool, bound (not started) to the unix socket at each of `paths`, in
    order: one server (one completion queue and polling thread) for several sockets."""
    if not paths:
        raise SocketError("a gRPC server needs at least one unix socket path")
    for path in paths:
        prepare_socket_path(path)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name),
        options=[("grpc.so_reuseport", 0)],
    )
    for path in paths:
        # `unix:<path>`, not `unix://<path>`: gRPC counts the `//` against the path limit, so a path of
        # 106 or 107 bytes would not bind.
        try:
            port = server.add_insecure_port(f"unix:{path}")
        except RuntimeError as err:  # what grpcio raises when it cannot bind
            raise SocketError(f"cannot bind gRPC server to unix socket {path}: {err}") from None
        if port == 0:
            raise SocketError(f"cannot bind gRPC server to unix socket {path}")
    return server
