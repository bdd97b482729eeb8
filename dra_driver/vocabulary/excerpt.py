"""Bounded views of untrusted values for error messages and logs (pure).

Anything a claim, a file or a caller supplies may be megabytes long. Every message that shows such a value
shows `excerpt(value)`: a bounded repr that says how long the value really was. `clip` bounds a whole
composed message (the last guard, at the gRPC edge and in the log renderer).
"""

from __future__ import annotations

import reprlib

EXCERPT_CHARS = 80  # what one echoed value may take in a message
MESSAGE_CHARS = 2048  # what one whole error message may take

_repr = reprlib.Repr()
_repr.maxstring = EXCERPT_CHARS
_repr.maxother = EXCERPT_CHARS
_repr.maxlong = 40
_repr.maxlevel = 2
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = _repr.maxfrozenset = 4


def _size(value: object) -> int | None:
    if isinstance(value, str | bytes | bytearray | list | tuple | dict | set | frozenset):
        return len(value)
    return None


def excerpt(value: object, *, bare: bool = False) -> str:
    """`repr(value)`, at most about EXCERPT_CHARS long; a cut value says how long it was.

    `bare`: a short, printable string (a field name) is shown as it is, without quotes.
    """
    if bare and isinstance(value, str) and len(value) <= EXCERPT_CHARS and value.isprintable():
        return value
    try:
        shown = _repr.repr(value)  # reprlib survives a __repr__ that raises, not an int too long to print
    except ValueError:
        shown = f"<{type(value).__name__} too large to show>"
    if len(shown) > EXCERPT_CHARS + 8:
        shown = shown[:EXCERPT_CHARS] + "..."
    size = _size(value)
    if "..." in shown and size is not None:
        unit = "characters" if isinstance(value, str) else "bytes" if isinstance(value, bytes) else "items"
        shown += f" ({size} {unit})"
    return shown


def clip(message: str, limit: int = MESSAGE_CHARS) -> str:
    """`message` cut to `limit` characters, saying how much was cut."""
    if len(message) <= limit:
        return message
    note = f" … [{len(message) - limit} more characters cut]"
    return message[: max(0, limit - len(note))] + note
