"""CEL selectors written for NVIDIA's DRA driver → the same selectors on Tessera's devices (pure).

kubernetes-sigs/dra-driver-nvidia-gpu (v0.4.1) publishes its GPUs and MIG devices under the attribute domain
`gpu.nvidia.com`; Tessera publishes the same NVML facts under `gpu.tessera.dev`, with the same names and the
same values (both read NVML: `productName`, `architecture`, MIG `profile`, …). So a selector converts by
renaming the domain of each attribute or capacity it reads, and nothing else: the expression's logic, its
literals and its layout stay the user's. What Tessera does not publish (`addressingMode`, `copyEngines`, an
attribute of another driver) has no counterpart, and the selector is refused naming it, never guessed at.

The expression is read as CEL's lexer would (strings with their escapes, raw and triple-quoted strings,
comments), so a name inside a string literal is never taken for a reference; only the references themselves
are rewritten, each to a fixed spelling. Bounded: the API server's own limit on an expression's length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dra_driver.vocabulary.errors import ConversionError
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.names import ATTRIBUTE_DOMAIN, DRIVER_NAME, Attr, Cap

NVIDIA_DOMAIN = "gpu.nvidia.com"
STANDARD_DOMAIN = "resource.kubernetes.io"  # pciBusID, pcieRoot: the same on both drivers' devices
MAX_EXPRESSION = 10 * 1024  # the API server's bound on a selector's expression

# NVIDIA's attributes and capacities that Tessera publishes too: the same NVML value under the same name
ATTRIBUTES = frozenset(
    (
        Attr.UUID,
        Attr.PARENT_UUID,
        Attr.PRODUCT_NAME,
        Attr.BRAND,
        Attr.ARCHITECTURE,
        Attr.CUDA_COMPUTE_CAPABILITY,
        Attr.DRIVER_VERSION,
        Attr.CUDA_DRIVER_VERSION,
        Attr.PROFILE,
        Attr.INDEX,
    )
)
CAPACITIES = frozenset((Cap.MEMORY, Cap.MULTIPROCESSORS))
# What NVIDIA publishes that Tessera does not, and why (the refusal says it)
UNMAPPED: dict[str, str] = {
    "type": "the DeviceClass selects the kind of device; drop this test",
    "addressingMode": "Tessera does not publish the GPU's addressing mode",
}

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>(?:[rR][bB]?|[bB][rR]?)?(?:'''|\"\"\"|'|\"))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>[0-9][0-9A-Za-z_.]*)
  | (?P<punct>==|!=|<=|>=|&&|\|\||[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # ident, string, number, punct (spaces and comments are kept between tokens, not as tokens)
    text: str
    start: int
    end: int
    value: str = ""  # a string literal's value (escapes as written; only compared with plain names)


def _string(expr: str, start: int, opener: str) -> Token:
    prefix = opener.rstrip("'\"")
    quote = opener[len(prefix) :]
    raw = "r" in prefix.lower()
    i = start + len(opener)
    while i < len(expr):
        if expr.startswith(quote, i):
            return Token(
                "string", expr[start : i + len(quote)], start, i + len(quote), expr[start + len(opener) : i]
            )
        if expr[i] == "\\" and not raw:
            i += 2
            continue
        if expr[i] == "\n" and len(quote) == 1:
            break
        i += 1
    raise ConversionError(f"a string literal at offset {start} is not closed")


def tokens(expr: str) -> list[Token]:
    """CEL's lexemes of `expr`, in order; ConversionError where CEL's lexer would fail too."""
    out: list[Token] = []
    i = 0
    while i < len(expr):
        m = _TOKEN.match(expr, i)
        if m is None:
            raise ConversionError(f"unexpected character {excerpt(expr[i])} at offset {i}")
        kind = m.lastgroup or ""
        if kind == "string":
            token = _string(expr, i, m.group())
            out.append(token)
            i = token.end
            continue
        if kind != "space":
            out.append(Token(kind, m.group(), m.start(), m.end()))
        i = m.end()
    return out


def _is(tokens_: list[Token], i: int, kind: str, text: str | None = None) -> bool:
    return i < len(tokens_) and tokens_[i].kind == kind and (text is None or tokens_[i].text == text)


def _domain_literal(t: Token) -> str | None:
    """The domain a subscript names: a plain quoted string with no escapes, else None."""
    if t.kind != "string" or t.text[0] not in "'\"" or "\\" in t.value or t.text.startswith(("'''", '"""')):
        return None
    return t.value


def rewrite(expr: str) -> str:
    """`expr` reading Tessera's devices where it read NVIDIA's. ConversionError names the first reference
    with no Tessera counterpart (the caller adds the field)."""
    if len(expr) > MAX_EXPRESSION:
        raise ConversionError(f"the expression is {len(expr)} characters; at most {MAX_EXPRESSION}")
    ts = tokens(expr)
    replace: dict[int, str] = {}  # token index → its new text
    for i, t in enumerate(ts):
        if not (t.kind == "ident" and t.text == "device" and _is(ts, i + 1, "punct", ".")):
            continue
        if i > 0 and _is(ts, i - 1, "punct", "."):
            continue  # `x.device`: a field of something else
        if not _is(ts, i + 2, "ident"):
            raise ConversionError("`device.` must be followed by a field name")
        field = ts[i + 2].text
        if field == "driver":
            compared = _is(ts, i + 3, "punct") and ts[i + 3].text in ("==", "!=") and _is(ts, i + 4, "string")
            if compared and _domain_literal(ts[i + 4]) == NVIDIA_DOMAIN:
                replace[i + 4] = f"'{DRIVER_NAME}'"
            continue
        if field not in ("attributes", "capacity"):
            raise ConversionError(f"device.{field}: Tessera's conversion reads only attributes and capacity")
        _reference(ts, i, field, replace)
    if not replace:
        return expr
    parts: list[str] = []
    at = 0
    for index in sorted(replace):
        t = ts[index]
        parts += [expr[at : t.start], replace[index]]
        at = t.end
    parts.append(expr[at:])
    return "".join(parts)


def _reference(ts: list[Token], i: int, field: str, replace: dict[int, str]) -> None:
    """`device.<field>['<domain>'].<name>` at token i: the domain renamed where the name has a counterpart."""
    if not (_is(ts, i + 3, "punct", "[") and _is(ts, i + 4, "string") and _is(ts, i + 5, "punct", "]")):
        raise ConversionError(f"write device.{field} as device.{field}['DOMAIN'].NAME")
    domain = _domain_literal(ts[i + 4])
    if domain is None:
        raise ConversionError(f"device.{field}[{excerpt(ts[i + 4].text)}]: give the domain as a plain string")
    if not (_is(ts, i + 6, "punct", ".") and _is(ts, i + 7, "ident")):
        raise ConversionError(f"write device.{field}['{domain}'] as device.{field}['{domain}'].NAME")
    name = ts[i + 7].text
    if domain in (STANDARD_DOMAIN, ATTRIBUTE_DOMAIN):
        return  # Tessera's own, and resource.kubernetes.io's (pciBusID, pcieRoot), which both publish
    if domain != NVIDIA_DOMAIN:
        raise ConversionError(f"device.{field}['{domain}'].{name}: another driver's {field}")
    if name not in (ATTRIBUTES if field == "attributes" else CAPACITIES):
        why = UNMAPPED.get(
            name, f"Tessera publishes no such {'attribute' if field == 'attributes' else field}"
        )
        raise ConversionError(f"device.{field}['{NVIDIA_DOMAIN}'].{name}: {why}")
    replace[i + 4] = f"'{ATTRIBUTE_DOMAIN}'"
