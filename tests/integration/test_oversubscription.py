"""Memory oversubscription on one node, without a cluster: a claim that opted in, prepared on a node with
memoryOversubscription 2, run by the real library against the fake driver, and read back by the node's
metrics (docs/gpu-sharing.md, "Oversubscription")."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from dra_driver.core.settings import family_settings
from kubelet_plugin.claims.prepared_claims import prepared_claims
from kubelet_plugin.library_files.region import read_region
from kubelet_plugin.observability.usage_status import UsageStatusLoop
from kubelet_plugin.record.checkpoint_store import CheckpointStore
from tests.support.doubles.interceptor_programs import TCUDA, container_view, env, start
from tests.support.node_metrics import NODE_FILE, metrics_for
from tests.support.plugin_process import PluginProcess, cleanup, short_root
from tests.support.prepare_env import Env, claim, opaque, vgpu

MiB, GiB = 1 << 20, 1 << 30
OVERSUBSCRIBED = family_settings(memoryOversubscription=2)


def _node(root: Path) -> Env:
    return Env.create(root, node_yaml=NODE_FILE.read_text())  # GPUs with the fake driver's UUIDs


def _hold(claim_dir: Path, gpu_state: Path, nbytes: int) -> subprocess.Popen[str]:
    """A process of the claim holding nbytes (one cuMemAlloc) until killed, once it holds them."""
    p = start(TCUDA, "hold", str(nbytes), env=env(container_view(claim_dir), gpu_state))
    assert p.stdout is not None
    assert "ready" in p.stdout.readline()
    return p


def _usage_status(node: Env) -> Mapping[str, object]:
    """What the daemon's usage loop writes into the one prepared claim's status, from two reads of its region
    (the claim's files, the checkpoint, as the daemon reads them)."""
    writes: list[Mapping[str, Mapping[str, object]]] = []

    class Writer:
        def write(
            self, *, namespace: str, name: str, uid: str, usage: Mapping[str, Mapping[str, object]]
        ) -> None:
            writes.append(usage)

    store = CheckpointStore(path=node.paths.checkpoint_file)
    inventory = node.inventory()
    now = [time.monotonic_ns()]
    loop = UsageStatusLoop(
        claims=lambda: prepared_claims(store.load(boot_id=""), inventory, node.paths.claims_dir),
        writer=Writer(),
        clock=lambda: now[0],
    )
    loop.tick()
    now[0] += 10**9
    assert loop.tick() == 1
    ((device, usage),) = writes[-1].items()
    assert device == "gpu-0-vgpu"
    return usage


def _sample(text: str, name: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(name + "{")]
    return float(line.rsplit(" ", 1)[1])


def test_an_opted_in_claim_holds_its_memory_on_the_device_and_the_rest_is_managed(tmp_path: Path) -> None:
    node = _node(tmp_path)
    c = claim(
        "spilling",
        vgpu(0, memory="1Gi", cores="0", virtual="2Gi"),
        configs=[opaque("VgpuConfig", memoryOversubscription="enabled")],
    )
    (ref,) = node.put(c)
    assert node.preparer(settings=OVERSUBSCRIBED).prepare([ref])[ref.uid].error is None
    claim_dir = node.paths.claims_dir / ref.uid
    gpu = node.inventory().gpus[0]
    # one process holds 512 MiB of device memory; another asks 2 GiB, more than the device holds for the
    # claim (1 GiB), and gets managed memory: 2.5 GiB in all, within its limit of 3 GiB
    held = _hold(claim_dir, tmp_path / "gpu", 512 * MiB)
    spilled = _hold(claim_dir, tmp_path / "gpu", 2 * GiB)
    try:
        region = read_region(claim_dir / "shared" / "region")
        entry, device = region.gpu(gpu.uuid), region.held(gpu.uuid)
        assert entry is not None and device is not None
        assert (entry.used_bytes, entry.limit_bytes) == (2560 * MiB, 3 * GiB)
        assert (device.used_bytes, device.limit_bytes) == (512 * MiB, GiB)
        text = metrics_for(tmp_path, node.paths).render().decode()
        usage = _usage_status(node)
    finally:
        for p in (held, spilled):
            p.kill()
            p.wait()
    assert _sample(text, "tessera_claim_memory_limit_bytes") == 3 * GiB
    assert _sample(text, "tessera_claim_memory_used_bytes") == 2560 * MiB
    assert _sample(text, "tessera_claim_memory_held_bytes") == 512 * MiB
    assert _sample(text, "tessera_claim_memory_managed_bytes") == 2 * GiB
    # and the claim's status says the same (docs/metrics.md, "Usage in claim status")
    assert (usage["memoryUsed"], usage["memoryHeld"], usage["memoryManaged"]) == ("2560Mi", "512Mi", "2048Mi")


def test_a_claim_that_did_not_opt_in_has_no_held_entry_nor_its_series(tmp_path: Path) -> None:
    node = _node(tmp_path)
    (ref,) = node.put(claim("plain", vgpu(0, memory="1Gi", cores="0")))
    assert node.preparer(settings=OVERSUBSCRIBED).prepare([ref])[ref.uid].error is None
    claim_dir = node.paths.claims_dir / ref.uid
    p = _hold(claim_dir, tmp_path / "gpu", 512 * MiB)
    try:
        region = read_region(claim_dir / "shared" / "region")
        assert region.held(node.inventory().gpus[0].uuid) is None
        text = metrics_for(tmp_path, node.paths).render().decode()
    finally:
        p.kill()
        p.wait()
    assert _sample(text, "tessera_claim_memory_used_bytes") == 512 * MiB
    assert (
        "tessera_claim_memory_held_bytes{" not in text and "tessera_claim_memory_managed_bytes{" not in text
    )


@pytest.mark.parametrize("nvml", [False, True], ids=["simulated", "nvml"])
def test_the_daemon_refuses_a_ratio_its_host_memory_cannot_back_and_starts_with_one_it_can(
    nvml: bool,
) -> None:
    """Two H100s at memoryOversubscription 2 publish 159.3Gi of virtualMemory: three quarters of a 200 GiB
    host (150Gi) cannot back it, of a 256 GiB host (192Gi) can. The host's memory is the node file's, read by
    the simulated backend, or by the NVML backend from the fake driver's /proc/meminfo."""
    root = short_root()
    settings = root / "settings.yaml"
    settings.write_text(
        "apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nmemoryOversubscription: 2\n"
    )
    processes: list[PluginProcess] = []
    try:
        for gib, starts in ((200, False), (256, True)):
            node_file = root / f"node-{gib}.yaml"
            node_file.write_text(
                "apiVersion: sim.tessera.dev/v1\nkind: SimulatedNode\n"
                f"hostMemoryGiB: {gib}\ngpus: [{{product: H100-80GB-SXM, count: 2}}]\n"
            )
            (root / str(gib)).mkdir()
            p = PluginProcess(
                root=root / str(gib), nvml=nvml, node_file=node_file, extra_args=("--settings", str(settings))
            )
            processes.append(p)
            if starts:
                p.start()
                assert p.terminate() == 0
                continue
            p.start(wait=False)
            assert p.wait_exit(timeout=30) != 0
            said = " ".join(p.log().split())  # as one line, whatever the log wrapped
            assert "memoryOversubscription: 2 publishes 159.3Gi of host-backed virtualMemory" in said, said
            assert "MemTotal 200Gi, of which at most 3/4 (150Gi) may back GPU memory" in said, said
            assert "set memoryOversubscription to at most 1.94 in this node group's settings" in said, said
    finally:
        cleanup(processes, root)
