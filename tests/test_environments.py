"""The program's and the policy pack's environments hold the shared contract (core), not the driver.

The pack's environment is `policy/venv` (scripts/setup builds it from policy/requirements.txt, as the
Pulumi CLI does); the program's is requirements.txt. Neither installs the node daemon or its runtime
dependencies (NVML bindings, prometheus, gRPC health checking); the pack's holds the capacity planner
but not the operator tools.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICY_DIR = ROOT / "policy"
PACK_PYTHON = POLICY_DIR / "venv" / "bin" / "python"
#: Top-level modules of the driver and of its runtime dependencies.
DRIVER_MODULES = (
    "vke_gpu_dra",
    "vke_gpu_dra_kube",
    "pynvml",
    "prometheus_client",
    "grpc_health",
    "kubernetes",
)
#: The operator tools' package: the pack's environment installs the planner, not them.
OPS_MODULES = ("vke_gpu_dra_ops",)

_PROBE = """
import importlib.util, json, sys
import vke_dra_policies.pack
print(json.dumps({
    "loaded": sorted({m.split(".")[0] for m in sys.modules}),
    "installed": [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None],
}))
"""


def test_the_pack_loads_in_its_environment_without_the_driver() -> None:
    assert PACK_PYTHON.is_file(), f"{PACK_PYTHON} is missing: run scripts/setup"
    proc = subprocess.run(
        [str(PACK_PYTHON), "-c", _PROBE, *DRIVER_MODULES, *OPS_MODULES],
        cwd=POLICY_DIR,  # where the CLI runs the pack: its package is found from there
        env={"PATH": os.environ.get("PATH", ""), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert "vke_dra_policies" in found["loaded"] and "vke_gpu_dra_core" in found["loaded"]
    assert [m for m in DRIVER_MODULES if m in found["loaded"]] == []
    assert found["installed"] == []
    assert "vke_gpu_dra_planner" in found["loaded"]
    assert [m for m in OPS_MODULES if m in found["loaded"]] == []


def test_the_programs_requirements_name_core_not_the_driver() -> None:
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert "-e ./core" in lines
    assert [line for line in lines if "driver" in line] == []
    pack = [line.strip() for line in (POLICY_DIR / "requirements.txt").read_text().splitlines()]
    assert "-e ../core" in pack
    assert [line for line in pack if "driver" in line] == []
    assert "-e ../planner" in pack
    assert [line for line in pack if "ops" in line] == []


def test_the_operator_tools_without_the_kubernetes_client_plan_and_name_the_extra_verify_needs() -> None:
    # `pip install vke-gpu-dra-ops` without the extra: `plan` runs, `verify` says what to install.
    hide_client = (
        "import sys; sys.modules['kubernetes'] = None; "
        "from vke_gpu_dra_ops.__main__ import main; sys.exit(main())"
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", hide_client, *args],
            cwd=ROOT,
            env={"PATH": os.environ.get("PATH", ""), "HOME": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    plan = cli("plan", "--stack-config", "Pulumi.dev.yaml")
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.rstrip().endswith("Result: everything fits")
    verify = cli("verify")
    assert verify.returncode == 2
    assert verify.stderr.startswith(
        "vke-gpu-dra verify: error: the Kubernetes client is not installed (no module "
    )
    assert verify.stderr.rstrip().endswith("pip install 'vke-gpu-dra-ops[cluster]'")
    assert "Traceback" not in verify.stderr
