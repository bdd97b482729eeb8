"""`tessera gpu`: the GPU argument, and a change that another administrator's write races."""

from __future__ import annotations

import pytest

from dra_driver.admin.gpu_cordon import CONFLICT_RETRIES, change, gpu_index
from dra_driver.cli import build_parser
from dra_driver.core.cordon import GpuCordon, with_cordon
from dra_driver.core.gpu_health import Effect
from dra_driver.vocabulary.errors import ConfigError, TesseraError


@pytest.mark.parametrize(("text", "index"), [("gpu-3", 3), ("3", 3), (" gpu-15 ", 15), ("0", 0)])
def test_a_gpu_is_named_by_its_device_name_or_its_index(text: str, index: int) -> None:
    assert gpu_index(text) == index


@pytest.mark.parametrize("text", ["gpu-", "gpu-03", "GPU-3", "gpu-3-vgpu", "-1", "3.0", "gpu-100", "٣"])
def test_anything_else_is_refused_naming_the_forms(text: str) -> None:
    with pytest.raises(ConfigError, match="gpu-<index>"):
        gpu_index(text)


class RacedNode:
    """A Node whose annotation someone else changes between our read and our first `losses` writes."""

    def __init__(self, losses: int) -> None:
        self.cordons: dict[int, GpuCordon] = {}
        self.version, self.losses, self.writes = 1, losses, 0

    def read(self, node: str) -> tuple[dict[int, GpuCordon], str]:
        return dict(self.cordons), str(self.version)

    def write(self, node: str, cordons: dict[int, GpuCordon], resource_version: str) -> bool:
        self.writes += 1
        if self.losses > 0:  # the other administrator cordons gpu-7 first
            self.losses -= 1
            self.cordons = with_cordon(self.cordons, 7, Effect.NO_SCHEDULE, now=1)
            self.version += 1
            return False
        assert resource_version == str(self.version)
        self.cordons = cordons
        return True


def test_a_raced_change_is_made_again_on_a_fresh_read_and_keeps_the_other_change() -> None:
    node = RacedNode(losses=2)
    result = change(node, "n1", 3, lambda c: with_cordon(c, 3, Effect.NO_EXECUTE, now=5))  # type: ignore[arg-type]
    assert set(result) == {3, 7} and node.cordons == result and node.writes == 3


def test_a_node_that_keeps_changing_is_given_up_with_an_error_saying_to_run_again() -> None:
    node = RacedNode(losses=CONFLICT_RETRIES)
    with pytest.raises(TesseraError, match="run the command again"):
        change(node, "n1", 3, lambda c: with_cordon(c, 3, Effect.NO_EXECUTE, now=5))  # type: ignore[arg-type]


def test_a_change_that_changes_nothing_writes_nothing() -> None:
    node = RacedNode(losses=0)
    node.cordons = {3: GpuCordon(3, Effect.NO_SCHEDULE, 1)}
    change(node, "n1", 3, lambda c: with_cordon(c, 3, Effect.NO_SCHEDULE, now=9))  # type: ignore[arg-type]
    assert node.writes == 0


def test_the_command_line_takes_each_action() -> None:
    parser = build_parser()
    args = parser.parse_args(["gpu", "drain", "n1", "gpu-2", "--wait", "30"])
    assert (args.action, args.node, args.gpu, args.wait, args.force) == ("drain", "n1", "gpu-2", 30.0, False)
    assert parser.parse_args(["gpu", "list"]).node is None
