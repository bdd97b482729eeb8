"""The node settings file (`resource.tessera.dev/v1 NodeSettings`) a command is given with `--settings`:
read with the YAML reader's bounds, decoded strictly by `dra_driver.core.settings`. One reader for every
command that takes it (`tessera plugin`, `cleanup`, `inventory`, `explain`), so a file one refuses none
accepts."""

from __future__ import annotations

from pathlib import Path

from dra_driver.core.settings import NodeSettings
from dra_driver.io.yaml_files import read_yaml_document
from dra_driver.vocabulary.errors import ConfigError


def load_settings(path: Path | None, node_name: str) -> NodeSettings:
    """The settings in `path` for the node `node_name`, which wins over the file's `nodeName`; every default
    when no file is given. ConfigError naming the file, and the field when the content is wrong."""
    if path is None:
        return NodeSettings(node_name=node_name)
    try:
        data = read_yaml_document(path)
    except ConfigError as e:
        raise ConfigError(f"node settings {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"node settings {path}: expected a NodeSettings mapping")
    try:
        return NodeSettings.from_mapping(data, node_name=node_name)
    except ConfigError as e:
        raise ConfigError(f"node settings {path}: {e}") from e
