"""Bounded views of untrusted values: what an error or a log line may echo."""

from __future__ import annotations

from dra_driver.vocabulary.excerpt import EXCERPT_CHARS, MESSAGE_CHARS, clip, excerpt


def test_short_values_are_shown_as_repr() -> None:
    assert excerpt("force") == "'force'"
    assert excerpt(3) == "3"
    assert excerpt(None) == "None"
    assert excerpt("smLimitPolicy", bare=True) == "smLimitPolicy"
    assert excerpt("a\nb", bare=True) == "'a\\nb'"  # not printable: quoted


def test_long_values_are_cut_and_say_how_long_they_were() -> None:
    shown = excerpt("x" * (1 << 20))
    assert len(shown) < EXCERPT_CHARS + 40 and "(1048576 characters)" in shown
    assert "(1048576 characters)" in excerpt("y" * (1 << 20), bare=True)
    assert len(excerpt(list(range(100_000)))) < EXCERPT_CHARS + 40
    assert len(excerpt({"k" * 10_000: ["v" * 10_000] * 1000})) < EXCERPT_CHARS + 40
    assert len(excerpt(10**5000)) < EXCERPT_CHARS + 40


def test_a_hostile_repr_does_not_escape() -> None:
    class Loud:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert excerpt(Loud()).startswith("<Loud")


def test_clip() -> None:
    assert clip("short") == "short"
    long = clip("e" * 10_000)
    assert len(long) == MESSAGE_CHARS and long.endswith("more characters cut]")
    assert len(clip("e" * 10_000, 100)) == 100
