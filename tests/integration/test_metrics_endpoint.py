"""The daemon's /metrics over HTTP: vgpu claims prepared over its DRA socket, a fake-driver program running in
one of them (under the interception library, in the claim directory the daemon made) so its region fills, and
a scrape that finds the allocation, the live usage and the prepare histogram with the right values."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cdi.writer import read_spec
from dra_driver.libtessera.names import container_claim_dir
from dra_driver.libtessera.region_layout import GPU, GPUS_OFFSET, MAX_PROCS, PROC, PROCS_OFFSET
from kubelet_plugin.claims import claim_processes
from kubelet_plugin.library_files.region import read_region
from tests.support import tenant_container
from tests.support.doubles.interceptor_programs import TCUDA, container_view, env, start
from tests.support.kubelet_client import DraClient
from tests.support.loopback import free_port
from tests.support.node_metrics import metrics_for
from tests.support.plugin_process import REPO, PluginProcess, cleanup, short_root
from tests.support.sample_claims import claim_ref, vgpu_claim
from tests.support.tenant_container import inside

pytestmark = pytest.mark.timeout(120)

# the fake driver's two GPUs carry these UUIDs: the limits file names a GPU the program's CUDA sees
NODE_FILE = REPO / "e2e" / "nodes" / "realnode-h100x2.yaml"
POOL = "node-a"
GPU0 = "GPU-7e55e7a0-1234-4567-89ab-cdef00000000"
MiB = 1 << 20
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels`."""
    hits = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= ls]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} samples"
    return hits[0]


@pytest.fixture
def plugin() -> Iterator[tuple[PluginProcess, int]]:
    root = short_root()
    port = free_port()
    p = PluginProcess(
        root=root, node_file=NODE_FILE, extra_args=("--metrics-address", f"127.0.0.1:{port}")
    ).start()
    yield p, port
    cleanup([p], root)


