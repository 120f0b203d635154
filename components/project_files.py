"""The repository's files the program reads or hands to providers, relative to the Pulumi project directory.

Pulumi runs the program with the project directory (where Pulumi.yaml is) as its working directory, and
the tests run from the repository root, which is that directory; so these relative paths name the same
files in both, and no module finds the repository from its own location.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

#: The project directory: the working directory the program runs in.
PROJECT_DIR: Final = Path()
#: The driver's sources: the image's build context (driver/Dockerfile names the project as a second one).
DRIVER_DIR: Final = "driver"
DOCKERFILE: Final = f"{DRIVER_DIR}/Dockerfile"
#: The project's Helm chart, as the release references it.
DRIVER_CHART: Final = f"./{DRIVER_DIR}/chart"
#: Its Chart.yaml, whose appVersion is the driver's version.
DRIVER_CHART_FILE: Final = f"{DRIVER_CHART}/Chart.yaml"
#: The shared contract's sources: the image installs them too (from the `project` context).
CORE_DIR: Final = "core"
#: The Kubernetes client set-up the driver shares with the operator tools: in the image too.
KUBE_DIR: Final = "kube"
#: What goes into the image (driver/Dockerfile copies these; `project` provides constraints.txt, core/
#: and kube/).
IMAGE_INPUTS: Final = (
    DOCKERFILE,
    f"{DRIVER_DIR}/pyproject.toml",
    f"{DRIVER_DIR}/README.md",
    f"{DRIVER_DIR}/src",
    f"{CORE_DIR}/pyproject.toml",
    f"{CORE_DIR}/README.md",
    f"{CORE_DIR}/src",
    f"{KUBE_DIR}/pyproject.toml",
    f"{KUBE_DIR}/README.md",
    f"{KUBE_DIR}/src",
    "constraints.txt",
)
