"""Two node-plugin instances on one node, as during a rolling update (the chart's maxSurge): two NodeStates
with their own claim calls (the plugin lock, the reload of a changed checkpoint) on the same plugin, claims
and GPU views directories. Issue #34: the old instance's burst arbiter wrote the view without the claims the
new instance prepared (missing in 300 of 300 samples), so those ran outside the frame, and its relay released
normal claims while the other instance's high-priority claim worked.

The instances' loops are driven round by round on their own clocks, and the view is read back as the library
reads it (`GpuView.read_schedule`, `hold_until_ns`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from dra_driver.core.families import vgpu as vgpu_family
from dra_driver.core.sm_schedule import SharingClaim, schedule
from dra_driver.libtessera.names import SHARED_DIR_NAME
from dra_driver.libtessera.region_layout import (
    GPU,
    GPUS_OFFSET,
    HEADER,
    MAGIC,
    MAX_GPUS,
    MAX_PROCS,
    SIZE,
    VERSION,
)
from dra_driver.libtessera.view_layout import Part
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.claims.node_state import NodeState
from kubelet_plugin.host_parts.vgpu import GpuSharing
from kubelet_plugin.host_parts.vgpu.arbiter import IDLE_NS
from kubelet_plugin.library_files.gpu_view import GpuView
from kubelet_plugin.node.leader_lock import LeaderLock
from kubelet_plugin.node.sockets import PluginLock
from kubelet_plugin.record.checkpoint_store import CheckpointStore
from kubelet_plugin.record.results import ClaimRef
from kubelet_plugin.serving.dra_service import ClaimCalls
from kubelet_plugin.serving.node_setup import running_on
from tests.support.prepare_env import Env, claim, opaque, vgpu

SAMPLES = 300
MS = 1_000_000
ROUND_NS = IDLE_NS + 10 * MS  # a claim whose count did not move within a round is idle at its end
HIGH = [opaque("VgpuConfig", source="FromClass", priority=0)]


@dataclass
class Instance:
    """One plugin instance's claim calls and vgpu host part, its loops guarded as the daemon guards them."""

    calls: ClaimCalls
    state: NodeState
    sharing: GpuSharing
    leader: LeaderLock

    def prepare(self, refs: list[ClaimRef]) -> None:
        answers = self.calls.prepare(refs)
        assert all(a.error is None for a in answers.values()), answers

    def unprepare(self, refs: list[ClaimRef]) -> None:
        answers = self.calls.unprepare(refs)
        assert all(a.error is None for a in answers.values()), answers

    def close(self) -> None:
        self.leader.close()
        self.state.close()


def instance(env: Env) -> Instance:
    preparer = env.preparer()
    state = preparer.state
    lock = PluginLock(env.paths.lock_file)
    calls = ClaimCalls(
        preparer=preparer, lock=lock, shared_state=env.paths.checkpoint_file, reload=state.forget
    )
    leader = LeaderLock(env.paths.loops_lock_file, what="the loops writing the GPU views")
    sharing = state.hosts[vgpu_family.NAME]
    assert isinstance(sharing, GpuSharing)
    sharing.loops(running_on(state, lock, leader))  # the guards the daemon's loop threads run under
    return Instance(calls=calls, state=state, sharing=sharing, leader=leader)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env.create(tmp_path)
    e.paths.plugin_dir.mkdir(parents=True)  # the daemon makes it before its first call
    yield e
    e.backend.close()


@pytest.fixture
def pair(env: Env) -> Iterator[tuple[Instance, Instance]]:
    old, new = instance(env), instance(env)
    assert old.leader.leads() and not new.leader.leads()  # the old pod started first
    yield old, new
    old.close()
    new.close()