def test_a_scrape_shows_allocation_live_usage_and_the_prepare_histogram(
    plugin: tuple[PluginProcess, int], tmp_path: Path
) -> None:
    p, port = plugin
    busy = vgpu_claim("busy", pool=POOL, gpu=0, memory="1Gi", cores="30", namespace="team-a")
    idle = vgpu_claim("idle", pool=POOL, gpu=0, memory="2Gi", cores="20", namespace="team-a")
    for c in (busy, idle):
        p.claims.put(c)
    with DraClient(p.paths.dra_socket) as client:
        answer = client.prepare([claim_ref(busy), claim_ref(idle)])
    assert all(not a.error for a in answer.claims.values()), answer

    uid = busy["metadata"]["uid"]
    claim_dir = p.paths.claims_dir / uid
    program = start(
        TCUDA, "usage", str(300 * MiB), "40", "2000", env=env(container_view(claim_dir), tmp_path / "gpu")
    )
    try:
        assert program.stdout is not None and "ready" in program.stdout.readline()
        status, text = scrape(port)
        assert status == 200
        found = samples(text)
        pid = str(program.pid)
    finally:
        program.kill()
        program.wait()

    g0 = {"gpu": "0", "gpu_uuid": GPU0}
    # allocation per GPU: two slices of GPU 0, 3 GiB and half of the SMs given out
    assert value(found, "tessera_gpu_devices_in_use", family="vgpu", **g0) == 2
    assert value(found, "tessera_gpu_devices_in_use", family="gpu", **g0) == 0
    assert value(found, "tessera_gpu_vgpu_shares_used", **g0) == 2
    assert value(found, "tessera_gpu_vgpu_shares", **g0) == 10
    assert value(found, "tessera_gpu_memory_allocated_bytes", **g0) == 3 * 1024 * MiB
    assert value(found, "tessera_gpu_cores_allocated_ratio", **g0) == pytest.approx(0.5)
    assert value(found, "tessera_gpu_memory_bytes", **g0) == 81559 * MiB
    assert value(found, "tessera_gpu_healthy", **g0) == 1
    # per claim: the limits it was given
    claim = {"namespace": "team-a", "claim": "busy", "uid": uid, "device": "gpu-0-vgpu", "gpu_uuid": GPU0}
    assert value(found, "tessera_claim_memory_limit_bytes", **claim) == 1024 * MiB
    assert value(found, "tessera_claim_cores_limit_ratio", **claim) == pytest.approx(0.3)
    # live usage, read from the region the library filled: 300 MiB held by the program, 40 launches of 2 ms
    assert value(found, "tessera_claim_memory_used_bytes", **claim) == 300 * MiB
    # a host process (no pid namespace): its own pid; its container is whatever this test runs in
    here = claim_processes.container_id(Path("/proc/self/cgroup").read_text())
    assert (
        value(found, "tessera_claim_process_memory_used_bytes", pid=pid, container=here, **claim) == 300 * MiB
    )
    assert value(found, "tessera_claim_processes", **claim) == 1
    assert value(found, "tessera_claim_launches_total", **claim) == 40
    assert value(found, "tessera_claim_oom_refusals_total", **claim) == 1
    assert 0.04 <= value(found, "tessera_claim_gpu_seconds_total", **claim) <= 0.2
    assert value(found, "tessera_claim_throttled_seconds_total", **claim) > 0  # 30 % of the SMs: it waited
    assert value(found, "tessera_claim_region_readable", namespace="team-a", claim="busy", uid=uid) == 1
    # the other claim's region was never written: limits shown, no usage
    assert value(found, "tessera_claim_region_readable", claim="idle") == 0
    assert not [k for k in found if k[0] == "tessera_claim_memory_used_bytes" and ("claim", "idle") in k[1]]
    # the daemon: one NodePrepareResources call of two claims, no error; health of every device
    assert value(found, "tessera_kubelet_call_duration_seconds_count", call="NodePrepareResources") == 1
    assert value(found, "tessera_claims_total", call="NodePrepareResources") == 2
    assert not [k for k in found if k[0] == "tessera_claim_errors_total"]
    assert value(found, "tessera_checkpoint_writes_total") >= 1
    assert value(found, "tessera_device_health", device="gpu-0-vgpu") == 1
    assert ("tessera_device_health", frozenset({("device", "gpu-0-vgpu"), ("state", "healthy")})) in found

    assert scrape(port, "/healthz") == (200, "ok\n")
    assert scrape(port, "/nope")[0] == 404


def test_a_bad_metrics_address_is_refused_naming_the_flag() -> None:
    root = short_root()
    try:
        cmd = PluginProcess(root=root, extra_args=("--metrics-address", "9400")).command()
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60, cwd=REPO)
    finally:
        cleanup([], root)
    assert done.returncode != 0
    assert "--metrics-address '9400'" in done.stderr and "HOST:PORT" in done.stderr


def test_the_endpoint_goes_away_with_the_daemon(plugin: tuple[PluginProcess, int]) -> None:
    p, port = plugin
    assert scrape(port, "/healthz")[0] == 200
    assert p.terminate() == 0
    time.sleep(0.1)
    with pytest.raises(OSError):
        scrape(port, "/healthz")


TENANT_ATTACK = """
d = os.environ["CLAIM"]
limits = os.path.join(d, "limits")
out["read"] = open(limits).read()
forged = "version 1\\ngpu GPU-x memory 4611686018427387904 cores 100\\n"
attempt("write", lambda: open(limits, "w").write(forged))
attempt("chmod", lambda: os.chmod(limits, 0o666))
attempt("unlink", lambda: os.unlink(limits))
attempt("rename", lambda: os.rename(limits, os.path.join(d, "old")))
open(os.path.join(d, "new"), "w").write(forged)
attempt("replace", lambda: os.replace(os.path.join(d, "new"), limits))
print(json.dumps(out))
"""


