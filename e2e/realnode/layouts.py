"""The chart's release on the real node played as the node groups of a cluster, in turn (`Layout`:
schedulerVersion, the group's families, the admission webhook on or off): one `helm upgrade --reuse-values`
per change, waited for as a user's roll-out (the new plugin pod Ready, the old one gone, the pool published
as the layout offers, the webhook serving or gone). For a module that plays several groups on the one real
node and sets the release back after it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import structlog
import yaml

from dra_driver.vocabulary.names import Attr, qualified
from e2e.harness.kube import Json, wait_for
from e2e.harness.node import driver_slices
from e2e.harness.plugin_identity import SYSTEM_NS
from e2e.realnode.chart import ADMISSION_LABELS, CHART, RELEASE
from e2e.realnode.node import RealNode
from tests.support.loopback import free_port

log = structlog.get_logger(__name__)


def published_types(node: RealNode) -> set[str]:
    return {
        str(next(iter(d["attributes"][qualified(Attr.TYPE)].values())))
        for s in driver_slices(node.api, node.name)
        for d in s["spec"].get("devices") or []
    }


@dataclass(frozen=True, slots=True)
class Layout:
    """What one `helm upgrade` of the release sets: schedulerVersion, the node group's families (the device
    types the node then publishes), and whether the admission webhook is on."""

    scheduler_version: str
    families: tuple[str, ...]
    offered: frozenset[str]
    webhook: bool = False


def configure(node: RealNode, tmp: Path, layout: Layout) -> None:
    """One `helm upgrade` of the release to `layout`, until the new plugin pod has replaced the old one, the
    node publishes the device types offered, and the webhook serves (or is gone)."""
    chart = node.chart
    old = chart.current
    (group,) = chart.values(metrics_port=node.metrics_port)["nodeGroups"]
    values: Json = {
        "schedulerVersion": layout.scheduler_version,
        "nodeGroups": [{**group, "families": list(layout.families)}],
        "admissionWebhook": {"enabled": False},
    }
    if layout.webhook:
        webhook = chart.webhook_values(port=free_port(), metrics_port=free_port())["admissionWebhook"]
        values["admissionWebhook"] = {**webhook, "volcano": "auto"}  # the chart's default, spelled out
    name = f"volcano-{'-'.join(layout.families)}-{layout.scheduler_version or 'api'}"
    path = tmp / f"{name}{'-webhook' if layout.webhook else ''}.yaml"
    path.write_text(yaml.safe_dump(values))
    had_webhook = bool(chart.pods(ADMISSION_LABELS))
    started = time.monotonic()
    chart.helm("upgrade", RELEASE, str(CHART), "--namespace", SYSTEM_NS, "--reuse-values", "-f", str(path))
    # as e2e.realnode.upgrade.roll waits: the new pod Ready beside the old one, then the old one gone
    wait_for(
        "the new plugin pod to be Ready",
        lambda: any(p.uid != old.uid and p.ready for p in chart.pods()),
        timeout_s=180,
        interval_s=0.2,
    )
    wait_for(
        "the old plugin pod to go",
        lambda: all(p.uid != old.uid for p in chart.pods()),
        timeout_s=120,
        interval_s=0.2,
    )
    chart.wait_ready()
    offered = set(layout.offered)
    wait_for(
        f"{node.name} to publish {sorted(offered)}", lambda: published_types(node) == offered, timeout_s=60
    )
    rolled = time.monotonic()
    if layout.webhook:
        chart.wait_webhook_serving()
    elif had_webhook:
        chart.wait_webhook_gone()
    log.info(
        "realnode.layout",
        layout=path.stem,
        rolled_out_s=round(rolled - started, 1),
        webhook_s=round(time.monotonic() - rolled, 1),
    )


class Layouts:
    """The release's layout for the module: `use` upgrades it only when it changes."""

    def __init__(self, node: RealNode, tmp: Path) -> None:
        self.node, self.tmp = node, tmp
        self.current: Layout | None = None
        self.changed = False  # by this module: set back after it

    def use(self, layout: Layout) -> None:
        if layout != self.current:
            self.changed, self.current = True, None
            configure(self.node, self.tmp, layout)
            self.current = layout
