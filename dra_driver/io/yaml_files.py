"""Reading YAML a user gives Tessera (manifests, ResourceSlices, node and settings files), with bounds.

A YAML file is a program for the loader. 600 bytes of nested aliases ("billion laughs") build a document of
10^9 nodes the moment anything walks it (`json.dumps`, a deep copy), and 100,000 nested `[` end in a
RecursionError. Every YAML file a command reads goes through `load_yaml`, which refuses, with one line that
names the file and the limit (a ConfigError: exit 2, no traceback):
- a file larger than MAX_YAML_BYTES (checked before parsing, the read itself stops there);
- nesting deeper than MAX_DEPTH, counted by the scanner (flow `[`/`{`) and the composer (block), so that a
  deep file stops at the limit, not at its end; aliases count too: a document's depth is its expanded one;
- aliases that add more than MAX_ALIAS_NODES nodes to what the file spells out, counted on the composed
  node graph (each node once, memoised) before anything is built, and an alias to itself.
Only the safe loader's types are built (PyYAML's pure-Python one: its steps are the ones that count).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.excerpt import clip

MAX_YAML_BYTES = 8 << 20  # a List of slices of ~20 nodes with every MIG placement; one object is < 1.5 MiB
MAX_DEPTH = 100  # a Deployment nests about 15 deep
MAX_ALIAS_NODES = 100_000  # nodes aliases may add to a file's documents, all together


class YamlLimitError(ConfigError):
    """A YAML file is past one of the loader's bounds; the message names the file and the limit."""


class _TooDeepError(Exception):
    def __init__(self, mark: yaml.Mark | None) -> None:
        super().__init__()
        self.mark = mark


def _where(mark: yaml.Mark | None) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


class _BoundedLoader(yaml.SafeLoader):
    """The safe loader, counting depth where it nests: the scanner's flow level, the composer's recursion."""

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:  # noqa: N803 - PyYAML's name
        if self.flow_level >= MAX_DEPTH:
            raise _TooDeepError(self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self._depth >= MAX_DEPTH:
            raise _TooDeepError(self.get_mark())
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _expansion(root: yaml.Node, source: str) -> tuple[int, int]:
    """(nodes the document has once its aliases are written out, less the nodes it holds; its depth then).
    Each node is visited once (an alias is the node it names); an alias inside its own anchor is refused."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    opened: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, closing = stack.pop()
        key = id(node)
        if closing:
            children = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            opened.discard(key)
        elif key not in size:
            if key in opened:
                raise YamlLimitError(
                    f"{source}: an alias refers to a node that holds it{_where(node.start_mark)}, "
                    "a document without end; write the objects out without it"
                )
            opened.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node))
    return size[id(root)] - len(size), depth[id(root)]


def _one_line(e: yaml.YAMLError) -> str:
    if isinstance(e, yaml.MarkedYAMLError):
        return clip(" ".join(f"{e.context or ''} {e.problem or ''}".split()) + _where(e.problem_mark), 300)
    return clip(" ".join(str(e).split()), 300)


def load_yaml(text: str | bytes, *, source: str) -> list[Any]:
    """Every document of `text` (an empty one as None); YamlLimitError past a bound, ConfigError when it
    is not YAML. `source` names the file in messages."""
    if len(text) > MAX_YAML_BYTES:
        raise _too_large(source)
    documents: list[Any] = []
    added = 0
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                break
            more, deepest = _expansion(node, source)
            added += more
            if added > MAX_ALIAS_NODES:
                raise YamlLimitError(
                    f"{source}: its aliases expand to more than {MAX_ALIAS_NODES} nodes beyond those "
                    "written (the limit); write the objects out without aliases"
                )
            if deepest > MAX_DEPTH:
                raise _TooDeepError(None)
            documents.append(loader.construct_document(node))
    except _TooDeepError as e:
        raise YamlLimitError(
            f"{source}: nested deeper than {MAX_DEPTH} levels"
            f"{_where(e.mark) if e.mark else ' once its aliases are written out'} (the limit); flatten it"
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {_one_line(e)}") from e
    except (ValueError, OverflowError) as e:  # a value the safe constructor cannot build (a 2024-13-45 date)
        raise ConfigError(f"{source}: not valid YAML: {clip(str(e), 300)}") from e
    finally:
        if loader is not None:
            loader.dispose()
    return documents


def _too_large(source: str) -> YamlLimitError:
    return YamlLimitError(
        f"{source}: larger than the {MAX_YAML_BYTES} bytes Tessera reads from a YAML file (the limit); "
        "split it into smaller files"
    )


def read_yaml_stream(stream: BinaryIO, *, source: str) -> list[Any]:
    """The documents of an open stream (stdin), reading no more than the limit allows."""
    data = stream.read(MAX_YAML_BYTES + 1)
    if len(data) > MAX_YAML_BYTES:
        raise _too_large(source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{source}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    return load_yaml(text, source=source)


def read_yaml(path: Path | str) -> list[Any]:
    """The documents of the file `path` (`-`: standard input); ConfigError when it cannot be read, is not
    YAML, or is past a bound."""
    if str(path) == "-":
        return read_yaml_stream(sys.stdin.buffer, source="<stdin>")
    try:
        with Path(path).open("rb") as f:
            return read_yaml_stream(f, source=str(path))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror or e})") from e


def read_yaml_document(path: Path | str) -> Any:
    """The one document of `path` (None when it is empty); ConfigError for several."""
    documents = read_yaml(path)
    if len(documents) > 1:
        raise ConfigError(f"{path}: holds {len(documents)} YAML documents; give one")
    return documents[0] if documents else None
