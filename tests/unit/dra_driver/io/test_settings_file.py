"""The one reader of a `--settings` file: every command that takes one reads it here."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.core.families.capacity import SHARES
from dra_driver.io.settings_file import load_settings
from dra_driver.vocabulary.errors import ConfigError

HEADER = "apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\n"


def test_no_file_is_every_default_for_the_node() -> None:
    settings = load_settings(None, "node-a")
    assert settings.node_name == "node-a" and settings.setting(SHARES) == SHARES.default


def test_the_node_name_given_wins_over_the_files(tmp_path: Path) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(HEADER + "nodeName: from-file\nvgpuShares: 3\n")
    settings = load_settings(path, "node-a")
    assert settings.node_name == "node-a" and settings.setting(SHARES) == 3


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (HEADER + "vgpuShares: 0\n", r"node settings .*settings\.yaml: vgpuShares: 0 is out of range"),
        (HEADER + "colour: blue\n", r"node settings .*settings\.yaml: colour: unknown NodeSettings field"),
        ("- a\n- b\n", r"node settings .*settings\.yaml: expected a NodeSettings mapping"),
        ("a: [\n", r"node settings .*settings\.yaml: "),
        ("---\na: 1\n---\nb: 2\n", r"node settings .*settings\.yaml: holds 2 YAML documents"),
    ],
)
def test_a_bad_file_is_refused_naming_it_and_the_field(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_settings(path, "node-a")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"node settings .*absent\.yaml: cannot read it"):
        load_settings(tmp_path / "absent.yaml", "node-a")
