"""A hostile tenant, a forged caller and a careless host against the real daemon over its sockets.

Each test is one of issue #9's node-daemon items: the daemon keeps serving, nothing outside the claims root or
the CDI directory is touched, and what a tenant can fill is removed without holding the node lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import stat
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest

from cdi.writer import read_spec
from dra_driver.core.families import mig as mig_family
from dra_driver.core.families import vgpu as vgpu_family
from dra_driver.io.files import is_temp
from dra_driver.libtessera.names import REGION_FILE_NAME, SHARED_DIR_NAME
from dra_driver.vocabulary.names import CONFIG_API_VERSION, DRIVER_NAME, ClaimUID, cdi_spec_file_name
from kubelet_plugin.health.service import HEALTH_STREAMS
from kubelet_plugin.proto.gen import dra_v1_pb2, health_v1_pb2, health_v1alpha1_pb2
from kubelet_plugin.record.checkpoint_store import CheckpointStore
from kubelet_plugin.record.results import ClaimRef
from tests.support.kubelet_client import DraClient
from tests.support.open_watch import SPECIAL_KINDS, OpenWatch, can_make, make_special
from tests.support.plugin_process import NODE, PluginProcess, cleanup
from tests.support.sample_claims import allocated_claim, claim_ref, vgpu_claim
from tests.support.swept_dirs import swept_names
from tests.support.tenant_container import fill_entries

pytestmark = pytest.mark.timeout(120)


def prepared(p: PluginProcess, claim: dict[str, Any]) -> ClaimRef:
    p.claims.put(claim)
    ref = claim_ref(claim)
    with DraClient(p.paths.dra_socket) as client:
        assert client.prepare([ref]).claims[ref.uid].error == ""
    return ref


def claims_root_entries(p: PluginProcess) -> list[str]:
    return sorted(os.listdir(p.paths.claims_dir))


def swept_entries(p: PluginProcess, *, timeout: float = 60) -> list[str]:
    """The claims root once the daemon's background sweeper has removed what was set aside (or timed out)."""
    return swept_names(p.paths.claims_dir, timeout_s=timeout)


def deep_tree(top: Path, depth: int, *, link_to: Path) -> None:
    """`depth` nested directories below `top`, with files and links to `link_to` along the way."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            if level % 100 == 0:
                os.symlink(link_to, f"link{level}", dir_fd=fd)
                os.close(os.open(f"file{level}", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)


def snapshot(directory: Path) -> dict[str, str]:
    """Every path below `directory` with a digest of its content (or its kind)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[str(path)] = oct(stat.S_IFMT(st.st_mode))
    return out


# ---- 1: one safe tree removal for everything a tenant can fill ------------------------------------


def test_a_1000_deep_tree_does_not_break_unprepare_or_any_later_start(root: Path) -> None:
    p = PluginProcess(root=root).start()
    try:
        victim = root / "victim"
        victim.mkdir()
        (victim / "keep").write_text("mine")
        ref = prepared(p, vgpu_claim("deep", pool=NODE, gpu=0))
        deep_tree(p.paths.claim_dir(ref.uid) / SHARED_DIR_NAME, 1000, link_to=victim)
        with DraClient(p.paths.dra_socket) as client:
            assert client.unprepare([ref]).claims[ref.uid].error == ""
        assert swept_entries(p) == [], "no claim dir and no .<uid>.tmp-… left behind"

        # what a crash in the middle of a removal leaves: a set-aside deep tree; every later start copes
        stale = p.paths.claims_dir / f".{ref.uid}.tmp-0badf00d"
        stale.mkdir()
        deep_tree(stale, 1000, link_to=victim)
        p.kill()
        p.start()
        assert swept_entries(p) == []
        assert [x.name for x in victim.iterdir()] == ["keep"] and (victim / "keep").read_text() == "mine"
        prepared(p, vgpu_claim("next", pool=NODE, gpu=1))  # and it serves the next claim
    finally:
        cleanup([p], root)


def test_100k_files_are_removed_outside_the_node_lock(plugin: PluginProcess) -> None:
    ref = prepared(plugin, vgpu_claim("wide", pool=NODE, gpu=2))
    claim_dir = plugin.paths.claim_dir(ref.uid)
    fill_entries(claim_dir / SHARED_DIR_NAME, 100_000)
    answer: list[str] = []

    def unprepare() -> None:
        with DraClient(plugin.paths.dra_socket) as client:
            answer.append(client.unprepare([ref]).claims[ref.uid].error)

    caller = threading.Thread(target=unprepare)
    caller.start()
    while claim_dir.exists():  # set aside under the lock ...
        time.sleep(0.001)
    lock = os.open(plugin.paths.lock_file, os.O_RDWR)
    try:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.001)
        # ... and the lock is free again while the tenant's files are still being removed
        aside = [n for n in claims_root_entries(plugin) if is_temp(n)]
        fcntl.flock(lock, fcntl.LOCK_UN)
    finally:
        os.close(lock)
    caller.join(60)
    assert answer == [""]
    assert aside, "the node lock was held until every file was gone"
    assert swept_entries(plugin) == []


