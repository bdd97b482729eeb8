"""Strings as CEL string literals, read back by the real CEL implementation (cel-python)."""

from __future__ import annotations

from typing import Any

import celpy
import lark
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.vocabulary.cel_literal import cel_list, cel_string
from dra_driver.vocabulary.errors import ConfigError

ENV = celpy.Environment()
SELECTOR = 'device.attributes["gpu.tessera.dev"].productName == {}'
HOSTILE = [
    'AAA" || "a" == "a',
    '"',
    "\\",
    '\\"',
    "a\nb",
    "x\r\n// comment",
    "\x00\x07\x1b[0m\x7f",
    "\u2028\u2029\ufeff",
    "Grafikkarte \u00c4100 \u2013 80 GB",
    "😀 \U0010ffff",
    "'''",
    '"""',
    "${x}",
    "",
]


def evaluate(expression: str, activation: dict[str, Any] | None = None) -> Any:
    return ENV.program(ENV.compile(expression)).evaluate(activation or {})


def skeleton(node: lark.Tree[Any] | lark.Token) -> Any:
    """The parse tree with string literals' values left out: what the expression is made of."""
    if isinstance(node, lark.Token):
        return node.type if node.type == "STRING_LIT" else (node.type, str(node))
    return (node.data, tuple(skeleton(c) for c in node.children))


def device(product: str) -> Any:
    return celpy.adapter.json_to_cel({"attributes": {"gpu.tessera.dev": {"productName": product}}})


def check(value: str) -> None:
    literal = cel_string(value)
    assert literal.isascii() and literal.isprintable()
    assert evaluate(literal) == value
    expression = SELECTOR.format(literal)
    assert skeleton(ENV.compile(expression)) == skeleton(ENV.compile(SELECTOR.format('"x"')))
    same, other = (evaluate(expression, {"device": device(v)}) for v in (value, value + "x"))
    assert (type(same), type(other)) == (celpy.celtypes.BoolType, celpy.celtypes.BoolType)
    assert same and not other


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_stay_one_literal(value: str) -> None:
    check(value)


@given(st.text())
def test_any_string_reads_back_as_itself_and_never_changes_the_expression(value: str) -> None:
    check(value)


@given(st.lists(st.text(max_size=20), max_size=5))
def test_a_list_reads_back_as_its_items(values: list[str]) -> None:
    assert list(evaluate(cel_list(values))) == values


def test_plain_names_are_written_as_they_are() -> None:
    assert cel_string("NVIDIA H100 80GB HBM3") == '"NVIDIA H100 80GB HBM3"'
    assert cel_list(["1g.10gb+me", "GPU-1"]) == '["1g.10gb+me", "GPU-1"]'


@pytest.mark.parametrize("value", ["\ud800", "a\udfffb", "\udc80" * 1000])
def test_a_lone_surrogate_is_refused_not_rewritten(value: str) -> None:
    with pytest.raises(ConfigError, match="no CEL string can hold it") as e:
        cel_string(value)
    assert len(str(e.value)) < 400


def test_only_strings_become_string_literals() -> None:
    with pytest.raises(ConfigError, match="is not a string"):
        cel_string(3)  # type: ignore[arg-type]
