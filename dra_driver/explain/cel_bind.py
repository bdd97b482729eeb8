"""`cel.bind(name, init, body)` for cel-python, which parses it as a method call but cannot run it.

Kubernetes' DRA environment has cel-go's bind macro. CEL has no side effects and cel-go evaluates a
binding lazily, so `body` with every free `name` replaced by `init` has the same value: explain runs that.
Binds are expanded innermost first, so a nested bind of the same name shadows the outer one by construction.
A comprehension macro (`all`, `exists`, `map`, ...) whose variable has the bound name shadows it too. The
one case a plain substitution would get wrong, `init` naming a variable that a comprehension around a use of
`name` rebinds (capture), is refused as unsupported rather than evaluated wrongly.
"""

from __future__ import annotations

import copy
from typing import Any

import lark

from dra_driver.explain.cel_check import MACROS, is_bind, simple_ident
from dra_driver.vocabulary.errors import ConfigError, TesseraError

Tree = lark.Tree[Any]


class BindSyntaxError(ConfigError):
    """cel-go refuses this bind at compile time (wrong arity, or the name is not a simple identifier)."""


class BindCaptureError(TesseraError):
    """Substituting the bound value would let a comprehension capture one of its variables."""


def expand_binds(tree: Tree, *, keep_values: bool = False) -> Tree:
    """`tree` with every `cel.bind` replaced by its substituted body (the same tree if it has none).

    With `keep_values`, each bind becomes the list `[value, body]` instead: a tree for checking names only,
    in which a value the body never uses is still checked, as cel-go checks it.
    """
    if not any(is_bind(n) for n in tree.find_data("member_dot_arg")):
        return tree
    return _expand(tree, keep_values=keep_values)


def _expand(node: Tree, *, keep_values: bool) -> Tree:
    children = [_expand(c, keep_values=keep_values) if isinstance(c, lark.Tree) else c for c in node.children]
    rebuilt = lark.Tree(node.data, children, node.meta)
    if not is_bind(rebuilt):
        return rebuilt
    args = rebuilt.children[2]
    exprs = args.children if isinstance(args, lark.Tree) else []
    if len(exprs) != 3:
        raise BindSyntaxError(f"cel.bind takes 3 arguments (name, value, expression), got {len(exprs)}")
    name = simple_ident(exprs[0])
    if name is None:
        raise BindSyntaxError("cel.bind's first argument must be a simple identifier, like cel.bind(x, ...)")
    init, body = exprs[1], exprs[2]
    init_names = frozenset(str(i.children[0]) for i in init.find_data("ident"))
    expanded = _substitute(body, name=name, init=init, init_names=init_names, scope=frozenset())
    # The bind sits where a `member` child goes; a parenthesised body keeps the precedence it had.
    meta = node.meta
    if keep_values:
        pair = lark.Tree("exprlist", [init, expanded], meta)
        return lark.Tree("primary", [lark.Tree("list_lit", [pair], meta)], meta)
    return lark.Tree("primary", [lark.Tree("paren_expr", [expanded], meta)], meta)


def _substitute(
    node: Tree, *, name: str, init: Tree, init_names: frozenset[str], scope: frozenset[str]
) -> Tree:
    if node.data == "member" and simple_ident(node) == name:
        if init_names & scope:
            raise BindCaptureError(
                f"cel.bind({name}, ...) is used inside a comprehension that rebinds "
                f"{', '.join(sorted(init_names & scope))}, which its value names"
            )
        return _as_member(init, node.meta)
    if node.data == "member_dot_arg" and str(node.children[1]) in MACROS and len(node.children) == 3:
        target, args = node.children[0], node.children[2]
        exprs = args.children if isinstance(args, lark.Tree) else []
        var = simple_ident(exprs[0]) if exprs else None
        new_target = _substitute(target, name=name, init=init, init_names=init_names, scope=scope)
        if var == name:  # the comprehension's own variable hides the binding in its body
            return lark.Tree(node.data, [new_target, node.children[1], args], node.meta)
        inner = scope | ({var} if var else set())
        new_args = lark.Tree(
            "exprlist",
            [
                exprs[0],
                *(
                    _substitute(e, name=name, init=init, init_names=init_names, scope=inner)
                    for e in exprs[1:]
                ),
            ],
            args.meta if isinstance(args, lark.Tree) else node.meta,
        )
        return lark.Tree(node.data, [new_target, node.children[1], new_args], node.meta)
    children = [
        _substitute(c, name=name, init=init, init_names=init_names, scope=scope)
        if isinstance(c, lark.Tree)
        else c
        for c in node.children
    ]
    return lark.Tree(node.data, children, node.meta)


def _as_member(init: Tree, meta: lark.tree.Meta) -> Tree:
    """`init` as a `member` node: itself when it is one already (so `has(x.f)` still sees a select)."""
    node: Tree | lark.Token = init
    while isinstance(node, lark.Tree) and node.data != "member" and len(node.children) == 1:
        node = node.children[0]
    if isinstance(node, lark.Tree) and node.data == "member":
        return copy.deepcopy(node)
    paren = lark.Tree("paren_expr", [copy.deepcopy(init)], meta)
    return lark.Tree("member", [lark.Tree("primary", [paren], meta)], meta)
