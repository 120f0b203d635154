"""Demo environments: short-lived, uniquely named Pulumi stacks with an expiry tag.

`Demo` works through the `DemoWorkspace` boundary (`pulumi_workspace.py`), so everything here is
tested with a fake workspace. A demo stack starts from a base stack's `Pulumi.<base>.yaml` (config
and passphrase salt, so the base's secrets decrypt with the same PULUMI_CONFIG_PASSPHRASE), is
tagged `vke-gpu-dra:demo=true` and `vke-gpu-dra:expires-at=<UTC ISO>`, and is brought up with the
policy pack; `reap` destroys the expired ones.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TextIO

import yaml
from vke_gpu_dra_core.config import KEYS_BY_NAME, load_pulumi_yaml

from vke_gpu_dra_ops.pulumi_workspace import (
    DemoWorkspace,
    PulumiError,
    StackFile,
    StackInfo,
    StackNotFound,
    is_secure,
)

TAG_DEMO = "vke-gpu-dra:demo"
TAG_EXPIRES_AT = "vke-gpu-dra:expires-at"
TAG_BASE_STACK = "vke-gpu-dra:base-stack"
TAG_OWNER = "vke-gpu-dra:owner"
POLICY_PACK_DIR = "policy"
#: Stack keys of the driver image's Volcengine CR registry, as stack files write them (full names).
KEY_IMAGE = KEYS_BY_NAME["driver.image"].full
KEY_IMAGE_BUILD = KEYS_BY_NAME["driver.image.build"].full
KEY_REGISTRY_CREATE = KEYS_BY_NAME["driver.registry.create"].full
KEY_REGISTRY_NAMESPACE = KEYS_BY_NAME["driver.registry.namespace"].full
#: The kubeconfig file of an existing cluster (key name without the project, which a stack file may vary).
KUBECONFIG_PATH_KEY = KEYS_BY_NAME["kubeconfigPath"].name
DEMO_PREFIX = "demo-"

_TTL = re.compile(r"^(\d+)([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}
MIN_TTL, MAX_TTL = timedelta(minutes=5), timedelta(days=14)
TTL_FORMS = "a duration like 90m, 4h or 2d, from 5m to 14d"


#: Runs verify: (kubeconfig path, stack output values) -> exit code.
Verify = Callable[[str, Mapping[str, Any]], int]


class DemoError(Exception):
    """A usage or setup problem (exit code 2); the message is one line."""


#: How `pulumi destroy` closes (pkg/cmd/pulumi/operations/destroy.go): two lines that advise
#: `pulumi stack rm`, which demo down and reap run themselves.
STACK_RM_HINT: Final = (
    "The resources in the stack have been deleted, but the history and configuration",
    "If you want to remove the stack completely, run",
)


def parse_ttl(text: str) -> timedelta:
    match = _TTL.match(text.strip())
    ttl = timedelta(**{_UNITS[match[2]]: int(match[1])}) if match else None
    if ttl is None or not MIN_TTL <= ttl <= MAX_TTL:
        raise ValueError(f"invalid value {text!r}: expected {TTL_FORMS}")
    return ttl


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def sanitize_user(user: str) -> str:
    cleaned = re.sub(r"[^a-z0-9]+", "-", user.lower()).strip("-")[:20].strip("-")
    return cleaned or "user"


def stack_name(user: str, now: datetime, suffix: str) -> str:
    """`demo-<user>-<yyyymmddhhmm>-<suffix>` (Pulumi stack names: letters, digits, `-`, `_`, `.`)."""
    return f"{DEMO_PREFIX}{sanitize_user(user)}-{now.astimezone(UTC):%Y%m%d%H%M}-{suffix}"


def stack_files(project_dir: Path) -> list[str]:
    """Stacks that have a `Pulumi.<stack>.yaml` in the project (demo stacks excluded)."""
    names = (p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in project_dir.glob("Pulumi.*.yaml"))
    return sorted(n for n in names if not n.startswith(DEMO_PREFIX))


def read_stack_file(project_dir: Path, base: str) -> StackFile:
    path = project_dir / f"Pulumi.{base}.yaml"
    if not path.is_file():
        available = ", ".join(stack_files(project_dir)) or "none"
        raise DemoError(f"--base-stack {base}: no Pulumi.{base}.yaml in the project (stacks: {available})")
    try:
        data = load_pulumi_yaml(path.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        # Only MarkedYAMLError has `problem`; a ReaderError (control characters) or bad UTF-8 has not.
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DemoError(f"--base-stack {base}: Pulumi.{base}.yaml is not valid YAML ({problem})") from None
    if not isinstance(data, dict) or not isinstance(data.get("config") or {}, dict):
        raise DemoError(
            f"--base-stack {base}: Pulumi.{base}.yaml is not a stack file (a map with a config map)"
        )
    config = data.get("config") or {}
    provider = data.get("secretsprovider")
    if any(is_secure(v) for v in config.values()) and (
        provider not in (None, "passphrase") or data.get("encryptedkey")
    ):
        raise DemoError(
            f"--base-stack {base}: its secrets use the {provider} secrets provider; demo stacks use the "
            "passphrase provider, so start from a stack whose secrets are passphrase-encrypted"
        )
    return StackFile(config=config, encryption_salt=data.get("encryptionsalt"), secrets_provider=provider)


@dataclass(frozen=True)
class DemoInfo:
    name: str
    expires_at: datetime | None
    base_stack: str | None
    owner: str | None
    resources: int | None
    update_in_progress: bool

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def state(self, now: datetime) -> str:
        if self.expires_at is None:
            return "no valid expiry"
        if self.expired(now):
            return "expired"
        left = int((self.expires_at - now).total_seconds() // 60)
        return f"{left // 60}h{left % 60:02d}m left"

    def as_json(self, now: datetime) -> dict[str, Any]:
        return {
            "name": self.name,
            "expiresAt": format_time(self.expires_at) if self.expires_at else None,
            "expired": self.expired(now),
            "baseStack": self.base_stack,
            "owner": self.owner,
            "resources": self.resources,
        }


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Demo:
    workspace: DemoWorkspace
    project_dir: Path
    out: TextIO
    err: TextIO
    now: Callable[[], datetime] = _utc_now
    json_output: bool = False  # stdout carries verify's JSON document: `up` reports on stderr

    # ------------------------------------------------------------------ helpers

    def _progress(self, line: str) -> None:
        self.err.write(line if line.endswith("\n") else line + "\n")
        self.err.flush()

    def _pulumi_options(self, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
        # show_secrets=False: secrets stay masked in the engine output that is streamed to stderr.
        return {"on_output": progress or self._progress, "color": "never", "show_secrets": False}

    def _destroy_progress(self, line: str) -> None:
        """`pulumi destroy`'s lines, less its closing advice to run `pulumi stack rm`: the stack is
        removed right after."""
        if not line.strip().startswith(STACK_RM_HINT):
            self._progress(line)

    def demos(self) -> list[DemoInfo]:
        result = []
        for info in self.workspace.list_stacks():
            tags = self.workspace.list_tags(info.name)
            if tags.get(TAG_DEMO) == "true":
                result.append(_demo_info(info, tags))
        return sorted(result, key=lambda d: d.name)

    # ------------------------------------------------------------------ commands

    def up(
        self,
        *,
        base_stack: str,
        ttl: timedelta,
        user: str,
        suffix: str,
        kubeconfig_output: str,
        verify: Verify | None,
        kubeconfig_path: str | None = None,
    ) -> int:
        stack_file = read_stack_file(self.project_dir, base_stack)
        now = self.now()
        name = stack_name(user, now, suffix)
        stack_file = replace(stack_file, config=demo_config(stack_file.config, name))
        expires = format_time(now + ttl)
        self.workspace.write_stack_file(name, stack_file)
        stack = self.workspace.create_stack(name)
        tags = {TAG_DEMO: "true", TAG_EXPIRES_AT: expires, TAG_BASE_STACK: base_stack, TAG_OWNER: user}
        for key, value in tags.items():
            self.workspace.set_tag(name, key, value)
        self.err.write(f"demo stack {name}: from {base_stack}, expires {expires}; running pulumi up\n")
        down_hint = f"tear it down: vke-gpu-dra demo down {name}"
        try:
            stack.up(policy_packs=[str(self.project_dir / POLICY_PACK_DIR)], **self._pulumi_options())
        except PulumiError as exc:
            self.err.write(f"vke-gpu-dra demo up: pulumi up of {name} failed: {exc}\n")
            self.out.write(f"{down_hint}\n")
            return 1
        code = 0
        if verify is not None:
            outputs = stack.outputs()
            values = {k: getattr(v, "value", None) for k, v in outputs.items()}
            # A stack deploying into an existing cluster is verified with that cluster's kubeconfig.
            path = kubeconfig_path or _config_kubeconfig_path(stack_file)
            code = verify(path, values) if path else self._verify(values, name, kubeconfig_output, verify)
        report = self.err if self.json_output else self.out
        report.write(f"demo stack {name} is up (expires {expires}); {down_hint}\n")
        return code

    def _verify(self, values: Mapping[str, Any], name: str, output_name: str, verify: Verify) -> int:
        """Verify with the kubeconfig output, written to a private temp file that is deleted after."""
        value = values.get(output_name)
        if not isinstance(value, str) or not value.strip():
            self.err.write(
                f"vke-gpu-dra demo up: stack {name} has no kubeconfig output {output_name!r} "
                f"(outputs: {', '.join(sorted(values)) or 'none'}); "
                "pass --kubeconfig-output or --kubeconfig\n"
            )
            return 1
        path = write_private_file(value)
        try:
            return verify(path, values)
        finally:
            os.unlink(path)

    def down(self, name: str, confirm: Callable[[str], bool] | None = None) -> int:
        """Destroy and remove demo stack `name`; `confirm(name)` first unless None (--yes)."""
        try:
            tags = self.workspace.list_tags(name)
        except StackNotFound:
            raise DemoError(f"no stack {name!r} in the demo backend (see `vke-gpu-dra demo list`)") from None
        if tags.get(TAG_DEMO) != "true":
            raise DemoError(
                f"{name}: not a demo stack (no tag {TAG_DEMO}=true); demo down removes demo stacks only"
            )
        if confirm is not None and not confirm(name):
            self.err.write(f"kept {name}: not confirmed\n")
            return 1
        return 0 if self._destroy(name) else 1

    def _destroy(self, name: str) -> bool:
        try:
            stack = self.workspace.select_stack(name)
            stack.destroy(**self._pulumi_options(self._destroy_progress))
            self.workspace.remove_stack(name)
        except PulumiError as exc:
            self.err.write(
                f"vke-gpu-dra demo: destroying {name} failed: {exc}; it is kept, run demo down again\n"
            )
            return False
        self.out.write(f"destroyed and removed {name}\n")
        return True

    def reap(self, *, dry_run: bool) -> int:
        now = self.now()
        failed = 0
        expired = []
        for demo in self.demos():
            if demo.expires_at is None:
                self.err.write(f"{demo.name}: no valid {TAG_EXPIRES_AT} tag; left alone\n")
            elif demo.expired(now):
                expired.append(demo)
        for demo in expired:
            if demo.update_in_progress:
                self.err.write(f"{demo.name}: an update is in progress; left for the next reap\n")
            elif dry_run:
                expired_at = format_time(demo.expires_at) if demo.expires_at else "?"
                self.out.write(f"would destroy {demo.name} (expired {expired_at})\n")
            elif not self._destroy(demo.name):
                failed += 1
        if not expired:
            self.out.write("no expired demo stacks\n")
        return 1 if failed else 0


def demo_config(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The base stack's config for demo stack `name`.

    A base stack that builds the driver image into Volcengine CR shares its CR instance with its
    demos: a demo never creates the instance again (its name is taken by the base stack's) and pushes
    into a CR namespace of its own, the demo's name, which `demo down` deletes with the stack.
    """
    out = dict(config)
    builds_into_cr = not out.get(KEY_IMAGE) and not str(out.get(KEY_IMAGE_BUILD, "")).startswith("kind:")
    if builds_into_cr:
        if KEY_REGISTRY_CREATE in out:
            out[KEY_REGISTRY_CREATE] = False
        out[KEY_REGISTRY_NAMESPACE] = name
    return out


