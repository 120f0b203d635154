"""The DRA device-selector CEL environment (dynamic-resource-allocation `cel/compile.go`), offline.

Two engines, each for what it does well:

* `cel-expr-python` (cel-cpp) type-checks a selector the way the apiserver does: `device.driver` is a
  string, `device.attributes[domain][id]` is dyn, `device.capacity[domain][id]` is a Quantity, and
  `quantity()` / `semver()` and their methods are declared with their Kubernetes overloads. So
  `device.driver == 1` fails with the apiserver's "found no matching overload for '_==_' applied to
  '(string, int)'", while `device.attributes['gpu.nvidia.com'].productName == 1` compiles (attributes are
  dyn) and is simply false.
* `common-expression-language` (Rust) evaluates, with Quantity and Semver as tagged maps and the library
  functions as Python callables.

Runtime errors (an unknown attribute id, a malformed quantity literal) surface as `SelectorRuntimeError`,
because the scheduler's allocator fails the allocation on them rather than skipping the device.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final

from cel_expr_python import cel as celcpp
from vke_gpu_dra_core.device_model import Device, Version
from vke_gpu_dra_core.quantity import (
    QuantityError,
    is_quantity,
    parse_quantity,
    quantity_as_int64,
    round_to_nano,
)

from ..semver import Semver, SemverError, is_semver, parse_semver
from . import engine
from .rewrite import default_computed_domains, rewrite_bind

if TYPE_CHECKING:
    import cel
else:
    cel = engine.load()

_Q_TAG: Final = "__kubernetes.Quantity"
_S_TAG: Final = "__kubernetes.Semver"

#: Functions of the Kubernetes base CEL environment the offline type-checker does not declare. A selector
#: whose only type-check errors name these is evaluated unchecked (and says so).
UNCHECKED_LIBRARY_NAMES: Final = frozenset(
    {
        "lowerAscii",
        "upperAscii",
        "trim",
        "replace",
        "split",
        "join",
        "indexOf",
        "lastIndexOf",
        "substring",
        "charAt",
        "format",
        "quote",
        "reverse",
        "isSorted",
        "sum",
        "min",
        "max",
        "find",
        "findAll",
        "url",
        "isURL",
        "ip",
        "isIP",
        "cidr",
        "isCIDR",
        "sets",
        "contains",
        "equivalent",
        "intersects",
    }
)


class SelectorError(Exception):
    """Base for selector problems; `expression` is the CEL source."""

    def __init__(self, expression: str, detail: str) -> None:
        super().__init__(detail)
        self.expression = expression
        self.detail = detail


class SelectorCompileError(SelectorError):
    """The selector would be rejected by the apiserver (syntax, type-check or result type)."""

    def __str__(self) -> str:
        return f"selector {self.expression!r} does not compile: {self.detail}"


class SelectorRuntimeError(SelectorError):
    """Evaluating the selector for a device failed (the scheduler fails allocation on this)."""

    def __str__(self) -> str:
        return f"selector {self.expression!r}: CEL runtime error: {self.detail}"


# --- value representations for the evaluating engine -------------------------------------------


def _q(value: Fraction) -> dict[str, str]:
    value = round_to_nano(value)
    return {_Q_TAG: f"{value.numerator}/{value.denominator}"}


def _sv(value: Semver) -> dict[str, str]:
    # build metadata does not take part in comparisons or equality (blang Compare), so it is dropped
    return {_S_TAG: str(Semver(value.major, value.minor, value.patch, value.prerelease))}


@lru_cache(maxsize=8192)
def _fraction(text: str) -> Fraction:
    return Fraction(text)


def _as_quantity(value: object) -> Fraction | None:
    if isinstance(value, dict) and _Q_TAG in value:
        return _fraction(value[_Q_TAG])
    return None


def _as_semver(value: object) -> Semver | None:
    if isinstance(value, dict) and _S_TAG in value:
        return parse_semver(value[_S_TAG])
    return None


def _no_overload(function: str, *args: object) -> TypeError:
    kinds = ", ".join(_kind(a) for a in args)
    return TypeError(f"no such overload: {function}({kinds})")


def _kind(value: object) -> str:
    if isinstance(value, dict):
        if _Q_TAG in value:
            return "kubernetes.Quantity"
        if _S_TAG in value:
            return "kubernetes.Semver"
        return "map"
    if isinstance(value, bool):
        return "bool"
    return {int: "int", str: "string", float: "double", list: "list"}.get(type(value), type(value).__name__)


def _compare(a: object, b: object, function: str) -> int:
    qa, qb = _as_quantity(a), _as_quantity(b)
    if qa is not None and qb is not None:
        return (qa > qb) - (qa < qb)
    sa, sb = _as_semver(a), _as_semver(b)
    if sa is not None and sb is not None:
        return sa.compare(sb)
    raise _no_overload(function, a, b)


def _quantity(text: object) -> dict[str, str]:
    if not isinstance(text, str):
        raise _no_overload("quantity", text)
    return _q(parse_quantity(text))


def _semver(text: object, normalize: object = False) -> dict[str, str]:
    if not isinstance(text, str):
        raise _no_overload("semver", text)
    return _sv(_normalize_and_parse(text) if normalize is True else parse_semver(text))


def _normalize_and_parse(text: str) -> Semver:
    """`semver(s, true)`: apiserver library/semverlib.go normalizeAndParse, step by step."""
    text = text.removeprefix("v")
    # split into major.minor.(patch+pr+meta)
    parts = text.split(".", 2)
    # remove leading zeros
    for i, part in enumerate(parts):
        if len(part) > 1:
            trimmed = part.lstrip("0")
            if not trimmed or trimmed[0] not in "0123456789":
                trimmed = "0" + trimmed
            parts[i] = trimmed
    # fill up shortened versions
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse_semver(".".join(parts))


def _is_semver(text: object, normalize: object = False) -> bool:
    if not isinstance(text, str):
        raise _no_overload("isSemver", text)
    if normalize is not True:
        return is_semver(text)
    try:
        _normalize_and_parse(text)
    except SemverError:
        return False
    return True


def _arith(sign: int, function: str) -> Callable[[object, object], dict[str, str]]:
    def apply(a: object, b: object) -> dict[str, str]:
        qa = _as_quantity(a)
        if qa is None:
            raise _no_overload(function, a, b)
        qb = _as_quantity(b)
        if qb is None:
            if isinstance(b, int) and not isinstance(b, bool):
                qb = Fraction(b)
            else:
                raise _no_overload(function, a, b)
        return _q(qa + sign * qb)

    return apply


def _quantity_unary(function: str, body: Callable[[Fraction], object]) -> Callable[[object], object]:
    def apply(a: object) -> object:
        qa = _as_quantity(a)
        if qa is None:
            raise _no_overload(function, a)
        return body(qa)

    return apply


def _as_integer(value: Fraction) -> int:
    result = quantity_as_int64(value)
    if result is None:
        raise ValueError("cannot convert value to integer")
    return result


def _semver_part(function: str, index: int) -> Callable[[object], int]:
    def apply(a: object) -> int:
        sa = _as_semver(a)
        if sa is None:
            raise _no_overload(function, a)
        return (sa.major, sa.minor, sa.patch)[index]

    return apply


def _sign(value: Fraction) -> int:
    return (value > 0) - (value < 0)


_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_UPPER: Final = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _string(value: object, function: str) -> str:
    if not isinstance(value, str):
        raise _no_overload(function, value)
    return value


FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "quantity": _quantity,
    "isQuantity": lambda s: is_quantity(s) if isinstance(s, str) else False,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": lambda a, b: _compare(a, b, "compareTo"),
    "isGreaterThan": lambda a, b: _compare(a, b, "isGreaterThan") == 1,
    "isLessThan": lambda a, b: _compare(a, b, "isLessThan") == -1,
    "add": _arith(1, "add"),
    "sub": _arith(-1, "sub"),
    "sign": _quantity_unary("sign", _sign),
    "asInteger": _quantity_unary("asInteger", _as_integer),
    "isInteger": _quantity_unary("isInteger", lambda v: quantity_as_int64(v) is not None),
    "asApproximateFloat": _quantity_unary("asApproximateFloat", float),
    "major": _semver_part("major", 0),
    "minor": _semver_part("minor", 1),
    "patch": _semver_part("patch", 2),
    # a few of the strings extension's functions (ASCII case mapping and trimming, as in cel-go)
    "lowerAscii": lambda s: _string(s, "lowerAscii").translate(_LOWER),
    "upperAscii": lambda s: _string(s, "upperAscii").translate(_UPPER),
    "trim": lambda s: _string(s, "trim").strip(),
}


# --- the type-checking environment --------------------------------------------------------------


def _unused(*_args: object) -> None:  # declarations need an implementation; checking never calls it
    return None


def _declarations() -> list[Any]:
    T = celcpp.Type
    Q = T.AbstractType("kubernetes.Quantity")
    S = T.AbstractType("kubernetes.Semver")

    def fn(name: str, *overloads: tuple[str, Any, list[Any], bool]) -> Any:
        return celcpp.FunctionDecl(
            name,
            [
                celcpp.Overload(oid, ret, params, is_member=member, impl=_unused)
                for oid, ret, params, member in overloads
            ],
        )

    return [
        fn("quantity", ("string_to_quantity", Q, [T.STRING], False)),
        fn("isQuantity", ("is_quantity_string", T.BOOL, [T.STRING], False)),
        fn(
            "semver",
            ("string_to_semver", S, [T.STRING], False),
            ("string_bool_to_semver", S, [T.STRING, T.BOOL], False),
        ),
        fn(
            "isSemver",
            ("is_semver_string", T.BOOL, [T.STRING], False),
            ("is_semver_string_bool", T.BOOL, [T.STRING, T.BOOL], False),
        ),
        fn(
            "compareTo",
            ("quantity_compare_to", T.INT, [Q, Q], True),
            ("semver_compare_to", T.INT, [S, S], True),
        ),
        fn(
            "isGreaterThan",
            ("quantity_is_greater_than", T.BOOL, [Q, Q], True),
            ("semver_is_greater_than", T.BOOL, [S, S], True),
        ),
        fn(
            "isLessThan",
            ("quantity_is_less_than", T.BOOL, [Q, Q], True),
            ("semver_is_less_than", T.BOOL, [S, S], True),
        ),
        fn("add", ("quantity_add", Q, [Q, Q], True), ("quantity_add_int", Q, [Q, T.INT], True)),
        fn("sub", ("quantity_sub", Q, [Q, Q], True), ("quantity_sub_int", Q, [Q, T.INT], True)),
        fn("sign", ("quantity_sign", T.INT, [Q], False)),  # global only: `sign(q)`, not `q.sign()`
        fn("asInteger", ("quantity_get_int", T.INT, [Q], True)),
        fn("isInteger", ("quantity_is_integer", T.BOOL, [Q], True)),
        fn("asApproximateFloat", ("quantity_get_float", T.DOUBLE, [Q], True)),
        fn("major", ("semver_major", T.INT, [S], True)),
        fn("minor", ("semver_minor", T.INT, [S], True)),
        fn("patch", ("semver_patch", T.INT, [S], True)),
    ]


@lru_cache(maxsize=2)
def _checker(bare_device: bool = False) -> Any:
    """The checker; `device` itself is declared (as a map) only with `bare_device` (see `_check`)."""
    T = celcpp.Type
    Q = T.AbstractType("kubernetes.Quantity")
    # Declaring the qualified names lets the checker type `device.driver` etc. like the DRADevice object.
    variables = {
        **({"device": T.Map(T.STRING, T.DYN)} if bare_device else {}),
        "device.driver": T.STRING,
        "device.attributes": T.Map(T.STRING, T.Map(T.STRING, T.DYN)),
        "device.capacity": T.Map(T.STRING, T.Map(T.STRING, Q)),
        # no `allowMultipleAllocations`: it exists only with the DRAConsumableCapacity gate (off in 1.34)
    }
    return celcpp.NewEnv(variables=variables, functions=_declarations())


_UNDECLARED_RE: Final = re.compile(r"undeclared reference to '([^']+)'")
_ISSUE_RE: Final = re.compile(r"^ERROR: <input>:(\d+):(\d+): (.*)$")
_DEVICE_FIELD_RE: Final = re.compile(r"undeclared reference to 'device\.(\w+)[^']*' \(in container ''\)")
_BARE_DEVICE: Final = "undeclared reference to 'device' (in container '')"
_DEVICE_TYPE: Final = "kubernetes.DRADevice"


def _offset(source: str, line: int, column: int) -> int:
    lines = source.split("\n")
    return sum(len(text) + 1 for text in lines[: line - 1]) + column - 1


def _check(source: str) -> Any:
    """Type-check `source` with `device` as the apiserver's object type (driver, attributes, capacity).

    cel-cpp cannot declare that object type, so `device` is known only through its three qualified field
    names: any other field reads as an undeclared `device.x` ("undefined field 'x'" in the apiserver) and
    indexing `device[...]` as an undeclared `device` ("no matching overload for '_[_]'"). Other uses of
    `device` as a value (`cel.bind(d, device, ...)`) are checked again with `device` declared as a map.
    Raises RuntimeError with the (cleaned) issues.
    """
    try:
        return _checker().compile(source)
    except RuntimeError as exc:
        issues = re.split(r"\n(?=ERROR: )", _clean(str(exc)))
    kept: list[str] = []
    device_errors = bare = False
    for issue in issues:
        head, _, rest = issue.partition("\n")
        match = _ISSUE_RE.match(head)
        if match is None:
            kept.append(issue)
            continue
        message = match.group(3)
        field = _DEVICE_FIELD_RE.fullmatch(message)
        if field is not None:
            device_errors = True
            kept.append(head.replace(message, f"undefined field '{field.group(1)}'") + "\n" + rest)
        elif message == _BARE_DEVICE:
            after = source[_offset(source, int(match.group(1)), int(match.group(2))) + len("device") :]
            index = re.match(r"\s*\[\s*(['\"]|\d)?", after)
            if index is None:
                bare = True
                continue
            key = {None: "dyn", "'": "string", '"': "string"}.get(index.group(1), "int")
            device_errors = True
            message = f"found no matching overload for '_[_]' applied to '({_DEVICE_TYPE}, {key})'"
            kept.append(head.replace(match.group(3), message) + "\n" + rest)
        else:
            kept.append(issue)
    if bare and not device_errors:
        return _checker(bare_device=True).compile(source)
    raise RuntimeError("INVALID_ARGUMENT: " + "\n".join(kept))


#: Library functions without a member overload: cel-cpp reports `x.sign()` as an undeclared reference,
#: cel-go (the apiserver) as a missing overload.
_GLOBAL_ONLY_RE: Final = re.compile(
    r"undeclared reference to '(sign|quantity|isQuantity|semver|isSemver)' \(in container ''\)"
)


def _clean(detail: str) -> str:
    """cel-cpp's status text without its status-code wrapper, as the apiserver prints issues."""
    detail = re.sub(r"^[A-Z_]+: ", "", detail.strip())
    detail = re.sub(r"\s*\[[A-Z_]+\]$", "", detail)
    return re.sub(r"\n\s*ERROR: <input>:-1:-1: <<nil>> parsetree", "", detail)


