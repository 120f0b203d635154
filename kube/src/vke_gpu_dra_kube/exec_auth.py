"""Credentials from an exec credential plugin (client.authentication.k8s.io v1 and v1beta1).

The plugin runs with the kubeconfig's args, its env on top of this process's environment, and
`KUBERNETES_EXEC_INFO` (an ExecCredential whose spec says the session is not interactive, with the
cluster when the kubeconfig sets `provideClusterInfo`). It prints an ExecCredential whose status holds a
token and/or a client certificate and key, and may hold `expirationTimestamp`. The answer is kept until
then; a 401 makes the next request run the plugin again (the failed request is not repeated).

A plugin that cannot run, fails, times out or prints something else is one `KubeconfigError` naming the
command (never its arguments, which may hold secrets) and the first line of what it wrote to stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from vke_gpu_dra_core.kubeconfig import KubeconfigError

from .credentials import ClientCert, Identity

#: The ExecCredential versions a plugin may speak (v1alpha1 was removed in Kubernetes 1.24).
API_VERSIONS: Final = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
#: The kubeconfig's `interactiveMode` values; the plugin runs without a terminal, so `Always` cannot work.
INTERACTIVE_MODES: Final = ("Never", "IfAvailable", "Always")
#: The environment variable that carries the ExecCredential to the plugin.
EXEC_INFO_ENV: Final = "KUBERNETES_EXEC_INFO"
#: The longest a plugin may run for one request (less when the request has less time).
EXEC_TIMEOUT: Final = 30.0


@dataclass(frozen=True)
class ExecConfig:
    """A kubeconfig user's `exec` section, checked; `where` names the kubeconfig and the user."""

    where: str
    command: str
    api_version: str
    args: tuple[str, ...] = field(default=(), repr=False)
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    install_hint: str = ""
    cluster: Mapping[str, Any] | None = field(default=None, repr=False)


def _first_line(text: bytes) -> str:
    lines = text.decode("utf-8", errors="replace").strip().splitlines()
    return lines[0].strip()[:200] if lines else ""


def _parse_time(value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("expirationTimestamp is not a string")
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ExecCredentials:
    """Runs the plugin when there is no answer yet, the answer expired, or the server refused it."""

    def __init__(self, config: ExecConfig, *, now: Callable[[], datetime] = _utc_now) -> None:
        self.config = config
        self._now = now
        self._lock = threading.Lock()
        self._cached: Identity | None = None
        self._expires: datetime | None = None

    def _fail(self, what: str) -> KubeconfigError:
        return KubeconfigError(f"{self.config.where}: exec plugin {self.config.command} {what}")

    def _exec_info(self) -> str:
        spec: dict[str, Any] = {"interactive": False}
        if self.config.cluster is not None:
            spec["cluster"] = dict(self.config.cluster)
        return json.dumps({"apiVersion": self.config.api_version, "kind": "ExecCredential", "spec": spec})

    def _run(self, within: float) -> bytes:
        env = {**os.environ, **dict(self.config.env), EXEC_INFO_ENV: self._exec_info()}
        seconds = max(min(EXEC_TIMEOUT, within), 0.001)
        try:
            proc = subprocess.run(  # the kubeconfig names the plugin, as for kubectl
                [self.config.command, *self.config.args],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=seconds,
                check=False,
            )
        except FileNotFoundError:
            hint = _first_line(self.config.install_hint.encode())
            raise self._fail("not found" + (f" ({hint})" if hint else "")) from None
        except PermissionError:
            raise self._fail("cannot be run: permission denied") from None
        except subprocess.TimeoutExpired:
            raise self._fail(f"did not finish within {seconds:g} s") from None
        except OSError as err:
            raise self._fail(f"cannot be run: {os.strerror(err.errno or 0)}") from None
        if proc.returncode != 0:
            said = _first_line(proc.stderr)
            raise self._fail(f"failed with exit code {proc.returncode}" + (f": {said}" if said else ""))
        return proc.stdout

    def _parse(self, out: bytes) -> tuple[Identity, datetime | None]:
        try:
            answer = json.loads(out)
        except ValueError:
            raise self._fail("printed no ExecCredential JSON") from None
        if not isinstance(answer, dict) or answer.get("kind") != "ExecCredential":
            raise self._fail("printed no ExecCredential")
        if answer.get("apiVersion") != self.config.api_version:
            raise self._fail(
                f"answered apiVersion {str(answer.get('apiVersion'))[:80]!r}; the kubeconfig asks for "
                f"{self.config.api_version}"
            )
        status = answer.get("status")
        if not isinstance(status, dict):
            raise self._fail("returned no status")
        token, cert, key = (status.get(k) or "" for k in ("token", "clientCertificateData", "clientKeyData"))
        if not all(isinstance(v, str) for v in (token, cert, key)):
            raise self._fail("returned a status whose token or certificate is not a string")
        if not token and not cert and not key:
            raise self._fail("returned neither a token nor a client certificate and key")
        if bool(cert) != bool(key):
            raise self._fail("returned only one of clientCertificateData and clientKeyData")
        try:
            expires = _parse_time(status.get("expirationTimestamp"))
        except ValueError:
            raise self._fail("returned an expirationTimestamp that is not an RFC 3339 time") from None
        identity = Identity(
            f"Bearer {token}" if token else None,
            ClientCert(cert.encode(), key.encode()) if cert else None,
        )
        return identity, expires

    def identity(self, within: float) -> Identity:
        if not self._lock.acquire(timeout=max(within, 0.001)):
            raise self._fail("is still running for another request")
        try:
            if self._cached is not None and (self._expires is None or self._now() < self._expires):
                return self._cached
            self._cached, self._expires = self._parse(self._run(within))
            return self._cached
        finally:
            self._lock.release()

    def ready(self) -> Identity | None:
        return None  # known only once the plugin has run, at the first request

    def rejected(self, identity: Identity) -> None:
        with self._lock:
            if self._cached is identity:  # not already replaced by another request
                self._cached = None
