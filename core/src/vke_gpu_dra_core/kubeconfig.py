"""Checks a kubeconfig file before the Kubernetes client reads it (pure: PyYAML, no client).

The client library answers a broken file with a traceback or a bare exception class; this module
turns every way a kubeconfig can be wrong (missing, a directory, unreadable, binary, not YAML, not
a mapping, a context naming nothing) into one `KubeconfigError` whose message names the file and
what is wrong. Messages never quote the file's contents (it holds credentials): only names of
contexts, clusters and users, YAML line and column numbers, and the server URL.

Used by the kubelet plugin at start and by `vke-gpu-dra verify`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A kubeconfig larger than this is not a kubeconfig (and is not read into memory).
MAX_BYTES = 16 * 1024 * 1024


class KubeconfigError(ValueError):
    """The kubeconfig cannot be used; the message is one line naming the file."""


@dataclass(frozen=True)
class Kubeconfig:
    """A kubeconfig that passed the checks: its path, contents and chosen context."""

    path: Path
    data: dict[str, Any]
    context: str
    cluster: str
    user: str
    server: str


_KINDS: tuple[tuple[type, str], ...] = (
    (list, "a list"),
    (dict, "a mapping"),
    (str, "a string"),
    (bool, "a boolean"),
    (int, "a number"),
    (float, "a number"),
)


def _kind(value: object) -> str:
    if value is None:
        return "nothing"
    return next((name for cls, name in _KINDS if isinstance(value, cls)), type(value).__name__)


def read_text(path: Path) -> str:
    """The file's text; KubeconfigError when it is missing, not a file, unreadable or binary."""
    where = f"kubeconfig {path}"
    try:
        if path.is_dir():
            raise KubeconfigError(f"{where} is a directory, not a file")
        if not path.exists():
            raise KubeconfigError(f"{where} does not exist")
        if not path.is_file():
            raise KubeconfigError(f"{where} is not a regular file")
        if path.stat().st_size > MAX_BYTES:
            raise KubeconfigError(
                f"{where} is larger than {MAX_BYTES // (1024 * 1024)} MiB: not a kubeconfig"
            )
        raw = path.read_bytes()
    except PermissionError:
        raise KubeconfigError(f"{where} cannot be read: permission denied") from None
    except OSError as err:
        raise KubeconfigError(f"{where} cannot be read: {os.strerror(err.errno or 0)}") from None
    if b"\x00" in raw:
        raise KubeconfigError(f"{where} is a binary file, not a kubeconfig (YAML text)")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise KubeconfigError(
            f"{where} is not UTF-8 text (invalid byte at offset {err.start}): not a kubeconfig"
        ) from None


#: `parse`'s marker of a text that is not JSON.
_NOT_JSON: Any = object()


def parse(text: str, path: Path) -> dict[str, Any]:
    """The YAML mapping in `text`; KubeconfigError for a YAML error or another top-level type. A kubeconfig
    written as JSON (YAML's subset) is read without loading the YAML library."""
    where = f"kubeconfig {path}"
    try:
        data = json.loads(text) if text.lstrip().startswith("{") else _NOT_JSON
    except ValueError:
        data = _NOT_JSON  # not JSON after all: the YAML parser reads it, or says what is wrong
    if data is _NOT_JSON:
        import yaml  # noqa: PLC0415  (loaded only for a kubeconfig that needs it: the plugin's start path)

        from . import yamlerrors  # noqa: PLC0415

        try:
            data = yaml.safe_load(text)
        except yaml.MarkedYAMLError as err:
            raise KubeconfigError(f"{where} is not valid YAML{yamlerrors.describe(err)}") from None
        except yaml.YAMLError as err:
            raise KubeconfigError(f"{where} is not valid YAML: {type(err).__name__}") from None
    if data is None:
        raise KubeconfigError(f"{where} is empty")
    if not isinstance(data, dict):
        raise KubeconfigError(
            f"{where} must be a YAML mapping (with clusters, contexts and users), found {_kind(data)}"
        )
    return data


def named(data: dict[str, Any], key: str, inner: str, path: Path) -> dict[str, dict[str, Any]]:
    """`key` (a list of {name, <inner>: mapping}) as {name: inner mapping}."""
    where = f"kubeconfig {path}"
    entries = data.get(key)
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise KubeconfigError(f"{where}: {key} must be a list, found {_kind(entries)}")
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise KubeconfigError(f"{where}: {key}[{i}] must be a mapping, found {_kind(entry)}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise KubeconfigError(f"{where}: {key}[{i}] has no name")
        body = entry.get(inner)
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise KubeconfigError(
                f"{where}: {key}[{i}] ({name}).{inner} must be a mapping, found {_kind(body)}"
            )
        out[name] = body
    return out


def check(data: dict[str, Any], path: Path, context: str | None = None) -> Kubeconfig:
    """The context (`context`, else current-context) must exist and name a cluster with a server."""
    where = f"kubeconfig {path}"
    contexts = named(data, "contexts", "context", path)
    clusters = named(data, "clusters", "cluster", path)
    users = named(data, "users", "user", path)
    if context is None:
        current = data.get("current-context")
        if not current:
            raise KubeconfigError(
                f"{where} has no current-context"
                + (f" (contexts: {', '.join(contexts)})" if contexts else " and no contexts")
            )
        if not isinstance(current, str):
            raise KubeconfigError(f"{where}: current-context must be a string, found {_kind(current)}")
        context = current
    if context not in contexts:
        raise KubeconfigError(
            f"{where}: context {context!r} not found (contexts: {', '.join(contexts) or 'none'})"
        )
    body = contexts[context]
    cluster = body.get("cluster")
    if not isinstance(cluster, str) or not cluster:
        raise KubeconfigError(f"{where}: context {context!r} names no cluster")
    if cluster not in clusters:
        raise KubeconfigError(
            f"{where}: context {context!r} names cluster {cluster!r}, which is not in clusters "
            f"({', '.join(clusters) or 'none'})"
        )
    server = clusters[cluster].get("server")
    if not isinstance(server, str) or not server:
        raise KubeconfigError(f"{where}: cluster {cluster!r} has no server")
    user = body.get("user") or ""
    if not isinstance(user, str):
        raise KubeconfigError(f"{where}: context {context!r}: user must be a string, found {_kind(user)}")
    if user and user not in users:
        raise KubeconfigError(
            f"{where}: context {context!r} names user {user!r}, which is not in users "
            f"({', '.join(users) or 'none'})"
        )
    return Kubeconfig(path=path, data=data, context=context, cluster=cluster, user=user, server=server)


def load(path: Path | str, context: str | None = None) -> Kubeconfig:
    """Read and check the kubeconfig at `path`; KubeconfigError (one line, names the file) if unusable."""
    path = Path(path).expanduser()
    return check(parse(read_text(path), path), path, context)