@dataclass(frozen=True)
class CompiledSelector:
    """A selector that compiled; `checked` is False when the offline checker lacks a library it uses."""

    expression: str
    program: Any
    checked: bool
    domains: frozenset[str]

    def evaluate(self, device: DeviceContext) -> bool:
        """True/False for `device`; raises SelectorRuntimeError on a CEL runtime error."""
        try:
            result = self.program.execute(device.context_for(self.domains))
        except KeyError as exc:
            raise SelectorRuntimeError(self.expression, f"no such key: {exc.args[0]}") from None
        except Exception as exc:  # the engine reports every evaluation failure as an exception
            raise SelectorRuntimeError(self.expression, _runtime_detail(exc)) from None
        if not isinstance(result, bool):
            raise SelectorRuntimeError(
                self.expression, f"CEL result of type {_kind(result)} could not be converted to bool"
            )
        return result


def _runtime_detail(exc: Exception) -> str:
    text = str(exc)
    match = re.search(r"Python function call failed: \w+: (.*?)\. Check function arguments", text)
    if match:
        return match.group(1)
    return text.split(". Check that", 1)[0]


#: `attributes['domain']` / `capacity["domain"]` lookups with a literal domain.
_DOMAIN_LOOKUP_RE: Final = re.compile(r"""(?:attributes|capacity)\s*\[\s*(?:'([^'\\]*)'|"([^"\\]*)")\s*\]""")


