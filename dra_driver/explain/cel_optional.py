"""Recognising CEL optional types, which Kubernetes' DRA environment has and cel-python cannot evaluate.

cel-python's grammar has no `.?field`, `[?key]`, `{?key: v}` or `[?elem]`, and no optional values. So that
explain never calls such a selector rejected, the syntax is found here: removing the `?` of each optional
marker must leave an expression cel-python parses, which is then checked for every other kind of mistake.
`optional.of(x)` and the methods of an optional parse as ordinary calls and are recognised by name.
"""

from __future__ import annotations

from typing import Any

import lark

from dra_driver.explain.cel_check import simple_ident

FEATURE = "optional types"
NAMESPACE = "optional"
CONSTRUCTORS = frozenset({"of", "none", "ofNonZeroValue"})
METHODS = frozenset({"orValue", "hasValue", "value", "optMap", "optFlatMap", "or"})
_OPENERS = frozenset(".[{,")


def _code_mask(expression: str) -> list[bool]:
    """True for each character outside string literals and `//` comments."""
    mask = [True] * len(expression)
    i, n = 0, len(expression)
    while i < n:
        ch = expression[i]
        if ch == "/" and expression.startswith("//", i):
            end = expression.find("\n", i)
            end = n if end < 0 else end
            mask[i:end] = [False] * (end - i)
            i = end
            continue
        if ch in "\"'":
            raw = i > 0 and expression[i - 1] in "rR"
            quote = expression[i : i + 3] if expression[i : i + 3] in ('"""', "'''") else ch
            j = i + len(quote)
            while j < n and not expression.startswith(quote, j):
                j += 2 if expression[j] == "\\" and not raw else 1
            end = min(n, j + len(quote))
            mask[i:end] = [False] * (end - i)
            i = end
            continue
        i += 1
    return mask


def strip_optional_markers(expression: str) -> str | None:
    """The expression without the `?` of its optional selects, indexes and entries; None if it has none."""
    mask = _code_mask(expression)
    drop: list[int] = []
    for i, ch in enumerate(expression):
        if ch != "?" or not mask[i]:
            continue
        j = i - 1
        while j >= 0 and expression[j].isspace():
            j -= 1
        if j >= 0 and mask[j] and expression[j] in _OPENERS:
            drop.append(i)
    if not drop:
        return None
    dropped = set(drop)
    return "".join(ch for i, ch in enumerate(expression) if i not in dropped)


def uses_optional_calls(tree: lark.Tree[Any]) -> bool:
    """`optional.of(...)`-style constructors, or a method only an optional value has."""
    for node in tree.find_data("member_dot_arg"):
        name = str(node.children[1])
        if name in METHODS:
            return True
        if name in CONSTRUCTORS and simple_ident(node.children[0]) == NAMESPACE:
            return True
    return False
