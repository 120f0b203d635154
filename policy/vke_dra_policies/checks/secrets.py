"""Secrets stay secrets: kubeconfigs and passwords are secret in the state, outputs carry no plaintext."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Final

from vke_gpu_dra_core import pulumi_types as pt
from vke_gpu_dra_core import resources as r

from . import Violation

#: Property names (any resource, any depth; case and "_" ignored) whose values are credentials.
SECRET_KEYS: Final = frozenset(
    {
        "password",
        "secretkey",
        "accesskey",
        "sessiontoken",
        "kubeconfig",
        "kubeconfigpublic",
        "kubeconfigprivate",
    }
)
#: Output names that must never be plaintext.
_SECRET_NAME_RE: Final = re.compile(r"kubeconfig|password|passwd|secret|token|private.?key|access.?key", re.I)
_REFERENCE_SUFFIX_RE: Final = re.compile(r"(path|file|name|id|ids|ref|arn)$", re.I)
_KUBECONFIG_MARKERS: Final = ("client-key-data", "client-certificate-data", "certificate-authority-data")
_MIN_SECRET_LEN: Final = 8


def _decoded(text: str) -> str:
    """`text`, base64-decoded when it is base64 (VKE hands kubeconfigs and passwords over in base64)."""
    compact = text.strip()
    if len(compact) < 16 or not re.fullmatch(r"[A-Za-z0-9+/=\s]+", compact):
        return text
    try:
        return base64.b64decode(compact, validate=False).decode("utf-8", errors="ignore")
    except (binascii.Error, ValueError):
        return text


def looks_like_credential(text: str) -> bool:
    """Kubeconfig content (YAML/JSON, plain or base64) or a PEM private key."""
    for candidate in (text, _decoded(text)):
        if "-----BEGIN" in candidate and "PRIVATE KEY" in candidate:
            return True
        if ("clusters" in candidate and "users" in candidate) or any(
            m in candidate for m in _KUBECONFIG_MARKERS
        ):
            return True
    return False


def _is_kubeconfig_path(text: str) -> bool:
    """A provider kubeconfig that is a file path (the local stack) holds no secret itself."""
    return "\n" not in text and not text.lstrip().startswith("{") and not looks_like_credential(text)


def _credential_name(name: str) -> bool:
    """A name like a credential ("adminPassword"), not a reference to one ("kubeconfigPath")."""
    return bool(_SECRET_NAME_RE.search(name)) and not _REFERENCE_SUFFIX_RE.search(name)


def _is_secret_key(key: str | int) -> bool:
    return isinstance(key, str) and key.replace("_", "").lower() in SECRET_KEYS


def secret_props(resources: Sequence[r.Res]) -> list[Violation]:
    """Kubeconfig text, passwords and cloud keys are secret in the state, wherever they appear."""
    out = []
    for res in resources:
        if res.type == pt.STACK:
            continue
        for path, value in r.walk_strings(res.props):
            if not path or not _is_secret_key(path[-1]) or not value or res.is_secret(path):
                continue
            if str(path[-1]).lower() == "kubeconfig" and _is_kubeconfig_path(value):
                continue
            out.append(
                Violation(
                    f"{res.label}: {r.format_path(path)} is stored in plaintext ({len(value)} characters); "
                    "wrap it with pulumi.Output.secret(...) (or list it in additional_secret_outputs) so "
                    "the state encrypts it.",
                    res.urn,
                )
            )
    return out


def known_secret_values(resources: Sequence[r.Res]) -> set[str]:
    """Secret strings of the stack, to find them again unmarked in outputs.

    Only values marked secret themselves or held under a credential name: the SDK marks a whole
    top-level input secret when anything inside it is (the node pool's nodeConfig for its password),
    and instance types or subnet ids in there are not secrets.
    """
    values = set()
    for res in resources:
        for path, text in r.walk_strings(res.props):
            if len(text) < _MIN_SECRET_LEN or not res.is_secret(path):
                continue
            if path in res.secret_paths or (path and _is_secret_key(path[-1])):
                values.add(text)
    return values


def plaintext_outputs(resources: Sequence[r.Res]) -> list[Violation]:
    """No stack output holds a secret in plaintext."""
    secrets = known_secret_values(resources)
    out = []
    for stack in r.of_type(resources, pt.STACK):
        for path, text in r.walk_strings(stack.props):
            if stack.is_secret(path) or not text:
                continue
            name = r.format_path(path)
            reason = None
            if text in secrets:
                reason = "holds a value that is secret elsewhere in the stack"
            elif looks_like_credential(text):
                reason = "holds kubeconfig or private-key content"
            elif _credential_name(str(path[0])):
                reason = "is named like a credential"
            if reason:
                out.append(
                    Violation(
                        f'stack output "{name}" {reason} and is plaintext ({len(text)} characters); export '
                        "it with pulumi.Output.secret(...) or drop the output.",
                        stack.urn,
                    )
                )
    return out
