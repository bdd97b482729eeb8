"""Semantic versions as Kubernetes' CEL `semver` library and DRA `version` attributes see them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dra_driver.vocabulary.errors import ConfigError

_SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_LOOSE_RE = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$")


@dataclass(frozen=True, slots=True)
class Semver:
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()
    text: str = ""

    def __str__(self) -> str:
        return self.text or f"{self.major}.{self.minor}.{self.patch}"

    def compare(self, other: Semver) -> int:
        mine, theirs = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if mine != theirs:
            return -1 if mine < theirs else 1
        return _compare_pre(self.pre, other.pre)


def _compare_pre(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    # A version without a pre-release ranks above one with it (SemVer 2.0 §11).
    if a == b:
        return 0
    if not a or not b:
        return 1 if not a else -1
    for x, y in zip(a, b, strict=False):
        if x == y:
            continue
        if x.isdigit() and y.isdigit():
            return -1 if int(x) < int(y) else 1
        if x.isdigit() != y.isdigit():
            return -1 if x.isdigit() else 1
        return -1 if x < y else 1
    return -1 if len(a) < len(b) else 1


def parse_semver(text: str, *, normalize: bool = False) -> Semver:
    """Strict SemVer 2.0; `normalize` accepts `v1`, `1.2` and leading zeros like `semver(s, true)`."""
    if normalize:
        m = _LOOSE_RE.match(text)
        if m is not None:
            parts = [str(int(p)) if p else "0" for p in m.group(1, 2, 3)]
            text_n = ".".join(parts) + m.group(4)
            if _SEMVER_RE.match(text_n):
                text = text_n
    m = _SEMVER_RE.match(text)
    if m is None:
        raise ConfigError(f"{text!r} is not a semantic version: use MAJOR.MINOR.PATCH, e.g. 1.2.3")
    pre = tuple(m.group(4).split(".")) if m.group(4) else ()
    return Semver(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre, text)


def is_semver(text: str, *, normalize: bool = False) -> bool:
    try:
        parse_semver(text, normalize=normalize)
    except ConfigError:
        return False
    return True