def test_another_tenants_prepare_and_unprepare_never_pay_for_a_big_cleanup(plugin: PluginProcess) -> None:
    """Issue #20, attack 4: a claim directory with 300,000 files is removed by the background sweeper; a
    prepare and an unprepare of another claim meanwhile stay fast (before: 250,000 entries per call, the rest
    inside whichever call came next: 4.8 s for another tenant's prepare beside 1M files)."""
    ref = prepared(plugin, vgpu_claim("filler", pool=NODE, gpu=2))
    fill_entries(plugin.paths.claim_dir(ref.uid) / SHARED_DIR_NAME, 300_000)
    with DraClient(plugin.paths.dra_socket) as client:
        assert client.unprepare([ref]).claims[ref.uid].error == ""
        other = vgpu_claim("neighbour", pool=NODE, gpu=3)
        plugin.claims.put(other)
        other_ref = claim_ref(other)
        timings = []
        for _ in range(3):
            t0 = time.monotonic()
            assert client.prepare([other_ref]).claims[other_ref.uid].error == ""
            t1 = time.monotonic()
            assert client.unprepare([other_ref]).claims[other_ref.uid].error == ""
            timings.append((t1 - t0, time.monotonic() - t1))
        still_sweeping = any(is_temp(n) for n in claims_root_entries(plugin))
    assert still_sweeping, "the calls were timed beside the cleanup"
    worst = max(max(t) for t in timings)
    assert worst < 0.25, timings  # 50 ms targeted (notes/issue-20.md); headroom for a loaded 2-core machine
    assert swept_entries(plugin, timeout=120) == []


# ---- 3: one validated ClaimUID at the gRPC edge ---------------------------------------------------


def test_a_forged_uid_fails_only_its_claim_and_touches_nothing_outside(plugin: PluginProcess) -> None:
    paths = plugin.paths
    victim = paths.claims_dir / ".." / ".." / "x"  # what `claims/<uid>` names for uid ../../x
    victim.mkdir(parents=True)
    (victim / "data").write_text("not the plugin's")
    forged = vgpu_claim("forged", pool=NODE, gpu=0)
    forged["metadata"]["uid"] = "../../x"  # a forged API object agrees with the forged kubelet call
    plugin.claims.put(forged)
    good = vgpu_claim("good", pool=NODE, gpu=1)
    plugin.claims.put(good)
    before = snapshot(plugin.root)
    bad_uids = ["../../x", "a/b", "..", "x" * 10_000]
    request = [dra_v1_pb2.Claim(namespace="default", name="forged", uid=u) for u in bad_uids]
    request.append(dra_v1_pb2.Claim(namespace="default", name="good", uid=good["metadata"]["uid"]))
    with DraClient(paths.dra_socket) as client:
        answers = client.v1.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=request))
        for uid in bad_uids:
            error = answers.claims[uid].error
            assert "field uid" in error and "not a Kubernetes UID" in error and len(error) < 600
        assert answers.claims[good["metadata"]["uid"]].error == ""
        unanswers = client.v1.NodeUnprepareResources(
            dra_v1_pb2.NodeUnprepareResourcesRequest(claims=request[:-1])
        )
        assert all("field uid" in unanswers.claims[u].error for u in bad_uids)
    after = snapshot(plugin.root)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    roots = (paths.claims_dir, paths.cdi_dir, paths.plugin_dir, paths.gpus_dir)
    ours = (*(str(d) + "/" for d in roots), str(paths.gpus_dir))
    logs = str(plugin.log_file)
    assert all(p.startswith(ours) or p == logs for p in changed), sorted(changed)
    assert (victim / "data").read_text() == "not the plugin's" and os.listdir(victim) == ["data"]


# ---- 5: every echoed value is bounded ---------------------------------------------------------------