@lru_cache(maxsize=1024)
def compile_selector(expression: str) -> CompiledSelector:
    """Compile like the apiserver; raises SelectorCompileError with the engine's message."""
    if not expression.strip():
        raise SelectorCompileError(expression, "compilation failed: empty expression")
    checked = True
    source = rewrite_bind(expression)
    try:
        checked_expr = _check(source)
    except RuntimeError as exc:
        detail = _clean(str(exc))
        method = _GLOBAL_ONLY_RE.search(detail) is not None
        detail = _GLOBAL_ONLY_RE.sub(r"found no matching overload for '\1' applied as a method", detail)
        undeclared = set(_UNDECLARED_RE.findall(detail))
        others = [
            issue
            for issue in re.split(r"\n(?=ERROR: )", detail)
            if not re.search(r": undeclared reference to '[^']+' \(in container ''\)\n", issue)
        ]
        if (
            "Syntax error" in detail
            or method
            or others
            or not undeclared
            or not undeclared <= UNCHECKED_LIBRARY_NAMES
        ):
            raise SelectorCompileError(expression, "compilation failed: " + detail) from None
        checked = False
    else:
        rtype = checked_expr.return_type()
        type_name = rtype.name().lower()
        if type_name not in ("bool", "dyn"):
            raise SelectorCompileError(
                expression, f"must evaluate to bool or the unknown type, not {type_name}"
            )
    try:
        program = cel.compile(default_computed_domains(source))
    except ValueError as exc:
        raise SelectorCompileError(expression, "compilation failed: " + str(exc)) from None
    domains = frozenset(a or b for a, b in _DOMAIN_LOOKUP_RE.findall(source))
    return CompiledSelector(expression, program, checked, domains)


