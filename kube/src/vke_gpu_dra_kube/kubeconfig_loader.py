"""The lean transport's configuration: a kubeconfig (one file or a merged path list) or the in-cluster
service account, as a `ClientConfig`. No official client involved.

* A file's structure is checked first by the shared contract (`vke_gpu_dra_core.kubeconfig`); what it
  lets through and this loader cannot use is one `KubeconfigError` naming the file, the cluster or user,
  the field and what is allowed. Messages never quote tokens, passwords, keys or certificates.
* A path list (`$KUBECONFIG`) is merged as kubectl merges it: files that do not exist are skipped, the
  first file that sets `current-context` wins, and so does the first file that defines a cluster, user
  or context of a given name (entries are never merged). Relative paths (`certificate-authority`,
  `client-certificate`, `client-key`, `tokenFile`, and an exec `command` with a directory part) resolve
  against the directory of the file that holds them.
* Clusters: `server`, `certificate-authority(-data)`, `insecure-skip-tls-verify`, `tls-server-name`,
  `proxy-url` (http or https). Users: `token`, `tokenFile`, `client-certificate(-data)` with
  `client-key(-data)`, `username`/`password`, `exec` (`exec_auth`); as with client-go, `exec` is not
  run when the user has a token, basic auth or a client certificate. The legacy `auth-provider` and
  impersonation (`as`, ...) are refused.
* In cluster: the service account's token (re-read as it rotates) and CA in `SERVICE_ACCOUNT_DIR`, the
  server at KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT (an IPv6 address bracketed).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from vke_gpu_dra_core import kubeconfig
from vke_gpu_dra_core.kubeconfig import KubeconfigError

from .client_config import ClientConfig
from .credentials import ANONYMOUS, Credentials, KubeconfigCredentials, Source, WatchedFile, fixed
from .exec_auth import API_VERSIONS, INTERACTIVE_MODES, ExecConfig, ExecCredentials

#: Where the kubelet mounts a pod's service account token and the cluster's CA.
SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: The kubeconfig read when $KUBECONFIG is not set.
DEFAULT_KUBECONFIG: Final = "~/.kube/config"
#: The cluster extension whose value an exec plugin gets as `spec.cluster.config`.
EXEC_EXTENSION: Final = "client.authentication.k8s.io/exec"
#: User fields of client-go's impersonation, which this client does not do.
_IMPERSONATION: Final = ("as", "as-uid", "as-groups", "as-user-extra")

_PATH_FIELDS: Final = {
    "clusters": ("cluster", ("certificate-authority",)),
    "users": ("user", ("client-certificate", "client-key", "tokenFile")),
}


class NotInCluster(KubeconfigError):
    """This process does not run in a pod with a service account (the message says what is missing)."""


def _kind(value: object) -> str:
    kinds = (
        (bool, "a boolean"),
        (int, "a number"),
        (float, "a number"),
        (list, "a list"),
        (dict, "a mapping"),
    )
    return next((name for cls, name in kinds if isinstance(value, cls)), "a string")


def _text(body: Mapping[str, Any], key: str, where: str) -> str | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise KubeconfigError(f"{where}: {key} must be a string, found {_kind(value)}")
    return value


def _flag(body: Mapping[str, Any], key: str, where: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise KubeconfigError(f"{where}: {key} must be true or false, found {_kind(value)}")
    return value


def _data(body: Mapping[str, Any], key: str, where: str) -> bytes | None:
    text = _text(body, key, where)
    if text is None:
        return None
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(
            f"{where}: {key} is not base64 (it holds the PEM text, base64-encoded)"
        ) from None


def _read_file(path: str, what: str, where: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        reason = os.strerror(err.errno) if err.errno else type(err).__name__
        raise KubeconfigError(f"{where}: {what} {path} cannot be read: {reason}") from None


def _resolved(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """`data` with the relative file paths of its clusters and users made absolute against `base`."""
    out = dict(data)
    for key, (inner, fields) in _PATH_FIELDS.items():
        entries = []
        for entry in data.get(key) or []:
            body = dict(entry.get(inner) or {})
            for name in fields:
                value = body.get(name)
                if isinstance(value, str) and value and not os.path.isabs(value):
                    body[name] = str(base / value)
            command = body.get("exec", {}).get("command") if isinstance(body.get("exec"), dict) else None
            if isinstance(command, str) and os.sep in command and not os.path.isabs(command):
                body["exec"] = {**body["exec"], "command": str(base / command)}
            entries.append({**entry, inner: body})
        if key in data:
            out[key] = entries
    return out


def _read(path: Path) -> dict[str, Any]:
    """One file of a kubeconfig, its shape checked and its relative paths resolved."""
    data = kubeconfig.parse(kubeconfig.read_text(path), path)
    for key, inner in (("clusters", "cluster"), ("contexts", "context"), ("users", "user")):
        kubeconfig.named(data, key, inner, path)
    return _resolved(data, path.parent)


def merge(files: list[dict[str, Any]]) -> dict[str, Any]:
    """Kubeconfig files merged as kubectl does: the first to set a value or define a name wins."""
    merged: dict[str, Any] = {"clusters": [], "contexts": [], "users": []}
    for data in files:
        if not merged.get("current-context") and data.get("current-context"):
            merged["current-context"] = data["current-context"]
        for key in ("clusters", "contexts", "users"):
            known = {entry["name"] for entry in merged[key]}
            merged[key] += [entry for entry in data.get(key) or [] if entry["name"] not in known]
    return merged


def kubeconfig_paths(environ: Mapping[str, str] | None = None) -> str:
    """What kubectl reads: $KUBECONFIG (a path list), else ~/.kube/config."""
    env = os.environ if environ is None else environ
    paths = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    return os.pathsep.join(paths) if paths else DEFAULT_KUBECONFIG


def from_kubeconfig(paths: str | Path, context: str | None = None) -> ClientConfig:
    """The configuration of `context` (default: the current one) of the kubeconfig at `paths` (one file,
    or a path list merged as kubectl does); KubeconfigError naming the file if it cannot be used."""
    names = (
        [Path(p).expanduser() for p in str(paths).split(os.pathsep) if p] if isinstance(paths, str) else []
    )
    if isinstance(paths, Path) or len(names) == 1:
        path = Path(paths).expanduser() if isinstance(paths, Path) else names[0]
        kubeconfig.load(path, context)  # the shared contract's checks and messages first
        return _client_config(_read(path), path, context)
    existing = [p for p in names if p.exists()]
    label = Path(os.pathsep.join(str(p) for p in names))
    if not existing:
        raise KubeconfigError(f"kubeconfig {label}: none of these files exists")
    return _client_config(merge([_read(p) for p in existing]), label, context)


def _client_config(data: dict[str, Any], label: Path, context: str | None) -> ClientConfig:
    chosen = kubeconfig.check(data, label, context)
    where = f"kubeconfig {label}"
    cluster = kubeconfig.named(data, "clusters", "cluster", label)[chosen.cluster]
    user = kubeconfig.named(data, "users", "user", label).get(chosen.user, {}) if chosen.user else {}
    at_cluster = f"{where}: cluster {chosen.cluster!r}"
    ca_pem = _data(cluster, "certificate-authority-data", at_cluster)
    if ca_pem is None and (ca_file := _text(cluster, "certificate-authority", at_cluster)) is not None:
        ca_pem = _read_file(ca_file, "certificate-authority", at_cluster)
    proxy = _text(cluster, "proxy-url", at_cluster)
    if proxy is not None and not proxy.startswith(("http://", "https://")):
        scheme = proxy.partition("://")[0] if "://" in proxy else "none"
        raise KubeconfigError(
            f"{at_cluster}: proxy-url must be an http:// or https:// URL (found scheme {scheme})"
        )
    insecure = _flag(cluster, "insecure-skip-tls-verify", at_cluster)
    tls_server_name = _text(cluster, "tls-server-name", at_cluster)
    exec_cluster: dict[str, Any] = {"server": chosen.server}
    if tls_server_name:
        exec_cluster["tls-server-name"] = tls_server_name
    if insecure:
        exec_cluster["insecure-skip-tls-verify"] = True
    if ca_pem is not None:
        exec_cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode("ascii")
    if proxy:
        exec_cluster["proxy-url"] = proxy
    for ext in cluster.get("extensions") or []:
        if isinstance(ext, dict) and ext.get("name") == EXEC_EXTENSION:
            exec_cluster["config"] = ext.get("extension")
    return ClientConfig(
        server=chosen.server,
        source=where,
        credentials=_credentials(user, f"{where}: user {chosen.user!r}", exec_cluster),
        ca_pem=ca_pem,
        insecure=insecure,
        tls_server_name=tls_server_name,
        proxy_url=proxy,
    )


def _source(body: Mapping[str, Any], key: str, where: str, files: list[WatchedFile]) -> Source | None:
    """`<key>-data` (base64) if set, else the file `<key>` (watched: it may be renewed on disk)."""
    data = _data(body, f"{key}-data", where)
    if data is not None:
        return fixed(data)
    path = _text(body, key, where)
    if path is None:
        return None
    try:
        file = WatchedFile(Path(path), key)
    except KubeconfigError as err:
        raise KubeconfigError(f"{where}: {err}") from None
    files.append(file)
    return file.read


def _credentials(user: Mapping[str, Any], where: str, cluster: Mapping[str, Any]) -> Credentials:
    provider = user.get("auth-provider")
    if provider is not None:
        name = provider.get("name") if isinstance(provider, dict) else None
        raise KubeconfigError(
            f"{where}: auth-provider {name or '(unnamed)'} is not supported: use an exec credential "
            f"plugin ({API_VERSIONS[0]})"
        )
    for field in _IMPERSONATION:
        if user.get(field):
            raise KubeconfigError(f"{where}: impersonation ({field}) is not supported")
    token = _text(user, "token", where)
    token_path = _text(user, "tokenFile", where)
    username, password = _text(user, "username", where), _text(user, "password", where)
    methods = [
        m for m, on in (("token", token or token_path), ("username/password", username or password)) if on
    ]
    if len(methods) > 1:
        raise KubeconfigError(
            f"{where}: more than one authentication method ({' and '.join(methods)}): keep one"
        )
    files: list[WatchedFile] = []
    cert = _source(user, "client-certificate", where, files)
    key = _source(user, "client-key", where, files)
    if (cert is None) != (key is None):
        raise KubeconfigError(f"{where}: client-certificate and client-key go together: set both or neither")
    token_file = None
    if token_path is not None:
        try:
            token_file = WatchedFile(Path(token_path), "tokenFile")
        except KubeconfigError as err:
            raise KubeconfigError(f"{where}: {err}") from None
    if methods or cert is not None:
        return KubeconfigCredentials(
            token=token,
            token_file=token_file,
            basic=(username or "", password or "") if username or password else None,
            cert=cert,
            key=key,
            files=tuple(files),
        )
    if user.get("exec") is not None:
        return ExecCredentials(_exec_config(user["exec"], where, cluster))
    return ANONYMOUS


def _exec_config(body: object, where: str, cluster: Mapping[str, Any]) -> ExecConfig:
    where = f"{where}: exec"
    if not isinstance(body, dict):
        raise KubeconfigError(f"{where} must be a mapping, found {_kind(body)}")
    command = _text(body, "command", where)
    if command is None:
        raise KubeconfigError(f"{where}: command is not set")
    api_version = _text(body, "apiVersion", where)
    if api_version not in API_VERSIONS:
        raise KubeconfigError(
            f"{where}: apiVersion {api_version or '(not set)'} is not supported "
            f"(allowed: {', '.join(API_VERSIONS)})"
        )
    mode = _text(body, "interactiveMode", where)
    if mode is None and api_version == API_VERSIONS[0]:
        raise KubeconfigError(
            f"{where}: interactiveMode must be set for {api_version} ({', '.join(INTERACTIVE_MODES[:2])})"
        )
    if mode is not None and mode not in INTERACTIVE_MODES:
        raise KubeconfigError(
            f"{where}: interactiveMode {mode!r} is not one of {', '.join(INTERACTIVE_MODES)}"
        )
    if mode == "Always":
        raise KubeconfigError(
            f"{where}: interactiveMode Always needs a terminal; this client runs without one"
        )
    args = body.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise KubeconfigError(f"{where}: args must be a list of strings")
    env: list[tuple[str, str]] = []
    for i, item in enumerate(body.get("env") or []):
        name = item.get("name") if isinstance(item, dict) else None
        value = item.get("value", "") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise KubeconfigError(f"{where}: env[{i}] must be a mapping with a name and a string value")
        env.append((name, value))
    return ExecConfig(
        where=where.removesuffix(": exec"),
        command=command,
        api_version=api_version,
        args=tuple(args),
        env=tuple(env),
        install_hint=_text(body, "installHint", where) or "",
        cluster=cluster if _flag(body, "provideClusterInfo", where) else None,
    )


def in_cluster(root: Path = SERVICE_ACCOUNT_DIR, environ: Mapping[str, str] | None = None) -> ClientConfig:
    """The pod's service account (token re-read as it rotates, CA) and the cluster's API service;
    NotInCluster saying what is missing."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise NotInCluster("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
    token_path, ca_path = root / "token", root / "ca.crt"
    if not token_path.is_file():
        raise NotInCluster(f"no service account token at {token_path}")
    try:
        ca_pem = ca_path.read_bytes()
        token = WatchedFile(token_path, "service account token")
    except OSError as err:
        raise NotInCluster(
            f"the service account's {ca_path.name} cannot be read: {os.strerror(err.errno or 0)}"
        ) from None
    except KubeconfigError as err:
        raise NotInCluster(str(err)) from None
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return ClientConfig(
        server=f"https://{bracketed}:{port}",
        source=f"the service account in {root}",
        credentials=KubeconfigCredentials(token_file=token),
        ca_pem=ca_pem,
    )