@pytest.mark.skipif(not tenant_container.available(), reason="needs root, unshare, mount and setpriv")
def test_a_root_tenant_cannot_raise_its_own_limits(plugin: tuple[PluginProcess, int], tmp_path: Path) -> None:
    """Issue #20, attack 3: a container running as root rewrote its claim's limits file (memory 4 EiB, cores
    100) and the node's metrics reported it as allocated (GPU 0: 3 GiB -> 4 EiB). The container gets its claim
    directory from the claim's real CDI spec here: the limits are a read-only mount point in it."""
    p, port = plugin
    claim = vgpu_claim("root", pool=POOL, gpu=0, memory="3Gi", cores="30")
    p.claims.put(claim)
    with DraClient(p.paths.dra_socket) as client:
        assert not client.prepare([claim_ref(claim)]).claims[claim["metadata"]["uid"]].error
    uid = claim["metadata"]["uid"]
    host_limits = (p.paths.claim_dir(uid) / "limits").read_bytes()
    spec = read_spec(p.paths.cdi_spec_file(uid))
    mounts = [m for m in spec.container_edits.mounts if m.container_path.startswith(container_claim_dir(uid))]
    rootfs = tmp_path / "rootfs"
    program = tenant_container.ATTEMPT + TENANT_ATTACK.replace(
        'os.environ["CLAIM"]', repr(str(inside(rootfs, container_claim_dir(uid))))
    )
    seen = json.loads(tenant_container.run(rootfs, mounts, program))
    assert seen["read"].encode() == host_limits, "the library reads the daemon's limits"
    assert seen["write"] == "EROFS" and seen["chmod"] == "EROFS"
    assert seen["unlink"] == seen["rename"] == seen["replace"] == "EBUSY"
    assert (p.paths.claim_dir(uid) / "limits").read_bytes() == host_limits
    found = samples(scrape(port)[1])
    g0 = {"gpu": "0", "gpu_uuid": GPU0}
    assert value(found, "tessera_gpu_memory_allocated_bytes", **g0) == 3 * 1024 * MiB
    assert value(found, "tessera_gpu_cores_allocated_ratio", **g0) == pytest.approx(0.3)


def _prepared_view(p: PluginProcess, name: str) -> tuple[str, Path]:
    """A vgpu claim (1 GiB, no SM limit) prepared over the DRA socket: its uid and its containers' view."""
    claim = vgpu_claim(name, pool=POOL, gpu=0, memory="1Gi", cores="0")
    p.claims.put(claim)
    uid = claim["metadata"]["uid"]
    with DraClient(p.paths.dra_socket) as client:
        assert not client.prepare([claim_ref(claim)]).claims[uid].error
    return uid, container_view(p.paths.claims_dir / uid)