def test_megabyte_opaque_configs_get_short_errors_in_one_working_call(plugin: PluginProcess) -> None:
    huge = "x" * (1 << 20)
    refs = []
    for i in range(5):
        claim = vgpu_claim(f"huge{i}", pool=NODE, gpu=i)
        claim["status"]["allocation"]["devices"]["config"] = [
            {
                "source": "FromClaim",
                "requests": [],
                "opaque": {
                    "driver": DRIVER_NAME,
                    "parameters": {
                        "apiVersion": CONFIG_API_VERSION,
                        "kind": "VgpuConfig",
                        "smLimitPolicy": huge,
                    },
                },
            }
        ]
        plugin.claims.put(claim)
        refs.append(claim_ref(claim))
    fine = vgpu_claim("fine", pool=NODE, gpu=6)
    plugin.claims.put(fine)
    logged = plugin.log_file.stat().st_size
    with DraClient(plugin.paths.dra_socket) as client:
        # one call: the answer stays far below the kubelet's default 4 MiB message limit
        answers = client.prepare([*refs, claim_ref(fine)])
    for r in refs:
        error = answers.claims[r.uid].error
        assert "smLimitPolicy" in error and len(error) < 600, error[:200]
    assert answers.claims[fine["metadata"]["uid"]].error == ""
    assert plugin.log_file.stat().st_size - logged < 64 << 10


# ---- 7: the CDI directory ---------------------------------------------------------------------------


