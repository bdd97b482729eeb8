"""The scrape shows an administrator's GPU cordons: every GPU's tessera_gpu_cordoned, and the effect of each
cordoned one."""

from __future__ import annotations

from pathlib import Path

from dra_driver.core.cordon import GpuCordon
from dra_driver.core.gpu_health import Effect
from kubelet_plugin.observability.node_metrics import NodeMetrics, NodeSources
from tests.support.inventories import make_gpu, make_inventory


def test_each_gpu_says_whether_it_is_cordoned_and_a_cordoned_one_how(tmp_path: Path) -> None:
    inv = make_inventory(make_gpu(0, "L4"), make_gpu(1, "L4"), make_gpu(2, "L4"))
    cordons = {1: GpuCordon(1, Effect.NO_SCHEDULE, 5), 2: GpuCordon(2, Effect.NO_EXECUTE, 5)}
    metrics = NodeMetrics(
        NodeSources(
            inventory=lambda: inv,
            checkpoint=lambda: None,
            checkpoint_stamp=lambda: 0,
            claims_dir=tmp_path,
            health=lambda: None,
            conditions=dict,
            cordons=lambda: cordons,
            vgpu_shares=4,
        )
    )
    lines = metrics.render().decode().splitlines()
    cordoned = {
        line.split('gpu="')[1].split('"')[0]: line.rsplit(" ", 1)[1]
        for line in lines
        if line.startswith("tessera_gpu_cordoned{")
    }
    assert cordoned == {"0": "0", "1": "1", "2": "1"}
    info = [line for line in lines if line.startswith("tessera_gpu_cordon_info{")]
    assert len(info) == 2
    assert f'gpu="2",gpu_uuid="{inv.gpus[2].uuid}",effect="NoExecute"}} 1' in info[1]
