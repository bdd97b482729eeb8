"""The MostlyPaging Warning Event on one node, without a cluster (docs/gpu-sharing.md, "When a claim pages"):
claims prepared on a node with memoryOversubscription 2, run by the real library against the fake driver
(one 1 GiB GPU whose memory their processes share, paging at 30 GB/s on a PCIe 4 x16 link), and the
daemon's paging watch reading the link through the NVML backend over the fake libnvidia-ml and the claims'
host-backed bytes from their regions: the claim that pages hard is warned, once; its neighbours on the same
GPU, resident in device memory, are not; a claim that holds managed memory but does not touch it is not;
a GPU whose NVML reads no throughput warns nobody. And the daemon runs the watch only where it can mean
something: NVML reads the link and the node offers host-backed memory."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from dra_driver.backends.nvml import NvmlBackend
from dra_driver.core.families.base import FamilySettings
from dra_driver.core.settings import family_settings
from kubelet_plugin.claims.prepared_claims import prepared_claims
from kubelet_plugin.observability.paging_watch import MOSTLY_PAGING_REASON, PagingWatch
from kubelet_plugin.record.checkpoint_store import CheckpointStore
from kubelet_plugin.serving.options import DaemonOptions
from kubelet_plugin.serving.plugin_instance import Node as Plugin
from tests.support.claim_files import directory_claims
from tests.support.doubles.fake_nvml import FakeNvmlNode, backend_on_fake, pynvml_on_fake
from tests.support.doubles.interceptor_programs import FAKE_GPU0, TCUDA, TOVERSUB, container_view, env, start
from tests.support.node_metrics import NODE_FILE, metrics_for
from tests.support.prepare_env import Env, claim, opaque, vgpu

MiB = 1 << 20
OVERSUBSCRIBED: FamilySettings = family_settings(memoryOversubscription=2)
OPT_IN = [opaque("VgpuConfig", memoryOversubscription="enabled")]


@dataclass
class Recorded:
    """The watch's Warning Events, as ClaimEvents would post them."""

    events: list[tuple[str, str, str]] = field(default_factory=list)  # (claim name, reason, message)

    def warn(self, *, namespace: str, name: str, uid: str, reason: str, message: str) -> int:
        self.events.append((name, reason, message))
        return 1


@dataclass
class Node:
    env: Env
    root: Path
    processes: list[subprocess.Popen[str]] = field(default_factory=list)

    def prepare(self, c: Mapping[str, Any]) -> Path:
        (ref,) = self.env.put(c)
        assert self.env.preparer(settings=OVERSUBSCRIBED).prepare([ref])[ref.uid].error is None
        return self.env.paths.claims_dir / ref.uid

    def process_env(self, claim_dir: Path) -> dict[str, str]:
        return env(
            container_view(claim_dir),
            self.root / "gpu",
            FAKE_GPU_MEM=str(self.root / "mem"),
            FAKE_GPU_MEM_MB="1024",
            FAKE_PAGE_MBPS="30000",
        )

    def hold(self, claim_dir: Path, nbytes: int) -> None:
        """A process of the claim holding nbytes (one cuMemAlloc, never touched) until the test ends."""
        p = start(TCUDA, "hold", str(nbytes), env=self.process_env(claim_dir))
        self.processes.append(p)
        assert p.stdout is not None
        assert "ready" in p.stdout.readline()

    def page(self, claim_dir: Path, limit: int, resident: int, passes: int) -> subprocess.Popen[str]:
        """A process of the claim reading all of its limit `passes` times (returns once it read it once)."""
        ready = self.root / f"ready-{claim_dir.name}"
        args = (
            "work",
            str(limit),
            str(resident),
            str(256 * MiB),  # large steps: few wake-ups of the fake between its page moves
            str(passes),
            str(ready),
            str(self.root / "done"),
        )
        p = start(TOVERSUB, *args, env=self.process_env(claim_dir))
        self.processes.append(p)
        for _ in range(3000):
            if ready.exists() or p.poll() is not None:
                break
            time.sleep(0.01)
        assert ready.exists(), p.communicate()[0] if p.poll() is not None else "not ready in 30 s"
        return p

    def watch(self, backend: NvmlBackend, events: Recorded) -> PagingWatch:
        """The daemon's watch over this node, on a one-second window read every 50 ms."""
        store, inventory = CheckpointStore(path=self.env.paths.checkpoint_file), self.env.inventory()
        claims = prepared_claims(store.load(boot_id=""), inventory, self.env.paths.claims_dir)
        return PagingWatch(
            source=backend,
            inventory=lambda: inventory,
            claims=lambda: claims,
            events=events,
            sample_s=0.05,
            window_s=1.0,
        )


