"""The GPU instance-type catalog: which GPUs a VKE node of each ECS instance type publishes.

Rows live in `gpu_catalog.yaml` (data, with the source and confidence of each row); a stack adds or
overrides rows with the config key `vke-gpu-dra:gpuInstanceTypes` (a JSON or YAML map of the same shape).
GPU facts come from the GPU product profiles (`vke_gpu_dra_core.profiles`), so the planner and the
simulated driver describe a product the same way; the catalog's copies of them are checked on load.

The catalog also lists GPU families (`families:`, every size of e.g. `ecs.gni2` carries GPUs) with their
source and confidence. `is_gpu_instance_type()` / `gpu_types()` answer "does this instance type carry a
GPU" from rows, families and extra names (the policy pack's "DRA GPU node pools use GPU instance types");
`gpu_instance_types()` lists the exact rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Final

import yaml

from .profiles import GpuProfile, UnknownProductError, get_profile, known_products
from .quantity import QuantityError, format_quantity, parse_quantity

CONFIG_KEY: Final = "vke-gpu-dra:gpuInstanceTypes"
CONFIDENCE_LEVELS: Final = ("high", "medium", "low", "unverified")
MAX_GPUS_PER_NODE: Final = 128
_INSTANCE_TYPE_RE: Final = re.compile(r"^ecs\.[a-z0-9-]+\.[a-z0-9-]+$")
_FAMILY_RE: Final = re.compile(r"^ecs\.[a-z0-9-]+$")
_FAMILY_FIELDS: Final = {"confidence", "source"}
_ROW_FIELDS: Final = {
    "product",
    "gpus",
    "gpuMemory",
    "architecture",
    "computeCapability",
    "vcpus",
    "memoryGiB",
    "confidence",
    "source",
}


class CatalogError(ValueError):
    """A catalog row (built in or from stack config) that is not valid; the message names key and field."""


@dataclass(frozen=True)
class InstanceType:
    """One GPU ECS instance type."""

    name: str
    product: str
    gpus: int
    confidence: str
    source: str
    vcpus: int | None = None
    memory_gib: int | None = None
    #: "catalog" for built-in rows, the config key for rows from stack config.
    origin: str = "catalog"

    @property
    def profile(self) -> GpuProfile:
        return get_profile(self.product)

    @property
    def gpu_memory_bytes(self) -> int:
        return self.profile.memory_bytes

    @property
    def architecture(self) -> str:
        return self.profile.architecture

    @property
    def compute_capability(self) -> str:
        major, minor = self.profile.compute_capability
        return f"{major}.{minor}"

    @property
    def verified(self) -> bool:
        return self.confidence in ("high", "medium")

    def summary(self) -> str:
        return (
            f"{self.name}: {self.gpus}x {self.product} ({format_quantity(self.gpu_memory_bytes)}, "
            f"{self.architecture}, compute capability {self.compute_capability}; "
            f"confidence {self.confidence})"
        )


def _row(name: str, raw: Any, where: str, origin: str) -> InstanceType:
    at = f"{where}[{name!r}]"
    if not isinstance(name, str) or not _INSTANCE_TYPE_RE.match(name):
        raise CatalogError(
            f"{where}: key {name!r} is not an ECS instance type; allowed: ecs.<family>.<size>, "
            "e.g. ecs.gni2.3xlarge"
        )
    if not isinstance(raw, Mapping):
        raise CatalogError(f"{at}: must be a map with product, gpus, confidence and source, got {raw!r}")
    unknown = sorted(set(raw) - _ROW_FIELDS)
    if unknown:
        raise CatalogError(
            f"{at}: unknown field(s) {', '.join(map(str, unknown))}; allowed: "
            f"{', '.join(sorted(_ROW_FIELDS))}"
        )
    product = raw.get("product")
    try:
        profile = get_profile(product) if isinstance(product, str) else None
    except UnknownProductError:
        profile = None
    if profile is None:
        raise CatalogError(
            f"{at}.product: {product!r} is not a known GPU product; allowed: {', '.join(known_products())}"
        )
    gpus = raw.get("gpus")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS_PER_NODE:
        raise CatalogError(
            f"{at}.gpus: {gpus!r}; allowed: a whole number of GPUs per node, 1 to {MAX_GPUS_PER_NODE}"
        )
    confidence = raw.get("confidence", "unverified" if origin != "catalog" else None)
    if confidence not in CONFIDENCE_LEVELS:
        raise CatalogError(f"{at}.confidence: {confidence!r}; allowed: {', '.join(CONFIDENCE_LEVELS)}")
    source = raw.get("source", "stack configuration" if origin != "catalog" else None)
    if not isinstance(source, str) or not source.strip():
        raise CatalogError(
            f"{at}.source: {source!r}; allowed: a non-empty text naming where the row comes from"
        )
    _check_copies(at, raw, profile)
    for field in ("vcpus", "memoryGiB"):
        value = raw.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise CatalogError(f"{at}.{field}: {value!r}; allowed: a whole number >= 1")
    return InstanceType(
        name,
        profile.product_name,
        gpus,
        confidence,
        source.strip(),
        raw.get("vcpus"),
        raw.get("memoryGiB"),
        origin,
    )


def _check_copies(at: str, raw: Mapping[str, Any], profile: GpuProfile) -> None:
    """The row's copies of profile facts, when given, must agree with the profile."""
    expected = {
        "architecture": profile.architecture,
        "computeCapability": "{}.{}".format(*profile.compute_capability),
    }
    for field, want in expected.items():
        if field in raw and str(raw[field]) != want:
            raise CatalogError(
                f"{at}.{field}: {raw[field]!r} disagrees with the {profile.product_name} "
                f"profile; allowed: {want!r} (or leave it out)"
            )
    if "gpuMemory" in raw:
        try:
            memory = parse_quantity(str(raw["gpuMemory"]))
        except QuantityError as exc:
            raise CatalogError(f"{at}.gpuMemory: {exc}") from None
        # "80Gi" style marketing sizes are accepted within 3% of what NVML reports
        if abs(memory - profile.memory_bytes) > profile.memory_bytes * 0.03:
            raise CatalogError(
                f"{at}.gpuMemory: {raw['gpuMemory']!r} disagrees with the {profile.product_name} "
                f"profile; allowed: about {format_quantity(profile.memory_bytes)} (or leave it out)"
            )


