"""Kubernetes resource quantities (`80Gi`, `500m`, `1e3`), parsed exactly into fractions."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import total_ordering

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.excerpt import excerpt

# ASCII digits only (`\d` would take full-width ones), matched whole (`$` would take a trailing newline); the
# exponent and the length bounded, so that `1e999999999` is refused, not computed.
_QUANTITY_RE = re.compile(
    r"([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,3})?"
)
MAX_QUANTITY_CHARS = 64
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


@total_ordering
@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """An exact quantity; `text` keeps the spelling the user or the slice used, for messages."""

    value: Fraction
    text: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __str__(self) -> str:
        return self.text

    @classmethod
    def of(cls, value: Fraction | int) -> Quantity:
        value = Fraction(value)
        return cls(value, format_quantity(value))

    def compare(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)

    def add(self, other: Quantity) -> Quantity:
        return Quantity.of(self.value + other.value)

    def sub(self, other: Quantity) -> Quantity:
        return Quantity.of(self.value - other.value)


def _match(text: str) -> re.Match[str] | None:
    return _QUANTITY_RE.fullmatch(text) if len(text) <= MAX_QUANTITY_CHARS else None


def is_quantity(text: str) -> bool:
    return _match(text) is not None


def parse_quantity(text: object) -> Quantity:
    """Parse like resource.ParseQuantity; a bad spelling is a ConfigError that shows the accepted forms.

    The one quantity parser: slices, allocations (consumedCapacity) and `tessera explain` all read with it."""
    if isinstance(text, int) and not isinstance(text, bool):
        return Quantity(Fraction(text), str(text))
    if not isinstance(text, str):
        raise ConfigError(f"{excerpt(text)} is not a quantity: give a string such as 20Gi or 50")
    m = _match(text)
    if m is None:
        raise ConfigError(
            f"{excerpt(text)} is not a quantity: use a number with an optional suffix "
            "(Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent like e3)"
        )
    sign, number, suffix = m.group(1), m.group(2), m.group(3) or ""
    value = Fraction(number)
    if suffix in _BINARY:
        value *= 1024 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= Fraction(10) ** _DECIMAL[suffix]
    elif suffix:
        value *= Fraction(10) ** int(suffix[1:])
    return Quantity(-value if sign == "-" else value, text)


def format_quantity(value: Fraction) -> str:
    """A readable spelling: binary suffixes for whole multiples of 1024, else plain or milli units."""
    if value.denominator == 1:
        n = value.numerator
        for suffix, power in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
            unit = 1024**power
            if n != 0 and n % unit == 0:
                return f"{n // unit}{suffix}"
        return str(n)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{float(value):g}"