# --- devices as CEL input -----------------------------------------------------------------------


def _attribute_value(value: object) -> object:
    if isinstance(value, Version):
        return _sv(parse_semver(value.value))
    return value


def device_variable(driver: str, device: Device) -> dict[str, object]:
    """The `device` variable: attributes/capacity by domain (unqualified names: the driver's domain)."""
    attributes: dict[str, dict[str, object]] = {}
    for name, value in device.attributes.items():
        domain, ident = _split(name, driver)
        attributes.setdefault(domain, {})[ident] = _attribute_value(value)
    capacity: dict[str, dict[str, object]] = {}
    for name, amount in device.capacity.items():
        domain, ident = _split(name, driver)
        capacity.setdefault(domain, {})[ident] = _q(Fraction(amount))
    return {"driver": driver, "attributes": attributes, "capacity": capacity}


def _split(name: str, driver: str) -> tuple[str, str]:
    if "/" not in name:
        return driver, name
    domain, ident = name.split("/", 1)
    return domain, ident


class DeviceContext:
    """One device's evaluation contexts, reused by every selector (building a context is the slow part).

    An unknown domain reads as an empty map in Kubernetes; the engine has no map defaults, so each
    context carries empty maps for the domains a selector names as string literals (computed domains are
    rewritten by `default_computed_domains`).
    """

    def __init__(self, driver: str, device: Device) -> None:
        self.variable = device_variable(driver, device)
        self._contexts: dict[frozenset[str], cel.Context] = {}

    def context_for(self, domains: frozenset[str]) -> cel.Context:
        attributes: Mapping[str, object] = self.variable["attributes"]  # type: ignore[assignment]
        capacity: Mapping[str, object] = self.variable["capacity"]  # type: ignore[assignment]
        missing = frozenset(d for d in domains if d not in attributes or d not in capacity)
        context = self._contexts.get(missing)
        if context is None:
            variable = dict(self.variable)
            variable["attributes"] = {**{d: {} for d in missing}, **attributes}
            variable["capacity"] = {**{d: {} for d in missing}, **capacity}
            context = cel.Context(variables={"device": variable}, functions=FUNCTIONS)
            self._contexts[missing] = context
        return context


def evaluate(expression: str, driver: str, device: Device) -> bool:
    """Compile and evaluate one selector for one device (convenience for tests and tools)."""
    return compile_selector(expression).evaluate(DeviceContext(driver, device))


def check_selectors(expressions: Iterable[str]) -> list[SelectorCompileError]:
    """Compile errors of `expressions`, in order."""
    errors = []
    for expression in expressions:
        try:
            compile_selector(expression)
        except SelectorCompileError as exc:
            errors.append(exc)
    return errors


__all__ = [
    "FUNCTIONS",
    "CompiledSelector",
    "DeviceContext",
    "QuantityError",
    "SelectorCompileError",
    "SelectorError",
    "SelectorRuntimeError",
    "SemverError",
    "check_selectors",
    "compile_selector",
    "device_variable",
    "evaluate",
]
