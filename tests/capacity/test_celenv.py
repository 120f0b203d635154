import pytest
from vke_gpu_dra_core.discovery.simulated import SimulatedSource
from vke_gpu_dra_core.facts import DRIVER_NAME
from vke_gpu_dra_planner.cel.environment import (
    SelectorCompileError,
    SelectorRuntimeError,
    compile_selector,
    evaluate,
)

from .helpers import ATTRS, CAPS, CC, MEM


@pytest.fixture(scope="module")
def a30():
    return SimulatedSource(1, "NVIDIA A30", "node-a").discover().devices[0]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f"{MEM}.compareTo(quantity('24Gi')) == 0", True),
        (f"{MEM}.isGreaterThan(quantity('23Gi')) && {MEM}.isLessThan(quantity('25Gi'))", True),
        (f"{MEM}.compareTo(quantity('40Gi')) >= 0", False),
        (f"{MEM}.add(quantity('1Gi')).compareTo(quantity('25Gi')) == 0", True),
        (f"{MEM}.sub(1024).asInteger() == 25769803776 - 1024", True),
        (f"{MEM}.add(1).isInteger() && !quantity('500m').isInteger() && sign(quantity('-1')) == -1", True),
        ("quantity('1Gi') == quantity('1024Mi') && quantity('50M').isLessThan(quantity('50Mi'))", True),
        (f"{CC}.compareTo(semver('8.0.0')) >= 0 && {CC}.isLessThan(semver('9.0.0'))", True),
        (f"{CC}.major() == 8 && {CC}.minor() == 0 && {CC}.patch() == 0", True),
        (f"{CC}.isGreaterThan(semver('8.0.0'))", False),
        ("semver('1.0.0-rc.1').isLessThan(semver('1.0.0')) && semver('1.0.0+b1') == semver('1.0.0')", True),
        (f"{ATTRS}.productName == 'NVIDIA A30'", True),
        ("device.attributes['resource.kubernetes.io'].pcieRoot.startsWith('pci')", True),
        (f"'profile' in {ATTRS}", False),
        # an unknown domain is an empty map, not an error
        ("'x' in device.attributes['example.com'] || size(device.capacity['example.com']) == 0", True),
        # ... also when the domain is computed
        ("'x' in device.attributes['no' + 'pe'] || size(device.capacity['ex' + 'ample.com']) != 0", False),
        (f"device.attributes['{DRIVER_NAME[:-4]}' + '{DRIVER_NAME[-4:]}'].productName == 'NVIDIA A30'", True),
        ("device.attributes[device.driver].productName == 'NVIDIA A30'", True),
        # semver normalisation as the apiserver's normalizeAndParse
        (
            "semver('v01.02', true) == semver('1.2.0') "
            "&& semver('1.02.003-rc.1', true) == semver('1.2.3-rc.1')",
            True,
        ),
        ("isSemver('v1', true) && isSemver('1.0', true) && !isSemver('1.0', false)", True),
        ("isSemver('1.0-rc', true) || isSemver('1.0+b', true) || isSemver('1-rc', true)", False),
        # attributes are dyn: this compiles (as in the apiserver) and is simply false
        (f"{ATTRS}.productName == 1", False),
    ],
)
def test_selectors_evaluate_like_kubernetes(a30, expression, expected):
    assert evaluate(expression, DRIVER_NAME, a30) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "device.driver == 1",
            "<input>:1:15: found no matching overload for '_==_' applied to '(string, int)'",
        ),
        (f"{MEM} >= quantity('1Gi')", "no matching overload for '_>=_'"),
        (f"{MEM}.compareTo(semver('1.0.0')) == 0", "'(kubernetes.Quantity, kubernetes.Semver)'"),
        ("device.attributes[", "Syntax error"),
        ("device.driver", "must evaluate to bool or the unknown type, not string"),
        ("nodeName == 'x'", "undeclared reference to 'nodeName'"),
        # `sign` is a global function only (apiserver library/quantity.go)
        # `device` is an object (kubernetes.DRADevice) with driver, attributes and capacity only
        (f"device['driver'] == '{DRIVER_NAME}'", "found no matching overload for '_[_]' applied to"),
        ("device.foo == 1", "undefined field 'foo'"),
        ("has(device.foo)", "undefined field 'foo'"),
        # only with the DRAConsumableCapacity feature gate, which is off in 1.34
        ("device.allowMultipleAllocations == false", "undefined field 'allowMultipleAllocations'"),
        ("quantity('1').sign() == 1", "found no matching overload for 'sign'"),
        ("quantity('1').sign() == 1 && 'a'.lowerAscii() == 'a'", "found no matching overload for 'sign'"),
    ],
)
def test_compile_errors_carry_expression_and_engine_message(expression, message):
    with pytest.raises(SelectorCompileError) as info:
        compile_selector(expression)
    assert message in str(info.value)
    assert info.value.expression == expression


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (f"{ATTRS}.profile == '1g.6gb'", "no such key: profile"),
        ("device.attributes['no' + 'pe'].x == 1", "no such key: x"),
        ("sign(quantity('200K')) == 1", "'200K'"),
        ("quantity('9999999999999999999999G').asInteger() > 0", "cannot convert value to integer"),
        ("semver('1-rc', true).major() == 1", "short version cannot contain PreRelease/Build meta data"),
        (f"{ATTRS}.productName", "could not be converted to bool"),
    ],
)
def test_runtime_errors_are_errors_not_false(a30, expression, message):
    with pytest.raises(SelectorRuntimeError, match=message):
        evaluate(expression, DRIVER_NAME, a30)


def test_strings_extension_selector_is_evaluated_unchecked(a30):
    expression = f"{ATTRS}.productName.lowerAscii() == 'nvidia a30'"
    assert compile_selector(expression).checked is False
    assert evaluate(expression, DRIVER_NAME, a30) is True


@pytest.mark.parametrize(
    "expression",
    [
        f"cel.bind(gpu, {ATTRS}, gpu.type == 'gpu' && gpu.brand == 'Nvidia')",
        "cel.bind(x, 2, cel.bind(y, x * 3, x + y)) == 8",
        f"cel.bind(m, {CAPS}.memory, m.compareTo(quantity('24Gi')) == 0)",
        "'cel.bind(a, b, c)' != '' && cel.bind(s, 'x,y', s.size() == 3)",
    ],
)
def test_cel_bind_is_supported(a30, expression):
    assert compile_selector(expression).checked
    assert evaluate(expression, DRIVER_NAME, a30) is True


def test_cel_bind_body_is_type_checked():
    with pytest.raises(
        SelectorCompileError, match="no matching overload for '_==_' applied to '\\(string, int\\)'"
    ):
        compile_selector("cel.bind(d, device.driver, d == 1)")


@pytest.mark.parametrize(
    "expression",
    [
        f"device.driver == '{DRIVER_NAME}' && size(device.capacity) > 0",
        f"cel.bind(d, device, d.driver == '{DRIVER_NAME}')",
        f"[1].exists(device, device == 1) || device.driver == '{DRIVER_NAME}'",
    ],
)
def test_device_object_fields_compile(a30, expression):
    assert evaluate(expression, DRIVER_NAME, a30) is True


def test_the_planner_loads_the_cel_engine_without_its_interactive_shell():
    import subprocess
    import sys

    probe = (
        "import sys, vke_gpu_dra_planner; "
        "from vke_gpu_dra_planner import compile_selector; "
        "compile_selector(\"device.driver == 'gpu.nvidia.com'\"); "
        "print(sorted(m for m in ('cel.cli', 'prompt_toolkit', 'rich') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]"
