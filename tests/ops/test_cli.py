"""The `vke-gpu-dra` command itself: help, --version, and no library chatter on the terminal."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path

import pytest
from vke_gpu_dra_ops.__main__ import build_parser, main, quiet_libraries


def test_version_flag_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"vke-gpu-dra {metadata.version('vke-gpu-dra-ops')}\n"


def test_top_level_help_is_written_for_users() -> None:
    text = build_parser().format_help()
    assert "GPU dynamic resource allocation (DRA) on Volcengine Kubernetes Engine" in text
    assert "vke-gpu-dra verify " in text and "$KUBECONFIG or ~/.kube/config" in text
    assert "Exit codes: 0 success" in text
    assert "one subcommand per module" not in text  # the module docstring is for developers


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["verify", "-n", "ns", "-o", "yaml"], ("namespace", "ns", "output", "yaml")),
        (["demo", "list", "-o", "yaml"], ("output", "yaml", None, None)),
        (["demo", "down", "demo-x", "-y"], ("yes", True, None, None)),
    ],
)
def test_short_flags_as_kubectl_and_helm(argv: list[str], flag: tuple[object, ...]) -> None:
    args = build_parser().parse_args(argv)
    assert getattr(args, str(flag[0])) == flag[1]
    if flag[2]:
        assert getattr(args, str(flag[2])) == flag[3]


def test_library_warnings_and_root_logger_errors_stay_off_the_terminal(tmp_path: Path) -> None:
    # What the kubernetes client and urllib3 do on bad input; a fresh process has no logging set up.
    script = (
        "import logging, warnings\n"
        "from urllib3.exceptions import InsecureRequestWarning\n"
        "from vke_gpu_dra_ops.__main__ import quiet_libraries\n"
        "quiet_libraries()\n"
        "logging.error('exec plugin failed')\n"
        "logging.getLogger('urllib3.connectionpool').warning('Retrying (Retry(total=0))')\n"
        "warnings.warn('Unverified HTTPS request', InsecureRequestWarning)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stderr == "" and done.stdout == ""


def test_quiet_libraries_keeps_other_warnings() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_libraries()
        warnings.warn("ours", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["ours"]
    assert logging.getLogger("vke_gpu_dra_ops").getEffectiveLevel() <= logging.WARNING


def test_a_reader_that_closes_early_ends_the_command_quietly() -> None:
    # `vke-gpu-dra plan --output json | head`: the reader is gone before the command writes.
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-m", "vke_gpu_dra_ops"]
    with subprocess.Popen(
        [*command, "plan", "--stack-config", "Pulumi.dev.yaml", "--output", "json"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        stderr = proc.stderr.read()
        status = proc.wait(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
    assert stderr == ""
    assert status == 141  # 128 + SIGPIPE, what a shell reports for kubectl in the same pipe
