"""A cel-python environment that behaves like Kubernetes' for DRA device selectors.

The `device` variable carries `driver`, `attributes[domain].id`, `capacity[domain].id` (quantities) and
`allowMultipleAllocations`. A domain that the device does not have reads as an empty map (as in Kubernetes),
so `device.attributes["x"].y` is an error for a missing domain or name, while `"y" in device.attributes["x"]`
is false. A selector that errors does not match, and the scheduler reports the error.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from dra_driver.explain import cel_optional
from dra_driver.explain.cel_bind import BindCaptureError, BindSyntaxError, expand_binds
from dra_driver.explain.cel_check import MAX_COST, MAX_EXPRESSION_LENGTH, check_tree, estimate_cost
from dra_driver.vocabulary.errors import ConfigError, TesseraError
from dra_driver.vocabulary.quantity import Quantity, is_quantity, parse_quantity
from dra_driver.vocabulary.semver import Semver, is_semver, parse_semver

ScalarValue = int | bool | str | Semver
# A list-valued attribute (`ints`, `strings`, `bools`; DRAListTypeAttributes, e.g. numaNode's list form).
AttributeValue = ScalarValue | tuple[int | bool | str, ...]
CelValue = Any  # celpy's values are untyped at the Python level


class Outcome(StrEnum):
    MATCH = "match"
    NO_MATCH = "no-match"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Evaluation:
    outcome: Outcome
    error: str = ""


class SelectorCompileError(ConfigError):
    """The API server would reject this expression (syntax, unknown name, length or cost)."""


class SelectorUnsupportedError(TesseraError):
    """The API server accepts this expression, but it uses a CEL feature explain cannot evaluate."""

    def __init__(self, feature: str, detail: str = "") -> None:
        self.feature = feature
        super().__init__(
            f"uses {feature}{f' ({detail})' if detail else ''}, which kube-scheduler accepts "
            "but explain cannot evaluate"
        )


# ---- library functions --------------------------------------------------------------------------


def _err(message: str) -> CELEvalError:
    return CELEvalError(message)


def _quantity(text: CelValue) -> CelValue:
    try:
        return parse_quantity(str(text))
    except ConfigError as e:
        return _err(f"quantity: {e}")


def _semver(text: CelValue, normalize: CelValue = False) -> CelValue:
    try:
        return parse_semver(str(text), normalize=bool(normalize))
    except ConfigError as e:
        return _err(f"semver: {e}")


def _compare(a: CelValue, b: CelValue) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return a.compare(b)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.compare(b)
    raise TypeError(f"no such overload: compareTo({type(a).__name__}, {type(b).__name__})")


def _as_quantity(q: CelValue, name: str) -> Quantity:
    if not isinstance(q, Quantity):
        raise TypeError(f"no such overload: {name}({type(q).__name__})")
    return q


def _as_integer(q: CelValue) -> CelValue:
    v = _as_quantity(q, "asInteger").value
    if v.denominator != 1 or not -(2**63) <= v.numerator < 2**63:
        return _err(f"asInteger: {q} cannot be represented as an int64")
    return celtypes.IntType(v.numerator)


def _q_arith(a: CelValue, b: CelValue, sign: int) -> CelValue:
    other = b if isinstance(b, Quantity) else Quantity.of(Fraction(int(b)))
    return Quantity.of(_as_quantity(a, "add").value + sign * other.value)


def _index_of(x: CelValue, y: CelValue, last: bool = False) -> CelValue:
    if isinstance(x, str):
        return celtypes.IntType(x.rfind(str(y)) if last else x.find(str(y)))
    items = list(x)
    hits = [i for i, v in enumerate(items) if _equal(v, y)]
    return celtypes.IntType((hits[-1] if last else hits[0]) if hits else -1)


def _substring(s: CelValue, start: CelValue, end: CelValue = None) -> CelValue:
    stop = len(s) if end is None else int(end)
    if not 0 <= int(start) <= stop <= len(s):
        return _err(f"substring: index out of range: {start}, {stop}")
    return celtypes.StringType(str(s)[int(start) : stop])


def _split(s: CelValue, sep: CelValue, n: CelValue = -1) -> CelValue:
    if int(n) == 0:
        return celtypes.ListType([])
    parts = str(s).split(str(sep), int(n) - 1) if int(n) > 0 else str(s).split(str(sep))
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _find_all(s: CelValue, regex: CelValue, n: CelValue = -1) -> CelValue:
    found = [celtypes.StringType(m.group(0)) for m in re.finditer(str(regex), str(s))]
    return celtypes.ListType(found if int(n) < 0 else found[: int(n)])


def _find(s: CelValue, regex: CelValue) -> CelValue:
    m = re.search(str(regex), str(s))
    return celtypes.StringType(m.group(0) if m else "")


def _first_error(*values: CelValue) -> CELEvalError | None:
    return next((v for v in values if isinstance(v, CELEvalError)), None)


def _numeric(v: CelValue) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _equal(a: CelValue, b: CelValue) -> bool:
    # cel-go's heterogeneous equality: values of different types are unequal, not an error.
    if _numeric(a) and _numeric(b):
        return bool(a == b)
    if type(a) is not type(b) and not (isinstance(a, str) and isinstance(b, str)):
        return False
    return bool(a == b)


def _is_sorted(items: CelValue) -> CelValue:
    values = list(items)
    return celtypes.BoolType(all(_compare_any(x, y) <= 0 for x, y in itertools.pairwise(values)))


def _compare_any(a: CelValue, b: CelValue) -> int:
    if isinstance(a, Quantity | Semver):
        return _compare(a, b)
    return int((a > b) - (a < b))


def _sum(items: CelValue) -> CelValue:
    values = list(items)
    if values and isinstance(values[0], Quantity):
        return Quantity.of(sum((_as_quantity(v, "sum").value for v in values), Fraction(0)))
    total = sum(values)
    return celtypes.DoubleType(total) if isinstance(total, float) else celtypes.IntType(total)


FUNCTIONS: dict[str, Callable[..., CelValue]] = {
    "_==_": lambda a, b: _first_error(a, b) or celtypes.BoolType(_equal(a, b)),
    "_!=_": lambda a, b: _first_error(a, b) or celtypes.BoolType(not _equal(a, b)),
    "quantity": _quantity,
    "isQuantity": lambda s: celtypes.BoolType(is_quantity(str(s))),
    "semver": _semver,
    "isSemver": lambda s, normalize=False: celtypes.BoolType(is_semver(str(s), normalize=bool(normalize))),
    "compareTo": lambda a, b: celtypes.IntType(_compare(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
    "major": lambda v: celtypes.IntType(v.major),
    "minor": lambda v: celtypes.IntType(v.minor),
    "patch": lambda v: celtypes.IntType(v.patch),
    "sign": lambda q: celtypes.IntType((_as_quantity(q, "sign").value > 0) - (q.value < 0)),
    "isInteger": lambda q: celtypes.BoolType(_as_quantity(q, "isInteger").value.denominator == 1),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(_as_quantity(q, "asApproximateFloat").value)),
    "add": lambda a, b: _q_arith(a, b, 1),
    "sub": lambda a, b: _q_arith(a, b, -1),
    "lowerAscii": lambda s: celtypes.StringType(str(s).lower()),
    "upperAscii": lambda s: celtypes.StringType(str(s).upper()),
    "trim": lambda s: celtypes.StringType(str(s).strip()),
    "replace": lambda s, a, b, n=-1: celtypes.StringType(str(s).replace(str(a), str(b), int(n))),
    "split": _split,
    "substring": _substring,
    "charAt": lambda s, i: celtypes.StringType(str(s)[int(i) : int(i) + 1]),
    "indexOf": _index_of,
    "lastIndexOf": lambda x, y: _index_of(x, y, last=True),
    "join": lambda items, sep="": celtypes.StringType(str(sep).join(str(i) for i in items)),
    "find": _find,
    "findAll": _find_all,
    "isSorted": _is_sorted,
    "sum": _sum,
}


# ---- the device variable ------------------------------------------------------------------------


class _DomainMap(celtypes.MapType):
    """A missing domain reads as an empty map, as Kubernetes' attribute and capacity maps do."""

    def __getitem__(self, key: Any) -> Any:
        if key in self:
            return super().__getitem__(key)
        return celtypes.MapType({})


