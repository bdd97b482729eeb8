from __future__ import annotations

import pytest

from dra_driver.vocabulary.container import ContainerEdits, DeviceNode, Mount
from dra_driver.vocabulary.errors import ConfigError


@pytest.mark.parametrize("entry", ["NOVALUE", "=x", ""])
def test_an_environment_entry_must_be_name_equals_value(entry: str) -> None:
    with pytest.raises(ConfigError, match="is not NAME=value"):
        ContainerEdits(env=("A=1", entry))


def test_a_name_with_an_empty_value_is_an_entry() -> None:
    assert ContainerEdits(env=("A=",)).env == ("A=",)


def test_edits_are_empty_only_without_env_nodes_and_mounts() -> None:
    assert ContainerEdits().empty
    assert not ContainerEdits(env=("A=1",)).empty
    assert not ContainerEdits(device_nodes=(DeviceNode("/dev/nvidia0", 195, 0),)).empty
    assert not ContainerEdits(mounts=(Mount("/h", "/c"),)).empty
