import time
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.quantity import Quantity, format_quantity, is_quantity, parse_quantity


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


@pytest.mark.parametrize(
    "text",
    [
        "\uff11\uff10\uff12\uff14",  # full-width digits: Python's \d and int() take them, Kubernetes does not
        "\u0661Gi",
        "1024\n",
        "1Gi\n",
        "1e3\n",
        "1e99999",  # refused, not computed (1e999999999 would take the process for hours)
        "1" * 65,
        "0." + "1" * 5000,
    ],
)
def test_rejects_what_kubernetes_rejects_and_what_cannot_be_computed(text: str) -> None:
    started = time.perf_counter()
    assert not is_quantity(text)
    with pytest.raises(ConfigError, match="is not a quantity") as e:
        parse_quantity(text)
    assert time.perf_counter() - started < 0.5 and len(str(e.value)) < 400


QUANTITYISH = st.text(alphabet="0123456789+-.kMGTPEimnu \n\r\t\uff11\uff10\u0661\u00b2", max_size=10)


@given(st.one_of(st.text(max_size=70), QUANTITYISH))
def test_a_quantity_is_ascii_and_nothing_around_it(text: str) -> None:
    try:
        q = parse_quantity(text)
    except ConfigError:
        assert not is_quantity(text)
    else:
        assert is_quantity(text) and text.isascii() and text == text.strip() and q.text == text
