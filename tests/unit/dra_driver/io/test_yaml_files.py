"""The bounded YAML reader: alias bombs, deep nesting and large files are refused fast, in one line that
names the file and the limit; ordinary YAML (aliases included) reads as PyYAML's safe loader reads it."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.io.yaml_files import (
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    MAX_YAML_BYTES,
    YamlLimitError,
    load_yaml,
    read_yaml,
    read_yaml_document,
    read_yaml_stream,
)
from dra_driver.vocabulary.errors import ConfigError


def laughs(levels: int) -> str:
    """The "billion laughs": each level an anchor holding nine aliases of the one before."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def alias_chain(n: int) -> str:
    """Each anchor a list holding the one before: n levels deep once written out, 2 as written."""
    return "\n".join(["a0: &a0 [x]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, n)]) + "\n"


HOSTILE: list[tuple[str, str, str]] = [
    ("billion laughs", laughs(9), f"more than {MAX_ALIAS_NODES} nodes beyond those written (the limit)"),
    (
        "nested flow sequences",
        "[" * 100_000,
        f"nested deeper than {MAX_DEPTH} levels (line 1, column 101) (the limit)",
    ),
    ("nested flow mappings", "{a: " * 100_000, f"nested deeper than {MAX_DEPTH} levels"),
    ("nested block sequences", "- " * 100_000, f"nested deeper than {MAX_DEPTH} levels"),
    ("nested by aliases", alias_chain(MAX_DEPTH + 5), "once its aliases are written out"),
    ("an alias in its own anchor", "a: &a [1, *a]\n", "an alias refers to a node that holds it"),
    ("aliases over documents", "---\n".join([laughs(5)] * 20), f"more than {MAX_ALIAS_NODES} nodes"),
]


@pytest.mark.parametrize(("what", "text", "message"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_yaml_is_refused_fast_in_one_line(what: str, text: str, message: str) -> None:
    started = time.perf_counter()
    with pytest.raises(YamlLimitError) as e:
        load_yaml(text, source="evil.yaml")
    assert time.perf_counter() - started < 1.0, what
    line = str(e.value)
    assert line.startswith("evil.yaml: ") and message in line and "\n" not in line


def test_a_file_larger_than_the_limit_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: b\n" + b"#" * MAX_YAML_BYTES)
    started = time.perf_counter()
    with pytest.raises(
        YamlLimitError, match=rf"^{big}: larger than the {MAX_YAML_BYTES} bytes .*\(the limit\)"
    ):
        read_yaml(big)
    assert time.perf_counter() - started < 1.0


def test_a_device_that_never_ends_is_read_no_further_than_the_limit() -> None:
    with Path("/dev/zero").open("rb") as zero, pytest.raises(YamlLimitError, match="larger than"):
        read_yaml_stream(zero, source="/dev/zero")


def test_aliases_and_nesting_within_the_limits_read_like_the_safe_loader() -> None:
    text = (
        laughs(4)
        + "deep: "
        + "[" * (MAX_DEPTH - 1)
        + "]" * (MAX_DEPTH - 1)
        + "\n"
        + "merged: {<<: {a: 1}, b: 2}\n"
    )
    assert load_yaml(text, source="ok.yaml") == [yaml.safe_load(text)]
    assert load_yaml(alias_chain(MAX_DEPTH - 2), source="ok.yaml") == [
        yaml.safe_load(alias_chain(MAX_DEPTH - 2))
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [\n", "not valid YAML: while parsing a flow node expected the node content"),
        ("a: b\n c: d\n", "not valid YAML: mapping values are not allowed here (line 2, column 3)"),
        ("a: *nowhere\n", "not valid YAML: found undefined alias"),
        ("d: 2024-13-45\n", "not valid YAML: month must be in 1..12"),
        ("n: " + "1" * 5000 + "\n", "not valid YAML: Exceeds the limit"),
        ("x: \x00\n", "not valid YAML: unacceptable character #x0000"),
        ("x: !!python/object:os.system ls\n", "not valid YAML: could not determine a constructor"),
    ],
)
def test_bad_yaml_is_one_line_naming_the_file(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_yaml(text, source="bad.yaml")
    assert str(e.value).startswith("bad.yaml: ") and message in str(e.value) and "\n" not in str(e.value)


def test_files_documents_and_standard_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "two.yaml"
    f.write_text("a: 1\n---\n---\nb: 2\n")
    assert read_yaml(f) == [{"a": 1}, None, {"b": 2}]
    with pytest.raises(ConfigError, match=r"two.yaml: holds 3 YAML documents; give one"):
        read_yaml_document(f)
    (tmp_path / "empty.yaml").write_text("")
    assert read_yaml_document(tmp_path / "empty.yaml") is None
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"c: 3\n")))
    assert read_yaml("-") == [{"c": 3}]
    with pytest.raises(ConfigError, match=r"nowhere.yaml: cannot read it \(No such file or directory\)"):
        read_yaml(tmp_path / "nowhere.yaml")
    (tmp_path / "latin1.yaml").write_bytes(b"a: \xe9\n")
    with pytest.raises(ConfigError, match=r"latin1.yaml: not UTF-8 text"):
        read_yaml(tmp_path / "latin1.yaml")


JSONISH: st.SearchStrategy[object] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=30,
)


@given(JSONISH)
def test_what_the_safe_dumper_writes_reads_back(value: object) -> None:
    text = yaml.safe_dump(value)
    assert load_yaml(text, source="v.yaml") == [value]
