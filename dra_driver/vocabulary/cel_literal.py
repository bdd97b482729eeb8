"""Any string as a CEL string literal (pure): the one way a value enters a CEL expression Tessera writes.

Values that reach selectors come from places Tessera does not control: a product name or MIG profile from
any node's ResourceSlice, a GPU type or UUID from a pod annotation. Each is written with `cel_string`, so
that no value can end its literal and add to the expression (`AAA" || "a" == "a`), break the line, or make
the expression invalid. The literal is printable ASCII between double quotes: `"` and `\\` get a backslash,
every other character outside U+0020-U+007E is `\\uXXXX` (or `\\UXXXXXXXX` past the BMP), which the API
server's CEL reads back as the same character. A lone surrogate has no such spelling (CEL refuses `\\ud800`)
and is refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.excerpt import excerpt

_PLAIN = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}
_SURROGATES = range(0xD800, 0xE000)


def _escape(ch: str) -> str:
    if ch in _PLAIN:
        return ch
    if ch in ('"', "\\"):
        return "\\" + ch
    code = ord(ch)
    if code in _SURROGATES:
        raise ConfigError(
            f"character U+{code:04X} is half of a UTF-16 pair, not a character: "
            "no CEL string can hold it; the value must be valid Unicode"
        )
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def cel_string(value: str) -> str:
    """`value` as a double-quoted CEL string literal that evaluates to exactly `value`.

    ConfigError when `value` is not a str or holds a lone surrogate."""
    if not isinstance(value, str):
        raise ConfigError(f"{excerpt(value)} is not a string; only strings become CEL string literals")
    try:
        return '"' + "".join(map(_escape, value)) + '"'
    except ConfigError as e:
        raise ConfigError(f"{excerpt(value)}: {e}") from e


def cel_list(values: Iterable[str]) -> str:
    """A CEL list literal of strings: `["A100", "H100"]`."""
    return "[" + ", ".join(cel_string(v) for v in values) + "]"