class Launches:
    """Claims' launch counts, written into their regions as the library leaves them."""

    def __init__(self, env: Env, gpu: str) -> None:
        self._env, self._gpu, self._counts = env, gpu, dict[ClaimUID, int]()

    def bump(self, *uids: ClaimUID) -> None:
        for uid in uids:
            self._counts[uid] = n = self._counts.get(uid, 0) + 1
            data = bytearray(SIZE)
            HEADER.pack_into(data, 0, MAGIC, VERSION, GPUS_OFFSET, SIZE, MAX_GPUS, MAX_PROCS, 0, 0)
            GPU.pack_into(data, GPUS_OFFSET, self._gpu.encode(), *([0] * 6), n, *([0] * 10))
            (self._env.paths.claim_dir(uid) / SHARED_DIR_NAME / "region").write_bytes(bytes(data))


def gpu_claims(env: Env, gpu: str) -> tuple[SharingClaim, ...]:
    """The GPU's claims as the checkpoint on disk records them (what every layout must be made for)."""
    cp = CheckpointStore(path=env.paths.checkpoint_file).load(boot_id="-")
    shares = [s for e in cp.claims.values() for s in e.family_records(vgpu_family.FAMILY)]
    return tuple(
        SharingClaim(s.slot, s.cores, s.high_priority, s.ceiling) for s in shares if s.gpu_uuid == gpu
    )


def layout(env: Env, gpu: str) -> tuple[Part, ...]:
    view = GpuView(env.paths.gpus_dir / gpu / "view")
    try:
        return view.read_schedule()[1]
    finally:
        view.close()


def hold_until(env: Env, gpu: str) -> int:
    view = GpuView(env.paths.gpus_dir / gpu / "view")
    try:
        return view.hold_until_ns()
    finally:
        view.close()


def slot_of(env: Env, ref: ClaimRef) -> int:
    entry = CheckpointStore(path=env.paths.checkpoint_file).load(boot_id="-").claims[ref.uid]
    (share,) = entry.family_records(vgpu_family.FAMILY)
    return share.slot


def refs_of(env: Env, *claims: dict[str, Any]) -> list[ClaimRef]:
    return env.put(*claims)


def test_the_leaders_arbiter_lays_the_view_out_for_the_claims_the_other_instance_prepared(
    env: Env, pair: tuple[Instance, Instance]
) -> None:
    old, new = pair
    gpu = str(env.inventory().gpus[0].uuid)
    launches = Launches(env, gpu)
    (a,) = refs_of(env, claim("a", vgpu(0, cores="30")))
    old.prepare([a])
    now = 0
    for _ in range(3):  # the old instance's arbiter has been watching its claim for a while
        now += ROUND_NS
        launches.bump(a.uid)
        old.sharing.arbitrate_once(now_ns=now)

    b, z = refs_of(env, claim("b", vgpu(0, cores="40")), claim("z", vgpu(0, cores="0")))
    new.prepare(
        [b, z]
    )  # the new pod's first claims, on the same GPU; z has no share: gated only by its entry
    claims = gpu_claims(env, gpu)
    assert len(claims) == 3
    slot_a, slot_b, slot_z = slot_of(env, a), slot_of(env, b), slot_of(env, z)

    with_b = exact = 0
    for k in range(SAMPLES):
        now += ROUND_NS
        busy = {a.uid: slot_a, b.uid: slot_b} if k % 2 else {b.uid: slot_b}  # a new layout each round
        launches.bump(*busy)
        old.sharing.arbitrate_once(now_ns=now)
        new.sharing.arbitrate_once(now_ns=now)  # it does not lead: writes nothing
        parts = layout(env, gpu)
        with_b += {slot_b, slot_z} <= {p.slot for p in parts}
        # (the arbiter's first look at b's count is a baseline: b has work from its second round on)
        exact += parts == schedule(claims, active={s for u, s in busy.items() if u != b.uid or k > 0})
    assert (with_b, exact) == (SAMPLES, SAMPLES)  # before issue #34's fix: 0 and 0 of 300

    new.unprepare([b, z])
    for _ in range(2):
        now += ROUND_NS
        launches.bump(a.uid)
        old.sharing.arbitrate_once(now_ns=now)
        assert {p.slot for p in layout(env, gpu)} == {slot_a}  # the next write drops them