def run_for(watch: PagingWatch, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        watch.tick()
        time.sleep(watch.sample_s)


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    monkeypatch.setenv("FAKE_GPU_MEM", str(tmp_path / "mem"))  # what the fake NVML reads the link from
    n = Node(Env.create(tmp_path, node_yaml=NODE_FILE.read_text()), tmp_path)
    try:
        yield n
    finally:
        (tmp_path / "done").touch()
        for p in n.processes:
            p.kill()
            p.wait()


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[NvmlBackend]:
    with backend_on_fake(NODE_FILE, tmp_path / "fake-nvml") as b:
        yield b


def _gpu_sample(text: str, name: str, gpu: int) -> float | None:
    found = [line for line in text.splitlines() if line.startswith(f'{name}{{gpu="{gpu}"')]
    return float(found[0].rsplit(" ", 1)[1]) if found else None


def test_the_claim_that_pages_hard_is_warned_once_and_its_resident_neighbours_are_not(
    node: Node, backend: NvmlBackend, tmp_path: Path
) -> None:
    # 1.25 GiB, 256 MiB of it on the device: 1 GiB of managed memory that cannot all stay on a 1 GiB GPU
    pager = node.prepare(claim("pager", vgpu(0, memory="256Mi", cores="0", virtual="1Gi"), configs=OPT_IN))
    # opted in too, but uses less than the device holds for it: all of it resident
    resident = node.prepare(
        claim("resident", vgpu(0, memory="256Mi", cores="0", virtual="256Mi"), configs=OPT_IN)
    )
    plain = node.prepare(claim("plain", vgpu(0, memory="256Mi", cores="0")))  # did not opt in
    work = node.page(pager, 1280 * MiB, 256 * MiB, passes=60)
    node.hold(resident, 128 * MiB)
    node.hold(plain, 256 * MiB)
    events = Recorded()
    watch = node.watch(backend, events)
    run_for(watch, 1.6)
    busy = dict(watch.busy_ratios())
    text = metrics_for(tmp_path, node.env.paths, pcie_busy=watch.busy_ratios).render().decode()
    run_for(watch, 0.5)  # the condition still holds: nothing more
    paging_still = work.poll() is None
    assert paging_still, work.communicate()[0]
    assert [(name, reason) for name, reason, _ in events.events] == [("pager", MOSTLY_PAGING_REASON)], events
    message = events.events[0][2]
    assert "holds 1Gi of host-backed (managed) memory on GPU 0" in message, message
    assert "not known" not in message  # the only claim with host-backed bytes on that GPU
    gpu0, gpu1 = busy[node.env.inventory().gpus[0].uuid], busy[node.env.inventory().gpus[1].uuid]
    assert gpu0 > 0.5 and gpu1 == 0.0, busy
    assert _gpu_sample(text, "tessera_gpu_pcie_busy_ratio", 0) == gpu0
    assert _gpu_sample(text, "tessera_gpu_pcie_busy_ratio", 1) == 0.0


def test_a_claim_holding_managed_memory_it_does_not_touch_is_not_warned(
    node: Node, backend: NvmlBackend
) -> None:
    idle = node.prepare(claim("idle", vgpu(0, memory="256Mi", cores="0", virtual="1Gi"), configs=OPT_IN))
    node.hold(idle, 1024 * MiB)  # more than the device holds for it: all managed, never read, nothing moves
    events = Recorded()
    watch = node.watch(backend, events)
    run_for(watch, 1.6)
    assert [c.managed_bytes for c in watch.host_backed()] == [1024 * MiB]
    assert events.events == []
    assert watch.busy_ratios()[node.env.inventory().gpus[0].uuid] == 0.0


def test_a_gpu_whose_nvml_reads_no_throughput_warns_nobody_and_logs_once(
    node: Node, backend: NvmlBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    pager = node.prepare(claim("pager", vgpu(0, memory="256Mi", cores="0", virtual="1Gi"), configs=OPT_IN))
    node.page(pager, 1280 * MiB, 256 * MiB, passes=40)
    monkeypatch.setenv("FAKE_PCIE_GEN", "0")  # NVML: Not Supported, as on vGPU guests
    events = Recorded()
    watch = node.watch(backend, events)
    with capture_logs() as logs:
        run_for(watch, 1.2)
    assert events.events == [] and watch.busy_ratios() == {}
    said = [e for e in logs if e["event"].startswith("paging: no PCIe throughput")]
    assert [e["gpu"] for e in said] == [g.uuid for g in node.env.inventory().gpus], said  # once per GPU
    assert all(e["log_level"] == "debug" for e in said)
    assert FAKE_GPU0 in {e["gpu"] for e in said}


@pytest.mark.parametrize(
    ("nvml", "ratio", "watched"),
    [(True, 2, True), (True, 1, False), (False, 2, False)],
    ids=["nvml-oversubscribed", "nvml-ratio-1", "simulated"],
)
def test_the_daemon_watches_paging_only_where_nvml_reads_the_link_and_memory_is_oversubscribed(
    nvml: bool, ratio: int, watched: bool
) -> None:
    root = Path(tempfile.mkdtemp(prefix="tpg-", dir="/tmp"))  # short: unix socket paths
    try:
        node_file = root / "node.yaml"
        node_file.write_text(
            "apiVersion: sim.tessera.dev/v1\nkind: SimulatedNode\n"
            "hostMemoryGiB: 256\ngpus: [{product: H100-80GB-SXM, count: 2}]\n"
        )
        settings = root / "settings.yaml"
        settings.write_text(
            f"apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nmemoryOversubscription: {ratio}\n"
        )
        (root / "claims").mkdir()
        options = DaemonOptions(
            node_name="node-a",
            root=root,
            simulate=None if nvml else node_file,
            sim_state=None if nvml else root / "sim-state.json",
            settings=settings,
            health_interval=60.0,
            publish=False,
            log_level="warning",
        )
        fake = FakeNvmlNode(node_file=node_file, state_dir=root / "fake-nvml")
        fake.state_dir.mkdir()
        with pynvml_on_fake(fake) if nvml else contextlib.nullcontext():
            plugin = Plugin.start(options, claims=directory_claims(root / "claims"))
            try:
                assert plugin.observability is not None
                assert (plugin.observability.paging is not None) is watched
            finally:
                plugin.stop(grace=0)
    finally:
        shutil.rmtree(root, ignore_errors=True)