def test_cdi_entries_named_like_our_specs_neither_stop_start_up_nor_pass_as_prepared(root: Path) -> None:
    p = PluginProcess(root=root).start()
    try:
        a, b, c = (prepared(p, vgpu_claim(n, pool=NODE, gpu=i)) for i, n in enumerate("abc"))
        spec = {r.uid: p.paths.cdi_spec_file(r.uid) for r in (a, b, c)}
        good = {r.uid: spec[r.uid].read_bytes() for r in (a, b, c)}
        p.kill()
        orphan = p.paths.cdi_dir / cdi_spec_file_name(ClaimUID("0rphan"))
        orphan.mkdir()
        (orphan / "inside").write_text("x")
        spec[a.uid].unlink()
        spec[a.uid].mkdir()  # a directory where a live claim's spec belongs
        spec[b.uid].write_text("{garbage")
        spec[c.uid].write_bytes(good[c.uid][: len(good[c.uid]) // 2])
        p.start()
        assert not orphan.exists()
        for r in (a, b, c):
            assert spec[r.uid].is_file() and read_spec(spec[r.uid]).devices, r.name
        with DraClient(p.paths.dra_socket) as client:
            for r in (a, b, c):
                answer = client.prepare([r]).claims[r.uid]
                assert answer.error == "" and list(answer.devices[0].cdi_device_ids) == [
                    f"{read_spec(spec[r.uid]).kind}={read_spec(spec[r.uid]).devices[0].name}"
                ]
            # damaged while running: the next prepare of the claim notices and writes it again
            spec[a.uid].write_text("[]")
            assert client.prepare([a]).claims[a.uid].error == ""
            assert read_spec(spec[a.uid]).devices
        assert "damaged" in p.log()
    finally:
        cleanup([p], root)


# ---- 8: health streams have their own capacity ------------------------------------------------------


def test_open_health_streams_never_starve_prepare(plugin: PluginProcess) -> None:
    outcomes: list[str] = []
    streams: list[Any] = []
    lock = threading.Lock()

    def watch(client: DraClient, i: int) -> None:
        stream: Any = (
            client.health_v1alpha1.NodeWatchResources(health_v1alpha1_pb2.NodeWatchResourcesRequest())
            if i % 2
            else client.health_v1.NodeWatchResources(health_v1_pb2.NodeWatchResourcesRequest())
        )
        with lock:
            streams.append(stream)
        try:
            next(stream)
            outcome = "open"
        except grpc.RpcError as e:
            outcome = e.code().name
        with lock:
            outcomes.append(outcome)

    with DraClient(plugin.paths.dra_socket) as client:
        watchers = [threading.Thread(target=watch, args=(client, i), daemon=True) for i in range(20)]
        for w in watchers:
            w.start()
        deadline = time.monotonic() + 20
        while len(outcomes) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        claim = vgpu_claim("while-watched", pool=NODE, gpu=5)
        plugin.claims.put(claim)
        ref = claim_ref(claim)
        assert client.prepare([ref], timeout=10).claims[ref.uid].error == ""
        assert sorted(outcomes) == ["RESOURCE_EXHAUSTED"] * (20 - HEALTH_STREAMS) + ["open"] * HEALTH_STREAMS
        for s in streams:
            s.cancel()
        # a slot comes back as soon as its caller goes, not at the next heartbeat
        deadline = time.monotonic() + 5
        while True:
            try:
                with client.watch_health(timeout=5) as again:
                    next(again)
                break
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and time.monotonic() < deadline
                time.sleep(0.1)


# ---- 9: modes do not follow the inherited umask -----------------------------------------------------


def test_nothing_is_world_writable_with_an_inherited_umask_000(root: Path) -> None:
    p = PluginProcess(root=root, umask=0).start()
    try:
        ref = prepared(p, vgpu_claim("modes", pool=NODE, gpu=0))
        mig = prepared(
            p, allocated_claim("mig", device="gpu-1-mig-1g10gb-2", family=mig_family.NAME, pool=NODE)
        )
        paths = p.paths
        claim_dir = paths.claim_dir(ref.uid)
        expected = {
            paths.dra_socket: 0o600,
            paths.registration_socket: 0o600,
            paths.plugin_dir: 0o700,
            paths.checkpoint_file: 0o600,
            paths.lock_file: 0o600,
            paths.cdi_dir: 0o755,
            paths.cdi_spec_file(ref.uid): 0o644,
            paths.cdi_spec_file(mig.uid): 0o644,
            paths.claims_dir: 0o700,
            claim_dir: 0o755,
            claim_dir / "limits": 0o644,
            claim_dir / SHARED_DIR_NAME: 0o755,
            claim_dir / SHARED_DIR_NAME / "limits": 0o444,
            claim_dir / SHARED_DIR_NAME / "region": 0o666,
        }
        assert {path: stat.S_IMODE(path.lstat().st_mode) for path in expected} == expected
        test_made = {root / "claims", p.log_file}
        writable = [
            str(path)
            for path in (Path(d) / n for d, ds, fs in os.walk(root) for n in ds + fs)
            if path.lstat().st_mode & 0o022
            and not any(path == t or t in path.parents for t in test_made)
            and path.name != "region"
        ]
        assert writable == []
        assert CheckpointStore(path=paths.checkpoint_file).load(boot_id="-").claims.keys() == {
            ref.uid,
            mig.uid,
        }
    finally:
        cleanup([p], root)


# ---- 10: a region a tenant made a device node or a FIFO is never opened (issue #34, defect 4) -----------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
def test_a_region_made_a_device_node_or_fifo_is_never_opened_by_the_daemon(root: Path, kind: str) -> None:
    """A root process in a vgpu container keeps CAP_MKNOD: `mknod region c 1 3` in its claim directory
    succeeds (nodev stops only the container's own opens). The daemon reads regions through the host path
    ~90 times a second per claim (the burst arbiter for a normal claim, the priority relay for a high one,
    metrics at each scrape); it must never open the node, neither while it runs nor when the kubelet prepares
    the claims again."""
    if not can_make(kind):
        pytest.skip("mknod of a character device needs root")
    port = _free_port()
    p = PluginProcess(root=root, extra_args=("--metrics-address", f"127.0.0.1:{port}")).start()
    try:
        normal = vgpu_claim("normal", pool=NODE, gpu=0, memory="1Gi", cores="30")
        consumed = {"memory": "1Gi", "cores": "20"}
        high = allocated_claim(
            "high", device="gpu-0-vgpu", family=vgpu_family.NAME, pool=NODE, consumed=consumed
        )
        high["status"]["allocation"]["devices"]["config"] = [
            {
                "source": "FromClass",
                "requests": [],
                "opaque": {
                    "driver": DRIVER_NAME,
                    "parameters": {"apiVersion": CONFIG_API_VERSION, "kind": "VgpuConfig", "priority": 0},
                },
            }
        ]
        refs = [prepared(p, normal), prepared(p, high)]
        regions = [p.paths.claim_dir(r.uid) / SHARED_DIR_NAME / REGION_FILE_NAME for r in refs]
        for region in regions:
            region.unlink()
            make_special(region, kind)
        with OpenWatch(*regions) as watch:
            for _ in range(4):  # ~1.2 s: the arbiter's and the relay's rounds, four scrapes
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    text = r.read().decode()
                time.sleep(0.3)
            assert 'tessera_claim_region_readable{namespace="default",claim="normal"' in text
            name = "tessera_claim_region_readable{"
            readable = [line for line in text.splitlines() if line.startswith(name)]
            assert len(readable) == 2 and all(line.endswith(" 0") for line in readable), readable
            with DraClient(p.paths.dra_socket) as client:
                assert all(a.error == "" for a in client.prepare(refs).claims.values())
            assert watch.opens() == dict.fromkeys(regions, 0)
        assert p.proc is not None and p.proc.poll() is None
    finally:
        cleanup([p], root)
