"""DeviceClass CEL selectors: type-check them like the apiserver, evaluate them against real devices.

Type checking uses cel-expr-python (Google's cel-cpp checker, the engine family of cel-go); evaluation
uses common-expression-language. Neither ships Kubernetes' `semver()`/`quantity()` types, so both get
them as functions over tagged maps ({"__semver": [1, 2, 3]}, {"__quantity": <milli-units>}).
Sample devices come from the driver's own model (its simulated discovery and MIG device builder).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import Any, Final

import cel as rcel
from cel_expr_python import cel as cpp_cel
from vke_gpu_dra import facts
from vke_gpu_dra.discovery.devices import GpuFacts, mig_device
from vke_gpu_dra.discovery.simulated import SimulatedSource
from vke_gpu_dra.model import Device, Version

SAMPLE_NODE: Final = "policy-sample-node"
_QUANTITY_RE: Final = re.compile(r"^([+-]?\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_SUFFIX: Final[Mapping[str, Decimal]] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


# --- Kubernetes CEL library subset: semver() and quantity() as tagged maps ---


def semver(text: str) -> dict[str, list[int]]:
    parts = text.split("-", 1)[0].split("+", 1)[0].split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"invalid semver {text!r}")
    return {"__semver": [int(p) for p in parts]}


def quantity(text: str) -> dict[str, int]:
    match = _QUANTITY_RE.match(text.strip())
    if match is None:
        raise ValueError(f"invalid quantity {text!r}")
    return {"__quantity": int(Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""] * 1000)}


def _key(value: Any) -> Any:
    if isinstance(value, Mapping):
        if "__semver" in value:
            return list(value["__semver"])
        if "__quantity" in value:
            return value["__quantity"]
    raise TypeError(f"no comparison for {value!r}")


def compare_to(a: Any, b: Any) -> int:
    ka, kb = _key(a), _key(b)
    return (ka > kb) - (ka < kb)


FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "semver": semver,
    "quantity": quantity,
    "compareTo": compare_to,
    "isGreaterThan": lambda a, b: compare_to(a, b) > 0,
    "isLessThan": lambda a, b: compare_to(a, b) < 0,
}


@cache
def _checker() -> Any:
    t = cpp_cel.Type
    tagged = t.Map(t.STRING, t.DYN)

    def member(name: str, result: Any) -> Any:
        return cpp_cel.FunctionDecl(
            name, [cpp_cel.Overload(f"{name}_tagged", result, [tagged, tagged], is_member=True)]
        )

    functions = [
        cpp_cel.FunctionDecl("semver", [cpp_cel.Overload("semver_string", tagged, [t.STRING])]),
        cpp_cel.FunctionDecl("quantity", [cpp_cel.Overload("quantity_string", tagged, [t.STRING])]),
        member("compareTo", t.INT),
        member("isGreaterThan", t.BOOL),
        member("isLessThan", t.BOOL),
    ]
    return cpp_cel.NewEnv(variables={"device": tagged}, functions=functions)


def compile_error(expression: str) -> str | None:
    """None when `expression` parses, type-checks and yields bool; else the checker's message."""
    try:
        checked = _checker().compile(expression)
    except RuntimeError as err:
        return str(err).replace("INVALID_ARGUMENT: ", "").split("\n")[0]
    result = str(checked.return_type())
    if result not in ("BOOL", "DYN"):
        return f"must evaluate to bool, not {result.lower()}"
    return None


# --- devices as the CEL environment sees them ---


def _attribute(value: Any) -> Any:
    if isinstance(value, Version):
        return semver(value.value)
    return value


def _split(name: str) -> tuple[str, str]:
    if "/" in name:
        domain, ident = name.rsplit("/", 1)
        return domain, ident
    return facts.DRIVER_NAME, name


def cel_device(device: Device) -> dict[str, Any]:
    """The `device` variable for one of the driver's devices (attributes and capacity by domain)."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in device.attributes.items():
        domain, ident = _split(name)
        attributes.setdefault(domain, {})[ident] = _attribute(value)
    capacity: dict[str, dict[str, Any]] = {}
    for name, amount in device.capacity.items():
        domain, ident = _split(name)
        capacity.setdefault(domain, {})[ident] = {"__quantity": amount * 1000}
    return {
        "driver": facts.DRIVER_NAME,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": False,
    }


def matches(expression: str, device: Device) -> bool | str:
    """True/False, or the evaluation error (a missing attribute is an error, as in Kubernetes)."""
    try:
        program = rcel.compile(expression)
        result = program.execute(rcel.Context(variables={"device": cel_device(device)}, functions=FUNCTIONS))
    except (KeyError, ValueError, TypeError, RuntimeError) as err:
        return f"evaluation error: {err!r}"
    if not isinstance(result, bool):
        return f"evaluated to {result!r}, not a bool"
    return result


@dataclass(frozen=True)
class Samples:
    gpu: Device
    mig: Device


@cache
def sample_devices() -> Samples:
    """A full GPU from the driver's simulated discovery and a MIG device built by its MIG builder."""
    gpu = (
        SimulatedSource(count=1, product="NVIDIA A100-SXM4-40GB", node_name=SAMPLE_NODE).discover().devices[0]
    )
    parent = GpuFacts(
        minor=0,
        uuid=gpu.uuid,
        product_name=str(gpu.attributes[facts.ATTR_PRODUCT_NAME]),
        brand=str(gpu.attributes[facts.ATTR_BRAND]),
        architecture=str(gpu.attributes[facts.ATTR_ARCHITECTURE]),
        cuda_compute_capability=_version(gpu, facts.ATTR_CUDA_COMPUTE_CAPABILITY),
        driver_version=_version(gpu, facts.ATTR_DRIVER_VERSION),
        cuda_driver_version=_version(gpu, facts.ATTR_CUDA_DRIVER_VERSION),
        pcie_bus_id=str(gpu.attributes[facts.ATTR_PCIE_BUS_ID]),
        pcie_root=str(gpu.attributes.get(facts.ATTR_PCIE_ROOT, "")) or None,
        memory_bytes=gpu.capacity[facts.CAPACITY_MEMORY],
    )
    mig = mig_device(
        parent,
        name="gpu-0-mig-1g5gb-0",
        uuid="MIG-00000000-0000-4000-8000-000000000001",
        profile="1g.5gb",
        capacity={facts.CAPACITY_MEMORY: 5 * 2**30, facts.CAPACITY_MULTIPROCESSORS: 14},
        caps_nodes=(),
    )
    return Samples(gpu=gpu, mig=mig)


def _version(device: Device, name: str) -> Version:
    value = device.attributes[name]
    if not isinstance(value, Version):
        raise TypeError(f"sample attribute {name} is {value!r}, expected a version")
    return value