def test_the_leaders_relay_holds_for_a_high_priority_claim_the_other_instance_prepared(
    env: Env, pair: tuple[Instance, Instance]
) -> None:
    old, new = pair
    gpu = str(env.inventory().gpus[1].uuid)
    launches = Launches(env, gpu)
    mine, normal = refs_of(
        env, claim("mine", vgpu(1, cores="20"), configs=HIGH), claim("n", vgpu(1, cores="30"))
    )
    old.prepare([mine, normal])  # a high-priority claim of its own, idle: the relay watches the GPU
    (theirs,) = refs_of(env, claim("theirs", vgpu(1, cores="20"), configs=HIGH))
    new.prepare([theirs])
    now = 0
    old.sharing.relay_once(now_ns=now)  # its first look at a count is a baseline
    held = 0
    for _ in range(SAMPLES):
        now += 10 * MS
        launches.bump(theirs.uid)  # the new instance's high-priority claim works
        old.sharing.relay_once(now_ns=now)
        new.sharing.relay_once(now_ns=now)  # it does not lead: writes nothing
        held += hold_until(env, gpu) > now
    assert held == SAMPLES  # before issue #34's fix: 0 of 300 (the old relay released them every round)

    new.unprepare([theirs])
    now += 10 * MS
    old.sharing.relay_once(now_ns=now)  # (a relay still watching its gone region would see its count move)
    assert hold_until(env, gpu) == 0


def test_one_instance_writes_the_views_at_a_time_and_the_other_takes_over_when_it_exits(
    env: Env, pair: tuple[Instance, Instance]
) -> None:
    old, new = pair
    gpu = str(env.inventory().gpus[0].uuid)
    launches = Launches(env, gpu)
    a, b = refs_of(env, claim("a", vgpu(0, cores="30")), claim("b", vgpu(0, cores="40")))
    old.prepare([a])
    new.prepare([b])
    now = 0
    for _ in range(3):
        now += ROUND_NS
        launches.bump(a.uid, b.uid)
        old.sharing.arbitrate_once(now_ns=now)
    both_busy = layout(env, gpu)
    assert not any(p.free for p in both_busy)  # both have work: each in its part
    for _ in range(3):
        now += ROUND_NS
        new.sharing.arbitrate_once(now_ns=now)  # its own look sees nobody busy, but it does not lead
        assert layout(env, gpu) == both_busy

    old.close()  # the old pod exits: its flock goes with its descriptors
    assert new.leader.leads()
    for _ in range(3):
        now += ROUND_NS
        launches.bump(b.uid)
        new.sharing.arbitrate_once(now_ns=now)
    claims = gpu_claims(env, gpu)
    assert layout(env, gpu) == schedule(claims, active={slot_of(env, b)})  # the old instance's claim too


def test_a_layout_made_before_the_other_instances_prepare_is_not_written_and_a_warning_says_so(
    env: Env, pair: tuple[Instance, Instance]
) -> None:
    old, new = pair
    gpu = str(env.inventory().gpus[0].uuid)
    (a,) = refs_of(env, claim("a", vgpu(0, cores="30")))
    old.prepare([a])
    (made_for,) = old.sharing.arbitrated()  # the arbiter reads the GPU's claims, then works out a layout
    (b,) = refs_of(env, claim("b", vgpu(0, cores="40")))
    new.prepare([b])  # meanwhile the other instance prepares a claim there
    partition = layout(env, gpu)
    with capture_logs() as logs:
        assert not old.sharing.commit_layout(made_for, (Part(slot_of(env, a), 0, 0, 100),))
    assert layout(env, gpu) == partition  # b keeps its part
    assert [(e["log_level"], e["gpu"]) for e in logs if "not written" in e["event"]] == [("warning", gpu)]
