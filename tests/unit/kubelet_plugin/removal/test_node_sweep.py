"""The parts of a cleanup that need no GPU: what a cleanup instance answers the kubelet, and directories
removed only when empty."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.claims.prepare import Preparer
from kubelet_plugin.node.sockets import PluginLock
from kubelet_plugin.proto.gen import dra_v1_pb2
from kubelet_plugin.record.results import ClaimRef, PrepareResult, UnprepareResult
from kubelet_plugin.removal.cleanup_marker import cleanup_done, cleanup_done_file, mark_clean
from kubelet_plugin.removal.cleanup_node import REMOVAL_MESSAGE, Refusal
from kubelet_plugin.removal.node_sweep import release_plugin_dir
from kubelet_plugin.serving.dra_service import ClaimCalls


class Unpreparer:
    """The plugin's preparer as far as a cleanup instance uses it: unprepare, one claim failing."""

    def __init__(self) -> None:
        self.unprepared: list[str] = []

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, PrepareResult]:
        raise AssertionError("a cleanup instance never prepares")

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, UnprepareResult]:
        self.unprepared += [c.uid for c in claims]
        return {c.uid: UnprepareResult(error="MIG: busy" if c.name == "bad" else None) for c in claims}


def ref(name: str, uid: str) -> ClaimRef:
    return ClaimRef(namespace="ns", name=name, uid=ClaimUID(uid))


def test_prepares_are_refused_claim_by_claim_and_unprepares_are_the_plugins(tmp_path: Path) -> None:
    inner = Unpreparer()
    calls = ClaimCalls(preparer=Refusal(cast(Preparer, inner)), lock=PluginLock(tmp_path / "plugin.lock"))
    answers = calls.prepare(
        [ref("a", "u1"), ref("b", "u2"), dra_v1_pb2.Claim(namespace="ns", name="c", uid="")]
    )
    assert {u: a.error for u, a in answers.items() if u} == {"u1": REMOVAL_MESSAGE, "u2": REMOVAL_MESSAGE}
    assert "lacks uid" in (answers[""].error or "")
    gone = calls.unprepare([ref("a", "u1"), ref("bad", "u3")])
    assert {u: a.error for u, a in gone.items()} == {"u1": None, "u3": "MIG: busy"}
    assert inner.unprepared == ["u1", "u3"]


def test_the_plugin_directory_goes_at_the_end_only_when_nothing_else_is_in_it(tmp_path: Path) -> None:
    plugin_dir = tmp_path / "gpu.tessera.dev"
    plugin_dir.mkdir()
    lock, loops = plugin_dir / "plugin.lock", plugin_dir / "loops.lock"
    locks = (lock, plugin_dir / "checkpoint.lock", loops)
    lock.touch()
    loops.touch()
    (plugin_dir / "dra-newer.sock").touch()  # Tessera installed again meanwhile
    assert release_plugin_dir(plugin_dir, locks) == [] and lock.exists()
    (plugin_dir / "dra-newer.sock").unlink()
    assert release_plugin_dir(plugin_dir, locks) == [
        f"plugin-state {lock}",
        f"plugin-state {loops}",
        f"directory {plugin_dir}",
    ]
    assert not plugin_dir.exists()
    assert release_plugin_dir(plugin_dir, locks) == []


def test_the_readiness_file_is_below_the_root_in_tests_and_in_run_otherwise(tmp_path: Path) -> None:
    assert str(cleanup_done_file()) == "/run/tessera/cleanup-done"
    done = cleanup_done_file(tmp_path)
    assert done == tmp_path / "run/tessera/cleanup-done" and not cleanup_done(done)
    mark_clean(done, removed=3)
    assert cleanup_done(done)
