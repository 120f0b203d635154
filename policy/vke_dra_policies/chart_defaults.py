"""The defaults of the project's chart that the policies read, as data the pack owns.

A release of the project's chart gets the chart's defaults under its values (Helm merges
`driver/chart/values.yaml`, values files, then `values`). The pack needs a few of those defaults to
judge a release that does not set them; it keeps them in `chart_defaults.yaml` beside this module,
generated from the chart's values.yaml, so it runs wherever the Pulumi CLI copies it:

    cd policy && python -m vke_dra_policies.chart_defaults ../driver/chart/values.yaml [--check]

`tests/policy/test_chart_defaults.py` keeps the file equal to what the chart's values.yaml gives.
Only the values in `PATHS` are copied; a policy that reads another default adds its path there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Final

import yaml
from vke_gpu_dra_core import yamlerrors

#: The values the policies read from a release of the project's chart.
PATHS: Final[tuple[tuple[str, ...], ...]] = (
    ("driverName",),  # deviceclasses: the driver name the chart's DeviceClasses select
    ("deviceClasses", "enabled"),  # deviceclasses: whether the chart renders the DeviceClasses
    ("deviceClasses", "gpuExtendedResourceName"),  # extended_resource: what gpu.nvidia.com maps
    ("featureGates",),  # sharing: the gates a GPU sharing strategy needs
    ("image", "repository"),  # image: pinned by digest, in a registry the nodes can pull from
    ("image", "tag"),
    ("image", "digest"),
    ("kubeletPlugin", "affinity"),  # driver: the kubelet plugin runs on DRA nodes only
    ("kubeletPlugin", "nodeSelector"),
)
DATA_FILE: Final = Path(__file__).with_name("chart_defaults.yaml")
HEADER: Final = (
    "# Generated from driver/chart/values.yaml by `python -m vke_dra_policies.chart_defaults`; do not edit.\n"
    "# The chart's defaults that the policies read (vke_dra_policies/chart_defaults.py, PATHS).\n"
)


class ChartDefaultsError(ValueError):
    """The chart's values.yaml lacks a value the policies read."""


def extract(values: Mapping[str, Any]) -> dict[str, Any]:
    """The values at `PATHS` of the chart's values, nested as in values.yaml."""
    out: dict[str, Any] = {}
    for path in PATHS:
        node: Any = values
        for depth, key in enumerate(path):
            if not isinstance(node, Mapping):
                where = ".".join(path[:depth])
                raise ChartDefaultsError(
                    f"the chart's values.yaml has {where} as a {type(node).__name__}, not a map; "
                    f"the policy pack reads {'.'.join(path)}"
                )
            if key not in node:
                where = ".".join(path[: depth + 1])
                raise ChartDefaultsError(f"the chart's values.yaml has no {where}; the policy pack reads it")
            node = node[key]
        target = out
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = node
    return out


def render(values_yaml: str) -> str:
    """The text of `chart_defaults.yaml` for the chart's values.yaml text."""
    values = yaml.safe_load(values_yaml)
    if not isinstance(values, Mapping):
        raise ChartDefaultsError("the chart's values.yaml is not a mapping")
    return HEADER + yaml.safe_dump(extract(values), sort_keys=True, default_flow_style=False)


@cache
def load() -> Mapping[str, Any]:
    """The chart's defaults the policies read (`chart_defaults.yaml`)."""
    loaded = yaml.safe_load(DATA_FILE.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, Mapping) else {}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vke_dra_policies.chart_defaults",
        description="Write (or --check) chart_defaults.yaml from the project chart's values.yaml.",
    )
    parser.add_argument("values", type=Path, help="the chart's values.yaml (driver/chart/values.yaml)")
    parser.add_argument("--check", action="store_true", help="exit 1 when chart_defaults.yaml is stale")
    args = parser.parse_args(argv)
    try:
        text = render(args.values.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        print(f"{parser.prog}: {args.values}: not valid YAML{yamlerrors.describe(err)}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError, ChartDefaultsError) as err:
        print(f"{parser.prog}: {args.values}: {err}", file=sys.stderr)
        return 2
    current = DATA_FILE.read_text(encoding="utf-8") if DATA_FILE.is_file() else ""
    if args.check:
        if current != text:
            stale = f"{DATA_FILE.name} differs from {args.values}; run it without --check to regenerate it"
            print(f"{parser.prog}: {stale}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        DATA_FILE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