def _cel_attribute(value: AttributeValue) -> CelValue:
    if isinstance(value, tuple):
        return celtypes.ListType([_cel_attribute(v) for v in value])
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, Semver):
        return value
    return celtypes.StringType(value)


def _by_domain(values: Mapping[str, CelValue], driver: str) -> _DomainMap:
    domains: dict[str, dict[celtypes.StringType, CelValue]] = {}
    for name, value in values.items():
        domain, slash, ident = name.rpartition("/")
        domains.setdefault(domain if slash else driver, {})[celtypes.StringType(ident)] = value
    return _DomainMap({celtypes.StringType(d): celtypes.MapType(m) for d, m in domains.items()})


def device_variable(
    *,
    driver: str,
    attributes: Mapping[str, AttributeValue],
    capacity: Mapping[str, Quantity],
    allow_multiple_allocations: bool,
) -> CelValue:
    """Unqualified names belong to the driver's own domain, like in a ResourceSlice."""
    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): _by_domain(
                {k: _cel_attribute(v) for k, v in attributes.items()}, driver
            ),
            celtypes.StringType("capacity"): _by_domain(dict(capacity), driver),
            celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(allow_multiple_allocations),
        }
    )


# ---- compile and evaluate -----------------------------------------------------------------------

_ENV = celpy.Environment()


