import pytest

from dra_driver.explain.cel_check import MAX_EXPRESSION_LENGTH
from dra_driver.explain.cel_env import (
    Outcome,
    SelectorCompileError,
    SelectorUnsupportedError,
    compile_selector,
    device_variable,
)
from dra_driver.vocabulary.quantity import parse_quantity
from dra_driver.vocabulary.semver import parse_semver

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


# ---- cel.bind ---------------------------------------------------------------------------------

BIND_TABLE = [
    (f'cel.bind(p, {D}.productName, p.startsWith("NVIDIA H100"))', Outcome.MATCH),
    (f'cel.bind(p, {D}.productName, p.startsWith("NVIDIA A100"))', Outcome.NO_MATCH),
    # nested: the inner value uses the outer name
    (f'cel.bind(a, {D}, cel.bind(p, a.productName, p.endsWith("HBM3") && a.index == 3))', Outcome.MATCH),
    # a nested bind of the same name shadows the outer one; its value still sees the outer one
    ("cel.bind(x, 1, cel.bind(x, x + 2, x == 3))", Outcome.MATCH),
    ("cel.bind(x, 1, cel.bind(x, 5, x) == 5 && x == 1)", Outcome.MATCH),
    # a comprehension variable of the same name shadows the binding inside the comprehension only
    ("cel.bind(w, 5, [1, 2].exists(w, w == 2) && w == 5)", Outcome.MATCH),
    ("cel.bind(w, 5, [1, 2].all(v, v < w))", Outcome.MATCH),
    # `device` may be rebound (cel-go allows any simple identifier); the body then sees the new value
    (f"cel.bind(device, {D}, device.index == 3)", Outcome.MATCH),
    # has() still sees a field selection when the bound value is substituted
    (f"cel.bind(a, {D}, has(a.productName) && !has(a.model))", Outcome.MATCH),
    # precedence survives substitution: x is (1 + 2), not 1 + 2 * 3 == 7
    ("cel.bind(x, 1 + 2, x * 3 == 9)", Outcome.MATCH),
    # a bind inside a comprehension binds per element
    (f'{D}.productName.split(" ").exists(w, cel.bind(u, w.upperAscii(), u == "H100"))', Outcome.MATCH),
    (f"cel.bind(p, {D}.model, p == 1)", Outcome.ERROR),
    ("cel.bind((x), 2, x == 2)", Outcome.MATCH),  # cel-go drops parentheses: (x) is a simple identifier
]


@pytest.mark.parametrize(("expression", "outcome"), BIND_TABLE)
def test_cel_bind_evaluates_like_cel_go(expression: str, outcome: Outcome) -> None:
    result = compile_selector(expression).evaluate(DEVICE)
    assert result.outcome is outcome, result.error


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("cel.bind(a.b, 1, true)", "must be a simple identifier"),
        ("cel.bind(x, x, true)", "undeclared reference to 'x'"),  # checked though the body never uses it
        ("cel.bind(x, 1, y)", "undeclared reference to 'y'"),
        ("cel.bind(x, 1)", "takes 3 arguments"),
        ("cel.foo(1) == 1", "undeclared reference to 'cel'"),
        ("cel == 1", "undeclared reference to 'cel'"),
        # the bound name exists only inside the body
        ("cel.bind(x, 1, x == 1) && x == 1", "undeclared reference to 'x'"),
        ("bind(x, 1, x == 1)", "undeclared reference to function 'bind'"),
    ],
)
def test_malformed_binds_are_rejected(expression: str, message: str) -> None:
    with pytest.raises(SelectorCompileError, match=message):
        compile_selector(expression)


def test_bound_value_is_costed_once_however_often_it_is_used() -> None:
    value = f'{D}.productName.split(" ")'
    once = compile_selector(f"cel.bind(ws, {value}, ws.exists(w, w == 'H100'))")
    many = compile_selector(f"cel.bind(ws, {value}, ws.exists(w, w == 'H100') || ws.exists(w, w == 'HBM3'))")
    inline = compile_selector(f"{value}.exists(w, w == 'H100') || {value}.exists(w, w == 'HBM3')")
    assert once.cost < many.cost < inline.cost


def test_bind_cost_still_counts_against_the_limit() -> None:
    words = f'{D}.productName.split("")'
    nested = f"cel.bind(s, {words}, s.all(a, s.all(b, s.all(c, s.all(d, a != d)))))"
    with pytest.raises(SelectorCompileError, match="exceeds the limit"):
        compile_selector(nested)


def test_bind_value_a_comprehension_would_capture_is_undecided_not_rejected() -> None:
    with pytest.raises(SelectorUnsupportedError, match=r"cel\.bind"):
        compile_selector("[1, 2].exists(w, cel.bind(p, w, [3].exists(w, p == w)))")


# ---- optional types ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        f'{D}.?productName.orValue("") == "x"',
        f'{D}[?"productName"].hasValue()',
        'device.attributes[?"gpu.tessera.dev"].?index.orValue(0) == 3',
        "optional.of(1).value() == 1",
        "optional.none().hasValue()",
        '{?"a": optional.of(1)}.size() == 1',
        "[?optional.none(), 1].size() == 1",
        f"cel.bind(a, {D}.?index, a.hasValue())",
    ],
)
def test_optional_types_are_undecided_not_rejected(expression: str) -> None:
    with pytest.raises(SelectorUnsupportedError, match="optional types") as info:
        compile_selector(expression)
    assert not isinstance(info.value, SelectorCompileError)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (f"{D}.?productName ==", "syntax error"),  # broken apart from the optional marker
        (f"{D}.?productName.orValue(x) == 1", "undeclared reference to 'x'"),
        (f"{D}.?productName.lowerCase()", "undeclared reference to function 'lowerCase'"),
        ("optional.of(1).hasValue() && optionl.none().hasValue()", "undeclared reference to 'optionl'"),
    ],
)
def test_optional_types_do_not_hide_real_mistakes(expression: str, message: str) -> None:
    with pytest.raises(SelectorCompileError, match=message):
        compile_selector(expression)


def test_question_marks_in_strings_and_ternaries_are_not_optional_markers() -> None:
    result = compile_selector(f'{D}.productName != "a.?b" && (true ? {D}.index == 3 : false)').evaluate(
        DEVICE
    )
    assert result.outcome is Outcome.MATCH
