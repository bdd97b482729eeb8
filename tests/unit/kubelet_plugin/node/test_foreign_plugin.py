"""The guard against another GPU device plugin: blocks publishing while the Node advertises its GPUs, says
so in a Warning Event, and lets go (a Normal Event) when it is gone or the GPUs are declared split."""

from typing import Any

from kubernetes.client.exceptions import ApiException

from dra_driver.core.foreign_plugins import REFUSED_REASON
from kubelet_plugin.node.foreign_plugin import ForeignPluginGuard


class FakeCore:
    """The API server's answer to a GET of the Node (RestCalls.get)."""

    def __init__(self) -> None:
        self.capacity: dict[str, str] = {"cpu": "8"}
        self.fail = False
        self.paths: list[str] = []

    def get(self, path: str) -> Any:
        self.paths.append(path)
        if self.fail:
            raise ApiException(status=403, reason="Forbidden")
        return {"metadata": {"name": "n1"}, "status": {"capacity": dict(self.capacity)}}


class FakeEvents:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []

    def warn(self, *, reason: str, message: str) -> bool:
        self.posted.append(("Warning", reason, message))
        return True

    def normal(self, *, reason: str, message: str) -> bool:
        self.posted.append(("Normal", reason, message))
        return True


def guard(core: FakeCore, events: FakeEvents, *, split: bool = False) -> ForeignPluginGuard:
    return ForeignPluginGuard(rest=core, node_name="n1", split=split, events=events)  # type: ignore[arg-type]


def test_blocks_while_another_plugin_advertises_gpus_and_lets_go_after() -> None:
    core, events = FakeCore(), FakeEvents()
    g = guard(core, events)
    assert not g.check() and not g.blocked
    assert core.paths == ["/api/v1/nodes/n1"]
    core.capacity["nvidia.com/gpu"] = "4"
    assert g.check() and g.blocked
    assert events.posted[-1][:2] == ("Warning", REFUSED_REASON) and "nvidia.com/gpu" in events.posted[-1][2]
    assert not g.check()  # unchanged: no second event
    assert len(events.posted) == 1
    core.capacity["nvidia.com/gpu"] = "0"
    assert g.check() and not g.blocked and events.posted[-1][:2] == ("Normal", REFUSED_REASON)


def test_split_gpus_are_never_blocked() -> None:
    core, events = FakeCore(), FakeEvents()
    core.capacity["nvidia.com/gpu"] = "4"
    g = guard(core, events, split=True)
    assert not g.check() and not g.blocked and events.posted == []


def test_an_unreadable_node_changes_nothing() -> None:
    core, events = FakeCore(), FakeEvents()
    core.capacity["nvidia.com/gpu"] = "4"
    g = guard(core, events)
    g.check()
    core.fail = True
    assert not g.check() and g.blocked