def _demo_info(info: StackInfo, tags: Mapping[str, str]) -> DemoInfo:
    return DemoInfo(
        name=info.name,
        expires_at=parse_time(tags.get(TAG_EXPIRES_AT)),
        base_stack=tags.get(TAG_BASE_STACK),
        owner=tags.get(TAG_OWNER),
        resources=info.resource_count,
        update_in_progress=bool(info.update_in_progress),
    )


def _config_kubeconfig_path(stack_file: StackFile) -> str | None:
    """The `<project>:kubeconfigPath` a stack deploying into an existing cluster is configured with."""
    for key, value in stack_file.config.items():
        if key.endswith(f":{KUBECONFIG_PATH_KEY}") and isinstance(value, str) and value.strip():
            return os.path.expanduser(value)
    return None


def write_private_file(text: str) -> str:
    """Write `text` to a new temp file readable by the owner only (0600); the path."""
    fd, path = tempfile.mkstemp(prefix="vke-gpu-dra-kubeconfig-", suffix=".yaml")
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    return path


def render_list(demos: list[DemoInfo], now: datetime) -> str:
    if not demos:
        return "no demo stacks\n"
    rows = [("NAME", "BASE", "OWNER", "EXPIRES AT", "STATE", "RESOURCES")]
    for d in demos:
        expires = format_time(d.expires_at) if d.expires_at else "-"
        resources = "-" if d.resources is None else str(d.resources)
        rows.append((d.name, d.base_stack or "-", d.owner or "-", expires, d.state(now), resources))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows
    )
