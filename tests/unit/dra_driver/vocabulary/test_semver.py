import pytest

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.semver import is_semver, parse_semver


@pytest.mark.parametrize(
    ("a", "b", "order"),
    [
        ("1.2.3", "1.2.3", 0),
        ("1.2.3", "1.2.4", -1),
        ("1.10.0", "1.9.9", 1),
        ("550.54.15", "535.0.0", 1),
        ("1.0.0-alpha", "1.0.0", -1),
        ("1.0.0-alpha.1", "1.0.0-alpha.beta", -1),
        ("1.0.0-rc.10", "1.0.0-rc.2", 1),
        ("1.0.0+build", "1.0.0", 0),
    ],
)
def test_orders_by_semver_precedence(a: str, b: str, order: int) -> None:
    assert parse_semver(a).compare(parse_semver(b)) == order
    assert parse_semver(b).compare(parse_semver(a)) == -order


@pytest.mark.parametrize("text", ["1.2", "v1.2.3", "01.2.3", "1.2.3.4", "", "a.b.c"])
def test_strict_parse_rejects(text: str) -> None:
    assert not is_semver(text)
    with pytest.raises(ConfigError, match="not a semantic version"):
        parse_semver(text)


def test_normalize_accepts_loose_forms() -> None:
    assert parse_semver("v1.2", normalize=True).compare(parse_semver("1.2.0")) == 0
    assert parse_semver("01.02.03", normalize=True).major == 1
    assert is_semver("12", normalize=True)