def parse_rows(data: Any, where: str, origin: str) -> dict[str, InstanceType]:
    if not isinstance(data, Mapping):
        raise CatalogError(f"{where}: must be a map of ECS instance type to row, got {data!r}")
    return {name: _row(name, raw, where, origin) for name, raw in data.items()}


@lru_cache(maxsize=1)
def _builtin_data() -> Mapping[str, Any]:
    text = resources.files(__package__).joinpath("gpu_catalog.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text) or {}


@lru_cache(maxsize=1)
def builtin_catalog() -> dict[str, InstanceType]:
    return parse_rows(_builtin_data().get("instanceTypes"), "gpu_catalog.yaml instanceTypes", "catalog")


def parse_config_value(value: Any) -> dict[str, InstanceType]:
    """Rows from the stack config value of `vke-gpu-dra:gpuInstanceTypes` (JSON/YAML text or a map)."""
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError as exc:
                raise CatalogError(
                    f"{CONFIG_KEY}: not JSON or YAML ({exc}); allowed: a map such as "
                    '{"ecs.gni3cl.11xlarge": {"product": "NVIDIA L20", "gpus": 1}}'
                ) from None
    return parse_rows(value, CONFIG_KEY, CONFIG_KEY)


def load_catalog(config_value: Any = None) -> dict[str, InstanceType]:
    """The built-in catalog plus the stack's rows (`vke-gpu-dra:gpuInstanceTypes`), which override."""
    catalog = dict(builtin_catalog())
    if config_value is not None:
        catalog.update(parse_config_value(config_value))
    return catalog


def lookup(instance_type: str, catalog: Mapping[str, InstanceType] | None = None) -> InstanceType:
    catalog = builtin_catalog() if catalog is None else catalog
    try:
        return catalog[instance_type]
    except KeyError:
        raise CatalogError(
            f"instance type {instance_type!r} is not in the GPU catalog; known: "
            f"{', '.join(sorted(catalog))}; add it with the config key {CONFIG_KEY}"
        ) from None


def _confidence_limit(min_confidence: str) -> int:
    if min_confidence not in CONFIDENCE_LEVELS:
        raise CatalogError(f"min_confidence {min_confidence!r}; allowed: {', '.join(CONFIDENCE_LEVELS)}")
    return CONFIDENCE_LEVELS.index(min_confidence)


def gpu_instance_types(config_value: Any = None, *, min_confidence: str = "unverified") -> list[str]:
    """Names of the GPU instance types known to the catalog (plus the stack's rows), sorted.

    `min_confidence` drops rows below that level ("medium" keeps high and medium rows).
    """
    limit = _confidence_limit(min_confidence)
    return sorted(
        name
        for name, row in load_catalog(config_value).items()
        if CONFIDENCE_LEVELS.index(row.confidence) <= limit
    )


# --- GPU families and "is this a GPU instance type" ---------------------------------------------


@dataclass(frozen=True)
class GpuFamily:
    """An ECS instance family every size of which carries NVIDIA GPUs (`ecs.gni2`)."""

    name: str
    confidence: str
    source: str


def family_of(instance_type: str) -> str:
    """`ecs.gni2.8xlarge` -> `ecs.gni2`."""
    return ".".join(instance_type.split(".")[:2])


def _family(name: Any, raw: Any, where: str) -> GpuFamily:
    at = f"{where}[{name!r}]"
    if not isinstance(name, str) or not _FAMILY_RE.match(name):
        raise CatalogError(
            f"{where}: key {name!r} is not an ECS instance family; allowed: ecs.<family>, e.g. ecs.gni2"
        )
    if not isinstance(raw, Mapping):
        raise CatalogError(f"{at}: must be a map with confidence and source, got {raw!r}")
    unknown = sorted(set(raw) - _FAMILY_FIELDS)
    if unknown:
        raise CatalogError(
            f"{at}: unknown field(s) {', '.join(map(str, unknown))}; allowed: "
            f"{', '.join(sorted(_FAMILY_FIELDS))}"
        )
    confidence = raw.get("confidence")
    if confidence not in CONFIDENCE_LEVELS:
        raise CatalogError(f"{at}.confidence: {confidence!r}; allowed: {', '.join(CONFIDENCE_LEVELS)}")
    source = raw.get("source")
    if not isinstance(source, str) or not source.strip():
        raise CatalogError(
            f"{at}.source: {source!r}; allowed: a non-empty text naming where the claim comes from"
        )
    return GpuFamily(name, confidence, source.strip())


def parse_families(data: Any, where: str, rows: Mapping[str, InstanceType]) -> dict[str, GpuFamily]:
    """The `families:` map; every row of `rows` must belong to one of them."""
    if not isinstance(data, Mapping):
        raise CatalogError(f"{where}: must be a map of ECS instance family to its source, got {data!r}")
    families = {name: _family(name, raw, where) for name, raw in data.items()}
    missing = sorted({family_of(name) for name in rows} - set(families))
    if missing:
        raise CatalogError(
            f"{where}: no entry for the family of catalogued type(s) {', '.join(missing)}; "
            "add the family with its confidence and source"
        )
    return families


@lru_cache(maxsize=1)
def builtin_families() -> dict[str, GpuFamily]:
    return parse_families(_builtin_data().get("families"), "gpu_catalog.yaml families", builtin_catalog())


@dataclass(frozen=True)
class GpuTypes:
    """Which instance types carry NVIDIA GPUs: exact types, and families matching every size."""

    exact: frozenset[str]
    families: frozenset[str]

    def __contains__(self, instance_type: object) -> bool:
        if not isinstance(instance_type, str):
            return False
        return instance_type in self.exact or any(instance_type.startswith(f + ".") for f in self.families)


def gpu_types(
    extra: Iterable[str] = (), *, config_value: Any = None, min_confidence: str = "unverified"
) -> GpuTypes:
    """The catalog's rows and families (plus the stack's rows) at `min_confidence` or above, plus `extra`.

    `extra` names more GPU types: an exact id (`ecs.x.2xlarge`) or a family (`ecs.x` or `ecs.x.*`).
    """
    limit = _confidence_limit(min_confidence)
    exact = set(gpu_instance_types(config_value, min_confidence=min_confidence))
    families = {
        name for name, f in builtin_families().items() if CONFIDENCE_LEVELS.index(f.confidence) <= limit
    }
    for item in extra:
        text = item.strip()
        if text.endswith(".*"):
            families.add(text[:-2])
        elif text.count(".") >= 2:
            exact.add(text)
        elif text:
            families.add(text)
    return GpuTypes(frozenset(exact), frozenset(families))


def is_gpu_instance_type(
    instance_type: str,
    extra: Iterable[str] = (),
    *,
    config_value: Any = None,
    min_confidence: str = "unverified",
) -> bool:
    """True when `instance_type` is a catalogued GPU type, of a GPU family, or named by `extra`."""
    return instance_type in gpu_types(extra, config_value=config_value, min_confidence=min_confidence)
