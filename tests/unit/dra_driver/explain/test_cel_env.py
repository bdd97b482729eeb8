import pytest

from dra_driver.explain.cel_check import MAX_EXPRESSION_LENGTH
from dra_driver.explain.cel_env import Outcome, SelectorCompileError, compile_selector, device_variable
from dra_driver.explain.quantity import parse_quantity
from dra_driver.explain.semver import parse_semver

DEVICE = device_variable(
    driver="gpu.tessera.dev",
    attributes={
        "type": "vgpu",
        "productName": "NVIDIA H100 80GB HBM3",
        "index": 3,
        "migStatic": False,
        "driverVersion": parse_semver("550.54.15"),
        "resource.kubernetes.io/pciBusID": "0000:3b:00.0",
    },
    capacity={"memory": parse_quantity("80Gi"), "cores": parse_quantity("100")},
    allow_multiple_allocations=True,
)
D = 'device.attributes["gpu.tessera.dev"]'
C = 'device.capacity["gpu.tessera.dev"]'

TABLE = [
    ('device.driver == "gpu.tessera.dev"', Outcome.MATCH),
    (f'{D}.type == "vgpu"', Outcome.MATCH),
    (f'{D}.type == "gpu"', Outcome.NO_MATCH),
    (f"{D}.index == 3", Outcome.MATCH),
    (f"{D}.migStatic", Outcome.NO_MATCH),
    (f'{D}.productName.startsWith("NVIDIA H100")', Outcome.MATCH),
    (f'{D}.productName.endsWith("HBM3")', Outcome.MATCH),
    (f'{D}.productName.contains("80GB")', Outcome.MATCH),
    (f'{D}.productName.matches("^NVIDIA (A|H)100")', Outcome.MATCH),
    (f'{D}.productName.lowerAscii().contains("h100")', Outcome.MATCH),
    (f'{D}.productName.split(" ").exists(w, w == "H100")', Outcome.MATCH),
    (f'{D}.productName.find("[0-9]+GB") == "80GB"', Outcome.MATCH),
    (f'{D}.productName.indexOf("H100") == 7', Outcome.MATCH),
    (f'{D}.productName.substring(0, 6) == "NVIDIA"', Outcome.MATCH),
    ('device.attributes["resource.kubernetes.io"].pciBusID.startsWith("0000:3b")', Outcome.MATCH),
    (f'{C}.memory.compareTo(quantity("40Gi")) > 0', Outcome.MATCH),
    (f'{C}.memory.isGreaterThan(quantity("80Gi"))', Outcome.NO_MATCH),
    (f'{C}.memory.isLessThan(quantity("81Gi"))', Outcome.MATCH),
    (f'{C}.memory == quantity("81920Mi")', Outcome.MATCH),
    (f"{C}.cores.asInteger() == 100", Outcome.MATCH),
    ('quantity("1.5").isInteger()', Outcome.NO_MATCH),
    ('isQuantity("20Gi") && !isQuantity("20 GB")', Outcome.MATCH),
    (f'{C}.memory.add(quantity("1Gi")) == quantity("81Gi")', Outcome.MATCH),
    (f'{D}.driverVersion.isGreaterThan(semver("535.104.5"))', Outcome.MATCH),
    (f'{D}.driverVersion.compareTo(semver("550.54.15")) == 0', Outcome.MATCH),
    (f"{D}.driverVersion.major() == 550", Outcome.MATCH),
    ('isSemver("1.2.3") && !isSemver("1.2") && isSemver("v1.2", true)', Outcome.MATCH),
    ("device.allowMultipleAllocations", Outcome.MATCH),
    ('"productName" in device.attributes["gpu.tessera.dev"]', Outcome.MATCH),
    # A domain the device lacks reads as an empty map: membership is false, access an error.
    ('"model" in device.attributes["other.example.com"]', Outcome.NO_MATCH),
    ('device.attributes["other.example.com"].model == "x"', Outcome.ERROR),
    (f'{D}.model == "x"', Outcome.ERROR),
    # Short-circuit hides the error, like the DeviceClasses rely on for other drivers' devices.
    ('device.driver == "other" && device.attributes["other"].model == "x"', Outcome.NO_MATCH),
    # Values of different types are unequal, not an error (cel-go heterogeneous equality).
    (f"{D}.type == 3", Outcome.NO_MATCH),
    ('quantity("20 GB") == quantity("1")', Outcome.ERROR),
    (f'{C}.memory.isGreaterThan(semver("1.0.0"))', Outcome.ERROR),
    ("1 == 1 ? 2 : 3", Outcome.ERROR),  # not a bool
]


@pytest.mark.parametrize(("expression", "outcome"), TABLE)
def test_behaves_like_kubernetes(expression: str, outcome: Outcome) -> None:
    result = compile_selector(expression).evaluate(DEVICE)
    assert result.outcome is outcome, result.error
    assert bool(result.error) == (outcome is Outcome.ERROR)


def test_missing_attribute_error_names_it() -> None:
    result = compile_selector(f'{D}.model == "x"').evaluate(DEVICE)
    assert "model" in result.error


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("device.driver ==", "syntax error"),
        ('devices.driver == "x"', "undeclared reference to 'devices'"),
        ('device.driver.lowerCase() == "x"', "undeclared reference to function 'lowerCase'"),
        ("x" * (MAX_EXPRESSION_LENGTH + 1), "limit is 10240"),
        (
            f'{D}.productName.split("").all(a, {D}.productName.split("").all(b, '
            f'{D}.productName.split("").all(c, {D}.productName.split("").all(d, a != d))))',
            "exceeds the limit",
        ),
    ],
)
def test_rejects_what_the_api_server_rejects(expression: str, message: str) -> None:
    with pytest.raises(SelectorCompileError, match=message):
        compile_selector(expression)


def test_macro_variables_are_declared_and_cost_grows_with_nesting() -> None:
    flat = compile_selector(f'{D}.productName.split(" ").exists(w, w == "H100")')
    nested = compile_selector(f'{D}.productName.split(" ").exists(w, [1, 2, 3].all(n, n > 0))')
    assert flat.cost < nested.cost < 1_000_000
