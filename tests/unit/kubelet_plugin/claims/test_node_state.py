"""NodeState with another instance on the node: what it holds and derives follows the other's saves."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from dra_driver.core.families import vgpu
from dra_driver.core.families.vgpu import GpuShare
from dra_driver.vocabulary.names import ClaimUID, GpuUUID
from kubelet_plugin.claims.node_state import SHOWN_CLAIMS, NodeInputs, NodeState
from kubelet_plugin.host_parts.vgpu import GpuSharing
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, ClaimState
from tests.support.inventories import make_gpu, make_inventory

GPU = GpuUUID("GPU-0")


class Backend:
    def inventory(self) -> object:
        return make_inventory(make_gpu(0, "H100-80GB-SXM"))

    def close(self) -> None:
        pass


def state(paths: PluginPaths) -> NodeState:
    return NodeState(NodeInputs(backend=Backend(), paths=paths, boot_id="b"))  # type: ignore[arg-type]


def with_claims(cp: Checkpoint, *uids: str) -> Checkpoint:
    start = len(cp.claims) + 1
    return cp.with_entries(
        ClaimEntry(ClaimUID(u), "ns", u, ClaimState.PREPARE_COMPLETED).with_records(
            vgpu.NAME, [GpuShare(GPU, start + i, 10)]
        )
        for i, u in enumerate(uids)
    )


def sharing(s: NodeState) -> GpuSharing:
    part = s.hosts[vgpu.NAME]
    assert isinstance(part, GpuSharing)
    return part


@pytest.fixture
def paths(tmp_path: Path) -> PluginPaths:
    p = PluginPaths.under(tmp_path)
    p.plugin_dir.mkdir(parents=True)
    return p


def test_deriving_refreshes_the_host_parts_from_the_other_instances_save_and_says_so(
    paths: PluginPaths,
) -> None:
    old, new = state(paths), state(paths)
    with old.lock:
        old.commit(with_claims(old.checkpoint(), "mine"))
    with new.lock:
        new.commit(with_claims(new.checkpoint(), *(f"c{i}" for i in range(SHOWN_CLAIMS + 2))))
    with capture_logs() as logs, old.deriving() as current:
        assert current
        (gpu,) = sharing(old).arbitrated()
        assert len(gpu.claims) == SHOWN_CLAIMS + 3  # the other instance's claims too
    (said,) = [e for e in logs if e["event"].startswith("adopting the claims")]
    assert (said["adopted_count"], len(said["adopted"]), said["released_count"]) == (
        SHOWN_CLAIMS + 2,
        SHOWN_CLAIMS,
        0,
    )
    with capture_logs() as logs, old.deriving() as current:
        assert current and logs == []  # nothing saved since: nothing read, nothing said
    with new.lock:
        new.commit(new.checkpoint().without([ClaimUID("mine")]))
    with old.deriving():
        (gpu,) = sharing(old).arbitrated()
        assert len(gpu.claims) == SHOWN_CLAIMS + 2
    assert ClaimUID("mine") not in old.latest().claims  # the claim calls' copy follows the disk as well
    old.close()
    new.close()


def test_an_unreadable_save_is_derived_from_by_nobody_and_said_once(paths: PluginPaths) -> None:
    s = state(paths)
    with s.lock:
        s.commit(with_claims(s.checkpoint(), "a"))
    paths.checkpoint_file.write_bytes(b"{torn")
    with capture_logs() as logs:
        for _ in range(3):
            with s.deriving() as current:
                assert not current
    assert [e["log_level"] for e in logs] == ["warning"]
    s.store.save(with_claims(Checkpoint(boot_id="b"), "a", "b"), durable=False)  # the other instance's
    with s.deriving() as current:
        assert current
        (gpu,) = sharing(s).arbitrated()
        assert len(gpu.claims) == 2
    s.close()