@dataclass(frozen=True, slots=True)
class Selector:
    expression: str
    program: celpy.Runner
    cost: int

    def evaluate(self, device: CelValue) -> Evaluation:
        try:
            result = self.program.evaluate({"device": device})
        except CELEvalError as e:
            return Evaluation(Outcome.ERROR, _describe(e))
        except (TypeError, KeyError, ValueError, ArithmeticError) as e:
            return Evaluation(Outcome.ERROR, f"{type(e).__name__}: {e}")
        if isinstance(result, CELEvalError):
            return Evaluation(Outcome.ERROR, _describe(result))
        if not isinstance(result, celtypes.BoolType):
            return Evaluation(Outcome.ERROR, f"expression returned {type(result).__name__}, not bool")
        return Evaluation(Outcome.MATCH if bool(result) else Outcome.NO_MATCH)


def _describe(e: CELEvalError) -> str:
    first = str(e.args[0]) if e.args else "CEL error"
    if e.args and len(e.args) > 2 and e.args[1] is KeyError:
        detail = e.args[2]
        key = detail[0] if isinstance(detail, tuple) and detail else None
        if key is not None:
            return f"no such key: {key}"
        return first.replace("no such member in mapping: ", "no such key: ").replace("'", "")
    return first


@functools.lru_cache(maxsize=1024)
def compile_selector(expression: str) -> Selector:
    """Raise SelectorCompileError for what the API server would refuse (cached: parsing is slow)."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise SelectorCompileError(
            f"expression is {len(expression)} characters long, the limit is {MAX_EXPRESSION_LENGTH}"
        )
    tree, optional_syntax = _parse(expression)
    try:
        expanded = expand_binds(tree)
        for_check = expand_binds(tree, keep_values=True)
    except BindSyntaxError as e:
        raise SelectorCompileError(str(e)) from e
    except BindCaptureError as e:
        raise SelectorUnsupportedError("cel.bind", str(e)) from e
    optional = optional_syntax or cel_optional.uses_optional_calls(for_check)
    extra_functions = cel_optional.CONSTRUCTORS | cel_optional.METHODS if optional else frozenset()
    variables = ("device", cel_optional.NAMESPACE) if optional else ("device",)
    checked = check_tree(for_check, functions=FUNCTIONS.keys() | extra_functions, variables=variables)
    if checked.errors:
        raise SelectorCompileError("; ".join(checked.errors))
    cost = estimate_cost(tree)
    if cost > MAX_COST:
        raise SelectorCompileError(
            f"estimated cost {cost} exceeds the limit of {MAX_COST}: simplify or bound the comprehension"
        )
    if optional:
        raise SelectorUnsupportedError(cel_optional.FEATURE)
    return Selector(expression, _ENV.program(expanded, functions=FUNCTIONS), cost)


def _parse(expression: str) -> tuple[lark.Tree[Any], bool]:
    """The parse tree, and whether optional markers (`.?f`, `[?k]`) had to be removed to get it."""
    try:
        return _ENV.compile(expression), False
    except (CELParseError, lark.exceptions.LarkError) as e:
        error = SelectorCompileError(f"syntax error: {str(e).strip()}")
        stripped = cel_optional.strip_optional_markers(expression)
        if stripped is None:
            raise error from e
        try:
            return _ENV.compile(stripped), True
        except (CELParseError, lark.exceptions.LarkError):
            raise error from e
