from fractions import Fraction

import pytest

from dra_driver.values.errors import ConfigError
from dra_driver.values.quantity import Quantity, format_quantity, is_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("0", 0),
        ("80Gi", 80 * 1024**3),
        ("1Mi", 1024**2),
        ("1Ki", 1024),
        ("1.5Gi", 3 * 1024**3 // 2),
        ("500m", Fraction(1, 2)),
        ("1k", 1000),
        ("2M", 2_000_000),
        ("1e3", 1000),
        ("1E-3", Fraction(1, 1000)),
        ("-5", -5),
        ("+5", 5),
        (".5", Fraction(1, 2)),
        ("100n", Fraction(1, 10_000_000)),
        ("3u", Fraction(3, 10**6)),
        ("1Ei", 1024**6),
        ("1P", 10**15),
    ],
)
def test_parses_like_kubernetes(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text).value == value
    assert is_quantity(text)


@pytest.mark.parametrize("text", ["", "Gi", "1GiB", "1 Gi", "1g", "abc", "1.2.3", "1e", "--1", " 1"])
def test_rejects_bad_spellings(text: str) -> None:
    assert not is_quantity(text)
    with pytest.raises(ConfigError, match="is not a quantity"):
        parse_quantity(text)


def test_equal_values_compare_equal_across_spellings() -> None:
    assert parse_quantity("1Gi") == parse_quantity("1073741824")
    assert parse_quantity("1k") < parse_quantity("1Ki")
    assert parse_quantity("1Gi").compare(parse_quantity("1G")) == 1
    assert hash(parse_quantity("1Ki")) == hash(parse_quantity("1024"))


def test_formats_readably() -> None:
    assert format_quantity(Fraction(20 * 1024**3)) == "20Gi"
    assert format_quantity(Fraction(1500)) == "1500"
    assert format_quantity(Fraction(1, 2)) == "500m"
    assert str(Quantity.of(3 * 1024**2)) == "3Mi"
    assert parse_quantity("1Gi").add(parse_quantity("1Gi")).text == "2Gi"