def _pid_1s(view: Path, gpu_state: Path, *usages: tuple[int, int, int]) -> list[subprocess.Popen[str]]:
    """One fake-driver program per (bytes, launches, µs), each pid 1 of a pid namespace of its own."""
    return [
        subprocess.Popen(
            ["unshare", "--pid", "--fork", str(TCUDA), "usage", *map(str, usage)],
            env=env(view, gpu_state),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for usage in usages
    ]


@pytest.mark.skipif(not tenant_container.available(), reason="needs root and unshare")
def test_forged_region_numbers_are_clipped_and_two_pid_1s_are_two_series(
    plugin: tuple[PluginProcess, int], tmp_path: Path
) -> None:
    """Issue #20, attack 5: forged region values reached the metrics as `memory_used_bytes 7.38e19` and
    `launches_total 1.8e19`, and per-process series collided when two containers both had pid 1."""
    p, port = plugin
    uid, view = _prepared_view(p, "forger")
    # two containers of the claim, each its own pid namespace: both programs are pid 1
    programs = _pid_1s(view, tmp_path / "gpu", (100 * MiB, 4, 100), (100 * MiB, 4, 100))
    try:
        for program in programs:
            assert program.stdout is not None and "ready" in program.stdout.readline()
        region = read_region(view / "region")
        entry = GPUS_OFFSET + region.gpus[0].entry * GPU.size
        fd = os.open(view / "region", os.O_WRONLY)
        try:  # the tenant's forgery: launches, active_ns, gpu_ns, throttled_ns, oom_refusals; a slot's bytes
            os.pwrite(fd, struct.pack("<5Q", *[2**64 - 1] * 5), entry + 104)
            slot = region.processes[0].slot
            os.pwrite(
                fd,
                struct.pack("<Q", 1 << 56),
                PROCS_OFFSET + slot * PROC.size + 16 + 8 * region.gpus[0].entry,
            )
        finally:
            os.close(fd)
        found = samples(scrape(port)[1])
    finally:
        for program in programs:
            program.kill()
            program.wait()
    mine = {"claim": "forger", "uid": uid}
    gpu_memory = 81559 * MiB
    assert value(found, "tessera_claim_memory_used_bytes", **mine) == gpu_memory
    per_process = {
        ls: v
        for (n, ls), v in found.items()
        if n == "tessera_claim_process_memory_used_bytes" and ("uid", uid) in ls
    }
    assert sorted(dict(ls)["pid"] for ls in per_process) == ["1", "1"]
    assert len({dict(ls)["slot"] for ls in per_process}) == 2
    assert sorted(per_process.values()) == [100 * MiB, gpu_memory]
    uptime_s = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert value(found, "tessera_claim_launches_total", **mine) <= (uptime_s + 1) * 1e6 * MAX_PROCS
    assert value(found, "tessera_claim_gpu_seconds_total", **mine) <= (uptime_s + 1) * MAX_PROCS


def _two_containers(proc: Path, holders: tuple[claim_processes.ClaimProcess, ...], ids: list[str]) -> None:
    """A /proc where each real holder's fds, fdinfo, status and stat are its own, and its cgroup names a
    container of its own (the test processes share this one's)."""
    for p, cid in zip(holders, ids, strict=True):
        d = proc / str(p.host_pid)
        d.mkdir(parents=True)
        for name in ("fd", "fdinfo", "status", "stat"):
            (d / name).symlink_to(f"/proc/{p.host_pid}/{name}")
        (d / "cgroup").write_text(f"0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-{cid}.scope\n")


@pytest.mark.skipif(not tenant_container.available(), reason="needs root and unshare")
def test_two_containers_pid_1s_carry_their_own_container_from_proc(
    plugin: tuple[PluginProcess, int], tmp_path: Path
) -> None:
    """Issue #20, item 5: a per-process series names its container, as the kernel says (the process holding
    the slot's lock, its cgroup), not only the pid a tenant wrote into the region."""
    p, port = plugin
    uid, view = _prepared_view(p, "pair")
    programs = _pid_1s(view, tmp_path / "gpu", (100 * MiB, 0, 0), (200 * MiB, 0, 0))
    ids = ["a" * 64, "b" * 64]
    proc = tmp_path / "proc"
    try:
        for program in programs:
            assert program.stdout is not None and "ready" in program.stdout.readline()
        key = claim_processes.region_key(view / "region")
        assert key is not None
        holders = claim_processes.scan()[key]  # the real /proc: both programs, each pid 1 in its namespace
        assert sorted(h.pid for h in holders) == [1, 1]
        _two_containers(proc, holders, ids)
        seen = samples(metrics_for(p.root, p.paths, proc=proc).render().decode())
        # the region's slots, as the daemon (real /proc) sees them
        daemons = samples(scrape(port)[1])
    finally:
        for program in programs:
            program.kill()
            program.wait()

    def per_process(found: Samples) -> dict[str, tuple[str, str, float]]:
        return {
            dict(ls)["slot"]: (dict(ls)["pid"], dict(ls)["container"], v)
            for (n, ls), v in found.items()
            if n == "tessera_claim_process_memory_used_bytes" and ("uid", uid) in ls
        }

    series = per_process(seen)
    # which program got which slot (and so which made-up container) is the order they started in
    assert sorted(v for _, _, v in series.values()) == [100 * MiB, 200 * MiB]
    assert sorted((pid, c) for pid, c, _ in series.values()) == [("1", ids[0]), ("1", ids[1])]
    # each slot's container is the one of the process that holds it
    by_slot = claim_processes.by_slot(holders)
    assert {slot: c for slot, (_, c, _) in series.items()} == {
        str(s): ids[holders.index(h)] for s, h in by_slot.items()
    }
    # the daemon's own scrape: the same slots; both processes share this test's cgroup, so one container
    here = claim_processes.container_id(Path("/proc/self/cgroup").read_text())
    assert {s: c for s, (_, c, _) in per_process(daemons).items()} == {s: here for s in series}


def test_without_a_view_of_the_holders_the_container_is_empty(
    plugin: tuple[PluginProcess, int], tmp_path: Path
) -> None:
    """A daemon that cannot see the tenants' processes (no hostPID: an empty /proc) labels container=""
    and keeps the region's pid."""
    p, _port = plugin
    uid, view = _prepared_view(p, "alone")
    program = start(TCUDA, "usage", str(100 * MiB), "0", "0", env=env(view, tmp_path / "g"))
    try:
        assert program.stdout is not None and "ready" in program.stdout.readline()
        (tmp_path / "proc").mkdir()
        found = samples(metrics_for(p.root, p.paths, proc=tmp_path / "proc").render().decode())
    finally:
        program.kill()
        program.wait()
    claim_labels = {"uid": uid, "device": "gpu-0-vgpu"}
    got = value(
        found, "tessera_claim_process_memory_used_bytes", pid=str(program.pid), container="", **claim_labels
    )
    assert got == 100 * MiB


def _reserved(claim: dict[str, Any], *pods: str) -> dict[str, Any]:
    """The claim as the scheduler leaves it for its pods (before the kubelet prepares it)."""
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods]
    return claim


