"""The install docs, walked: every chart value a doc names — in `--set key=...`, in docs/install.md's table of
values, in a `values.<key>`-style mention — exists in the chart's values.schema.json, and the defaults in
values.yaml satisfy the schema's shape (every key the schema knows)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "tessera"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DOCS = sorted(
    [
        *(ROOT / "docs").glob("*.md"),
        ROOT / "README.md",
        *ROOT.glob("*/README.md"),
        CHART / "templates" / "NOTES.txt",
    ]
)
SET_FLAG = re.compile(r"--set[ =]([A-Za-z][\w.\[\]-]*)=")
TABLE_ROW = re.compile(r"^\| ((?:`[^`]+`(?:[^|`]*)?)+)\|")
CODE = re.compile(r"`([^`]+)`")


def resolve(path: str) -> bool:
    """Whether `a.b[0].c` / `a.b[].c` / `a.b.*` names something the schema allows."""
    node: dict[str, Any] = SCHEMA
    for part in re.split(r"\.(?![^\[]*\])", path):
        if part == "*":
            return node.get("type") == "object"
        name, _, index = part.partition("[")
        props = node.get("properties") or {}
        if name not in props:
            return False
        node = props[name]
        if index:
            if node.get("type") != "array":
                return False
            node = node.get("items") or {}
    return True


def set_keys(text: str) -> list[str]:
    return SET_FLAG.findall(text)


def table_keys(text: str) -> list[str]:
    """The first column of the values table in docs/install.md; `.x` continues the previous key's parent."""
    keys: list[str] = []
    in_table = False
    for line in text.splitlines():
        if line.startswith("| value |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            in_table = False
        m = TABLE_ROW.match(line) if in_table else None
        if m is None:
            continue
        previous = ""
        for token in CODE.findall(m.group(1)):
            name = token.split(" ", 1)[0]
            if name.startswith(".") and previous:
                name = previous.rsplit(".", 1)[0] + name
            keys.append(name)
            previous = name
    return keys


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_set_flag_in_the_docs_names_a_chart_value(doc: Path) -> None:
    missing = [k for k in set_keys(doc.read_text()) if not resolve(k)]
    assert missing == [], f"{doc.relative_to(ROOT)} names values the chart does not have: {missing}"


def test_the_install_docs_table_names_only_chart_values() -> None:
    keys = table_keys((ROOT / "docs" / "install.md").read_text())
    assert len(keys) > 20
    missing = [k for k in keys if not resolve(k)]
    assert missing == [], missing


def test_the_walker_tells_real_keys_from_made_up_ones() -> None:
    assert resolve("nodeGroups[].vgpuShares") and resolve("hostPaths.*") and resolve("apiServer.port")
    assert (
        not resolve("nodeSettings.vgpuShares") and not resolve("mpsControl") and not resolve("image.digest")
    )
    assert set_keys("helm upgrade x --set image.tag=1 --set cleanup.enabled=true") == [
        "image.tag",
        "cleanup.enabled",
    ]


def test_the_default_values_only_use_keys_the_schema_knows() -> None:
    def walk(value: Any, prefix: str) -> list[str]:
        if isinstance(value, dict):
            return [p for k, v in value.items() for p in walk(v, f"{prefix}.{k}" if prefix else k)]
        if isinstance(value, list) and value and isinstance(value[0], dict):
            return [p for item in value for p in walk(item, f"{prefix}[]")]
        return [prefix]

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    unknown = [
        k
        for k in walk(values, "")
        if not resolve(k) and not k.startswith(("resources.", "tolerations[]", "nodeGroups[].nodeSelector."))
    ]
    assert unknown == []
