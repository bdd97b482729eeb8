"""What kube-apiserver checks before a DRA selector is accepted: length, names it knows, estimated cost.

cel-python has no type checker or cost estimator, so this walks the parse tree: identifiers must be the
`device` variable or a macro's bound variable, functions must exist in the Kubernetes DRA environment, and the
cost is estimated like cel-go does it in spirit (one unit per node, comprehensions multiplied by the largest
list they can range over). The estimate is conservative, not exact.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import lark

# resource.k8s.io limits on DeviceSelector CEL expressions.
MAX_EXPRESSION_LENGTH = 10 * 1024
MAX_COST = 1_000_000
# Attribute/capacity maps hold at most 32 entries and strings at most 64 characters, so any list a selector
# can build from a device (split, findAll, map keys) has at most 64 elements; literals count what they hold.
UNKNOWN_LIST_SIZE = 64

MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
BUILTIN_FUNCTIONS = frozenset(
    {
        "has",
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "type",
        "int",
        "uint",
        "double",
        "string",
        "bool",
        "bytes",
        "dyn",
    }
)
TYPE_NAMES = frozenset(
    {"int", "uint", "double", "string", "bool", "bytes", "list", "map", "null_type", "type"}
)


@dataclass(frozen=True, slots=True)
class CheckResult:
    errors: tuple[str, ...]
    cost: int


def check_tree(tree: lark.Tree[Any], *, functions: Iterable[str], variables: Iterable[str]) -> CheckResult:
    known_functions = frozenset(functions) | BUILTIN_FUNCTIONS | MACROS
    bound = _bound_variables(tree)
    allowed_idents = frozenset(variables) | bound | TYPE_NAMES
    errors: list[str] = []
    for node in tree.iter_subtrees_topdown():  # type: ignore[no-untyped-call]
        if node.data == "ident":
            name = str(node.children[0])
            if name not in allowed_idents:
                errors.append(f"undeclared reference to '{name}'")
        elif node.data in ("ident_arg", "member_dot_arg"):
            name = str(node.children[0] if node.data == "ident_arg" else node.children[1])
            if name not in known_functions:
                errors.append(f"undeclared reference to function '{name}'")
    return CheckResult(tuple(dict.fromkeys(errors)), estimate_cost(tree))


def simple_ident(node: lark.Tree[Any] | lark.Token) -> str | None:
    """The identifier an expression consists of, if it is nothing but one: `x` or `(x)` (cel-go drops
    parentheses), not `x.y`."""
    while isinstance(node, lark.Tree):
        if node.data == "ident":
            return str(node.children[0])
        if len(node.children) != 1:
            return None
        node = node.children[0]
    return None


def is_bind(node: lark.Tree[Any]) -> bool:
    """`cel.bind(...)`: the only form in which `cel` may appear, as the extension's namespace."""
    if node.data != "member_dot_arg" or len(node.children) != 3 or str(node.children[1]) != "bind":
        return False
    return simple_ident(node.children[0]) == "cel"


def _bound_variables(tree: lark.Tree[Any]) -> frozenset[str]:
    names: set[str] = set()
    for node in tree.find_data("member_dot_arg"):
        if str(node.children[1]) in MACROS and len(node.children) == 3:
            first = node.children[2].children[0]  # exprlist → first expr: the bound name
            idents = list(first.find_data("ident")) if isinstance(first, lark.Tree) else []
            if idents:
                names.add(str(idents[0].children[0]))
    return frozenset(names)


def estimate_cost(node: lark.Tree[Any] | lark.Token) -> int:
    """Run on the tree before binds are expanded: a bound value costs once, however often used."""
    return _cost(node)


def _cost(node: lark.Tree[Any] | lark.Token) -> int:
    if not isinstance(node, lark.Tree):
        return 0
    if is_bind(node):
        args = node.children[2]
        return 1 + sum(_cost(c) for c in args.children[1:]) if isinstance(args, lark.Tree) else 1
    if node.data == "member_dot_arg" and str(node.children[1]) in MACROS and len(node.children) == 3:
        target, args = node.children[0], node.children[2]
        body = sum(_cost(c) for c in args.children[1:]) if isinstance(args, lark.Tree) else 0
        return 1 + _cost(target) + _list_size(target) * (1 + body)
    if node.data in ("member_dot_arg", "ident_arg"):
        name = str(node.children[1] if node.data == "member_dot_arg" else node.children[0])
        # Regex and string scans are linear in the (≤64 character) string they read.
        extra = UNKNOWN_LIST_SIZE if name in ("matches", "find", "findAll", "split", "replace") else 0
        return 1 + extra + sum(_cost(c) for c in node.children)
    return 1 + sum(_cost(c) for c in node.children)


def _list_size(node: lark.Tree[Any] | lark.Token) -> int:
    if isinstance(node, lark.Tree):
        for sub in node.iter_subtrees_topdown():  # type: ignore[no-untyped-call]
            if sub.data == "list_lit":
                exprs = sub.children[0] if sub.children else None
                return len(exprs.children) if isinstance(exprs, lark.Tree) else 0
            if sub.data not in (
                "member",
                "primary",
                "paren_expr",
                "expr",
                "conditionalor",
                "conditionaland",
                "relation",
                "addition",
                "multiplication",
                "unary",
            ):
                break
    return UNKNOWN_LIST_SIZE