def _pods_label(text: str, claim: str) -> set[str]:
    return {
        dict(ls)["pod"]
        for (name, ls) in samples(text)
        if name == "tessera_claim_memory_limit_bytes" and ("claim", claim) in ls
    }


def test_claim_series_name_their_pods_from_the_first_scrape_and_after_a_restart(
    plugin: tuple[PluginProcess, int],
) -> None:
    """Issue #36: every per-claim series had pod="" although each claim's status.reservedFor named its pod.
    The daemon notes the pods of the claim prepare reads, so the first scrape after prepare names them; a
    restarted daemon learns them again from the claims start-up reconciliation reads. A consumer that is not
    a core pod, or whose name could not be a pod's, is not shown."""
    p, port = plugin
    web = _reserved(vgpu_claim("web", pool=POOL, gpu=0, memory="1Gi", namespace="team-a"), "web-7d9f-x2x")
    shared = _reserved(vgpu_claim("shared", pool=POOL, gpu=1, memory="1Gi", namespace="team-a"), "b-1", "a-0")
    shared["status"]["reservedFor"] += [
        {"apiGroup": "batch", "resource": "jobs", "name": "job", "uid": "j"},
        {"resource": "pods", "name": 'evil",pod="x', "uid": "e"},
    ]
    for c in (web, shared):
        p.claims.put(c)
    with DraClient(p.paths.dra_socket) as client:
        answer = client.prepare([claim_ref(web), claim_ref(shared)])
    assert all(not a.error for a in answer.claims.values()), answer
    status, text = scrape(port)
    assert status == 200
    assert _pods_label(text, "web") == {"web-7d9f-x2x"}
    assert _pods_label(text, "shared") == {"a-0,b-1"}

    assert p.terminate() == 0
    p.start()
    status, text = scrape(port)
    assert status == 200
    assert _pods_label(text, "web") == {"web-7d9f-x2x"}
    assert _pods_label(text, "shared") == {"a-0,b-1"}
