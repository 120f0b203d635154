"""The boundary to Pulumi: the few workspace and stack operations demo environments use.

`DemoWorkspace` and `DemoStack` are what the demo code calls; `AutomationWorkspace` implements them
with `pulumi.automation` (every call runs the Pulumi CLI), tests implement them with fakes.
`pulumi` is imported only here and only when a real workspace is opened.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

INSTALL_COMMAND = "curl -fsSL https://get.pulumi.com | sh"
PASSPHRASE_VARS = ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE")


class DemoStack(Protocol):
    name: str

    def up(self, **kwargs: Any) -> Any: ...

    def destroy(self, **kwargs: Any) -> Any: ...

    def outputs(self) -> Mapping[str, Any]: ...  # name -> OutputValue (.value, .secret)


@dataclass(frozen=True)
class StackInfo:
    name: str
    last_update: datetime | None = None
    resource_count: int | None = None
    update_in_progress: bool | None = None


@dataclass(frozen=True)
class StackFile:
    """The parts of a `Pulumi.<stack>.yaml` a demo stack starts from."""

    config: Mapping[str, Any]
    encryption_salt: str | None = None
    secrets_provider: str | None = None


class DemoWorkspace(Protocol):
    def list_stacks(self) -> list[StackInfo]: ...

    def list_tags(self, stack_name: str) -> Mapping[str, str]: ...

    def set_tag(self, stack_name: str, key: str, value: str) -> None: ...

    def write_stack_file(self, stack_name: str, stack_file: StackFile) -> None: ...

    def create_stack(self, stack_name: str) -> DemoStack: ...

    def select_stack(self, stack_name: str) -> DemoStack: ...

    def remove_stack(self, stack_name: str) -> None: ...


@dataclass(frozen=True)
class WorkspaceOptions:
    project_dir: Path
    backend_url: str
    pulumi_root: str | None  # directory holding bin/pulumi, or None for `pulumi` on PATH


class PulumiUnavailable(Exception):
    """The Pulumi CLI or the pulumi package is missing; the message is one line."""


class PulumiError(Exception):
    """A Pulumi command failed; the message is its error lines."""


class StackNotFound(PulumiError):
    pass


def summarize(text: str, limit: int = 3) -> str:
    """The `error:` lines of a Pulumi command's output (else its last line), joined on one line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    picked = errors[-limit:] if errors else lines[-1:]
    return " | ".join(picked)[:500] or "no output"


def find_pulumi_cli(home: Path | None = None) -> str | None:
    """`""` when `pulumi` is on PATH, the install root when only ~/.pulumi/bin has it, else None."""
    if shutil.which("pulumi"):
        return ""
    root = (home or Path.home()) / ".pulumi"
    if os.access(root / "bin" / "pulumi", os.X_OK):
        return str(root)
    return None


def missing_cli_message() -> str:
    return (
        "the Pulumi CLI is not installed (no `pulumi` on PATH or in ~/.pulumi/bin); "
        f"install it: {INSTALL_COMMAND}"
    )


def backend_url(url: str) -> str:
    """`file://~/dir` made absolute (and the directory created); other URLs unchanged."""
    if not url.startswith("file://"):
        return url
    path = Path(os.path.expanduser(url.removeprefix("file://"))).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return f"file://{path}"


class AutomationWorkspace:
    """`DemoWorkspace` over `pulumi.automation.LocalWorkspace` (a local program in `project_dir`)."""

    def __init__(self, options: WorkspaceOptions) -> None:
        try:
            from pulumi import automation as auto  # noqa: PLC0415 - optional dependency, demo only
        except ImportError:
            raise PulumiUnavailable(
                "the pulumi package is not installed: pip install 'vke-gpu-dra-ops[demo]'"
            ) from None
        self._auto = auto
        try:
            command = auto.PulumiCommand(root=options.pulumi_root or None)
        except FileNotFoundError:
            raise PulumiUnavailable(missing_cli_message()) from None
        self._ws = auto.LocalWorkspace(
            work_dir=str(options.project_dir),
            env_vars={"PULUMI_BACKEND_URL": options.backend_url, "PULUMI_SKIP_UPDATE_CHECK": "true"},
            secrets_provider="passphrase",
            pulumi_command=command,
        )

    def list_stacks(self) -> list[StackInfo]:
        return [
            StackInfo(s.name, s.last_update, s.resource_count, s.update_in_progress)
            for s in self._call(self._ws.list_stacks)
        ]

    def list_tags(self, stack_name: str) -> Mapping[str, str]:
        return dict(self._call(self._ws.list_tags, stack_name))

    def set_tag(self, stack_name: str, key: str, value: str) -> None:
        self._call(self._ws.set_tag, stack_name, key, value)

    def write_stack_file(self, stack_name: str, stack_file: StackFile) -> None:
        # Values, `{secure: …}` ones included, are written as they are in the base stack's file; with
        # its salt they decrypt with the same passphrase (`stack init` keeps an existing salt).
        settings = self._auto.StackSettings(
            encryption_salt=stack_file.encryption_salt, config=dict(stack_file.config)
        )
        self._ws.save_stack_settings(stack_name, settings)

    def create_stack(self, stack_name: str) -> DemoStack:
        return _Stack(self._call(self._auto.Stack.create, stack_name, self._ws), self._call)

    def select_stack(self, stack_name: str) -> DemoStack:
        return _Stack(self._call(self._auto.Stack.select, stack_name, self._ws), self._call)

    def remove_stack(self, stack_name: str) -> None:
        self._call(self._ws.remove_stack, stack_name)  # also deletes the stack's Pulumi.<stack>.yaml

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one automation call, turning its CLI errors into `PulumiError`s."""
        errors = self._auto.errors
        try:
            return fn(*args, **kwargs)
        except errors.StackNotFoundError as exc:
            raise StackNotFound(summarize(str(exc))) from None
        except errors.CommandError as exc:
            raise PulumiError(summarize(str(exc))) from None


class _Stack:
    def __init__(self, stack: Any, call: Callable[..., Any]) -> None:
        self._stack, self._call = stack, call
        self.name: str = stack.name

    def up(self, **kwargs: Any) -> Any:
        return self._call(self._stack.up, **kwargs)

    def destroy(self, **kwargs: Any) -> Any:
        return self._call(self._stack.destroy, **kwargs)

    def outputs(self) -> Mapping[str, Any]:
        return self._call(self._stack.outputs)


def is_secure(value: Any) -> bool:
    """A `{secure: …}` stack config value."""
    return isinstance(value, Mapping) and set(value) == {"secure"}


OpenWorkspace = Callable[[WorkspaceOptions], DemoWorkspace]
