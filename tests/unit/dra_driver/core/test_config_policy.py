"""The admission policy, its copy in the chart and the docs' table are what the config kinds' tables say."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from dra_driver.core.config_policy import TABLE_BEGIN, TABLE_END, render_policy, render_table
from dra_driver.core.config_schema import ClassOnly, ConfigField, ConfigKind
from dra_driver.vocabulary.names import Family

ROOT = Path(__file__).resolve().parents[4]


def test_the_shipped_policy_and_its_chart_copy_are_generated() -> None:
    rendered = render_policy()
    assert (ROOT / "deviceclasses" / "opaque-config-policy.yaml").read_text() == rendered, (
        "run deploy/render-manifests.sh"
    )
    assert (
        ROOT / "deploy" / "helm" / "tessera" / "files" / "opaque-config-policy.yaml"
    ).read_text() == rendered
    shipped = list(yaml.safe_load_all((ROOT / "deploy" / "manifests" / "tessera.yaml").read_text()))
    assert all(doc in shipped for doc in yaml.safe_load_all(rendered))


def test_the_docs_table_is_generated() -> None:
    readme = (ROOT / "deviceclasses" / "README.md").read_text()
    start, end = readme.index(TABLE_BEGIN), readme.index(TABLE_END) + len(TABLE_END)
    assert readme[start:end] + "\n" == render_table()


@dataclass(frozen=True, slots=True)
class WidgetConfig:
    speed: int = 3


WIDGET = ConfigKind(
    kind="WidgetConfig",
    family=Family("widget"),
    type=WidgetConfig,
    meaning="a test family",
    fields=(
        ConfigField(
            name="speed",
            attr="speed",
            meaning="how fast",
            default=3,
            minimum=1,
            maximum=9,
            class_only=(ClassOnly(value=9, why="is too fast for a claim", instead="ask for 8"),),
        ),
    ),
)


def test_a_new_field_gets_its_rules_without_touching_the_generator() -> None:
    (policy, binding) = yaml.safe_load_all(render_policy([WIDGET]))
    spec = policy["spec"]
    fields = next(v for v in spec["variables"] if v["name"] == "fields")["expression"]
    assert '"WidgetConfig": ["apiVersion", "kind", "speed"]' in fields
    rules = {v["reason"] + ":" + v["expression"] for v in spec["validations"]}
    assert (
        "Invalid:variables.widgetConfig.all(p, !has(p.speed) || (type(p.speed) == int && p.speed >= 1 && "
        "p.speed <= 9))" in rules
    )
    forbidden = 'object.kind == "DeviceClass" || variables.widgetConfig.all(p, !has(p.speed) || p.speed != 9)'
    assert f"Forbidden:{forbidden}" in rules
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert (
        "| `WidgetConfig` | `widget` | `speed` | integer 1 to 9 | `3` | how fast | `9` (is too fast"
        in render_table([WIDGET])
    )


def test_every_line_stays_readable() -> None:
    assert max(len(line) for line in render_policy().splitlines()) <= 110
