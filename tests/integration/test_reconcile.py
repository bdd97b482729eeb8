"""Start-up reconciliation, and convergence after a crash at every fault point of prepare and unprepare.

The crash here is in-process (the fault raises a BaseException nothing catches, so no cleanup runs, as with
SIGKILL); tests/integration/test_crash.py does the same with a real SIGKILL over the daemon's socket.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.core.families import mig as mig_family
from dra_driver.vocabulary.names import ClaimUID, cdi_spec_file_name
from kubelet_plugin.claims.reconcile import reconcile
from kubelet_plugin.record.checkpoint import ClaimState
from kubelet_plugin.record.leftovers import LeftoverKind
from kubelet_plugin.record.results import ClaimRef
from kubelet_plugin.record.steps import Step
from tests.support.faults import Faults
from tests.support.prepare_env import BACKENDS, Env, backend_env, claim, mig_records, result, vgpu


class Crash(BaseException):
    pass


def crash() -> None:
    raise Crash


@pytest.fixture(params=BACKENDS)
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    with backend_env(tmp_path, request.param) as e:
        yield e


def mixed(env: Env, name: str = "mixed"):  # type: ignore[no-untyped-def]
    """vgpu on GPU 0 and a MIG instance on GPU 1 (MIG mode off: Tessera switches it on)."""
    (r,) = env.put(
        claim(name, vgpu(0, memory="8Gi", cores="25"), result("gpu-1-mig-3g40gb-4", request="mig"))
    )
    return r


def assert_clean(env: Env) -> None:
    assert (env.cdi_files(), env.claim_dirs(), dict(env.checkpoint().claims), env.mig()) == ([], [], {}, [])
    assert env.mig_modes() == [False, False, True]
    assert env.checkpoint().owned_by(mig_family.NAME) == frozenset()


def assert_prepared(env: Env, uid: str) -> None:
    assert env.cdi_files() == [cdi_spec_file_name(ClaimUID(uid))]
    assert env.claim_dirs() == [uid]
    assert {u: e.state for u, e in env.checkpoint().claims.items()} == {uid: ClaimState.PREPARE_COMPLETED}
    assert env.mig() == [(1, "3g.40gb", 4)]


@pytest.mark.parametrize("point", [s for s in Step if not s.value.startswith("unprepare-")], ids=str)
def test_crash_during_prepare_converges(env: Env, point: Step) -> None:
    r = mixed(env)
    with pytest.raises(Crash):
        env.preparer(faults=Faults(kill_at=frozenset({point}), die=crash)).prepare([r])
    restarted = env.preparer()
    report = reconcile(restarted, roll_forward=False)
    assert report.problems == ()
    answer = restarted.prepare([r])[r.uid]  # the kubelet retries
    assert answer.error is None
    assert sorted(d.device_name for d in answer.devices) == ["gpu-0-vgpu", "gpu-1-mig-3g40gb-4"]
    assert_prepared(env, r.uid)
    assert restarted.unprepare([r])[r.uid].error is None
    assert_clean(env)


@pytest.mark.parametrize("point", [s for s in Step if s.value.startswith("unprepare-")], ids=str)
def test_crash_during_unprepare_converges(env: Env, point: Step) -> None:
    r = mixed(env)
    assert env.preparer().prepare([r])[r.uid].error is None
    with pytest.raises(Crash):
        env.preparer(faults=Faults(kill_at=frozenset({point}), die=crash)).unprepare([r])
    restarted = env.preparer()
    reconcile(restarted)
    assert restarted.unprepare([r])[r.uid].error is None  # the kubelet retries
    assert_clean(env)


def test_crash_then_reconcile_rolls_a_live_claim_forward(env: Env) -> None:
    r = mixed(env)
    with pytest.raises(Crash):
        env.preparer(faults=Faults(kill_at=frozenset({Step.AFTER_MIG_CREATE}), die=crash)).prepare([r])
    report = reconcile(env.preparer())
    assert report.rolled_forward == (r.uid,) and report.problems == ()
    assert_prepared(env, r.uid)


def test_claims_gone_from_the_api_are_released(env: Env) -> None:
    gone, kept = mixed(env, "gone"), env.put(claim("kept", vgpu(0)))[0]
    assert all(a.error is None for a in env.preparer().prepare([gone, kept]).values())
    mig_uuid = env.inventory().gpus[1].mig_instances[0].uuid
    env.claims.delete(namespace=gone.namespace, name=gone.name)
    report = reconcile(env.preparer())
    assert report.released_claims == (gone.uid,)
    assert report.kept_claims == (kept.uid,)
    assert report.removed_on_host_of(LeftoverKind.MIG_INSTANCE) == (mig_uuid,)
    assert report.removed_on_host_of(LeftoverKind.MIG_MODE) == (env.inventory().gpus[1].uuid,)
    assert [Path(p).name for p in report.removed_cdi_files] == [cdi_spec_file_name(gone.uid)]
    assert [Path(p).name for p in report.removed_claim_dirs] == [gone.uid]
    assert list(env.checkpoint().claims) == [kept.uid]
    assert env.cdi_files() == [cdi_spec_file_name(kept.uid)] and env.mig() == []


def test_recreated_claim_with_a_new_uid_releases_the_old(env: Env) -> None:
    (r,) = env.put(c := claim("a", vgpu(0)))
    env.preparer().prepare([r])
    c["metadata"]["uid"] = "new-uid"
    env.claims.put(c)
    assert reconcile(env.preparer()).released_claims == (r.uid,)
    assert env.cdi_files() == [] and env.claim_dirs() == []


def test_orphans_are_removed_and_foreign_files_and_admin_instances_kept(env: Env) -> None:
    admin = env.backend.create_mig_instance(gpu=env.inventory().gpus[2].uuid, profile_id=19, start=0)
    env.paths.cdi_dir.mkdir(parents=True)
    (env.paths.cdi_dir / "nvidia.com-gpu.yaml").write_text("cdiVersion: 0.6.0\n")
    (env.paths.cdi_dir / cdi_spec_file_name(ClaimUID("orphan"))).write_text("{}")
    (env.paths.cdi_dir / f".{cdi_spec_file_name(ClaimUID('x'))}.tmp-00ff").write_text("half")
    (env.paths.claims_dir / "orphan").mkdir(parents=True)
    (env.paths.claims_dir / ".orphan2.tmp-1234").mkdir()
    report = reconcile(env.preparer())
    assert [Path(p).name for p in report.removed_cdi_files] == [cdi_spec_file_name(ClaimUID("orphan"))]
    assert [Path(p).name for p in report.removed_claim_dirs] == ["orphan"]
    assert env.cdi_files() == ["nvidia.com-gpu.yaml"] and env.claim_dirs() == []
    assert [m.uuid for m in env.inventory().gpus[2].mig_instances] == [admin.uuid]
    assert report.removed_on_host_of(LeftoverKind.MIG_INSTANCE) == ()


def test_after_a_reboot_live_claims_get_their_files_back(env: Env) -> None:
    r = mixed(env)
    env.preparer(boot_id="boot-1").prepare([r])
    for f in env.paths.cdi_dir.iterdir():  # /var/run is a tmpfs
        f.unlink()
    report = reconcile(env.preparer(boot_id="boot-2"))
    assert report.boot_changed and report.rolled_forward == (r.uid,)
    assert_prepared(env, r.uid)
    assert env.checkpoint().boot_id == "boot-2"


def test_unreachable_claims_are_kept_and_reported(env: Env) -> None:
    r = mixed(env)
    env.preparer().prepare([r])
    env.claims.delete(namespace=r.namespace, name=r.name)
    bad = env.root / "claims" / r.namespace / f"{r.name}.yaml"  # the same claim, unparseable
    bad.write_text("kind: [unterminated")
    report = reconcile(env.preparer())
    assert report.kept_claims == (r.uid,) and report.released_claims == ()
    assert len(report.problems) == 1 and "kept" in report.problems[0]
    assert_prepared(env, r.uid)


def test_corrupt_checkpoint_is_set_aside(env: Env) -> None:
    env.paths.plugin_dir.mkdir(parents=True)
    env.paths.checkpoint_file.write_text('{"apiVersion": "checkpoint.tessera.dev/v1"')
    preparer = env.preparer()
    report = reconcile(preparer)
    assert report.checkpoint_set_aside is not None and Path(report.checkpoint_set_aside).exists()
    assert env.checkpoint().claims == {}
    (r,) = env.put(claim("a", vgpu(0)))
    assert preparer.prepare([r])[r.uid].error is None


def test_reconcile_twice_changes_nothing_the_second_time(env: Env) -> None:
    r = mixed(env)
    env.preparer().prepare([r])
    reconcile(env.preparer())
    second = reconcile(env.preparer())
    assert not second.removed_anything and second.kept_claims == (r.uid,) and second.rolled_forward == ()


def test_a_rebuilt_checkpoint_keeps_what_it_cannot_attribute_until_the_kubelet_names_it(env: Env) -> None:
    r = mixed(env)
    assert env.preparer().prepare([r])[r.uid].error is None
    admin = env.backend.create_mig_instance(gpu=env.inventory().gpus[2].uuid, profile_id=19, start=0)
    stray = ClaimUID("stray-1")  # a claim dir whose spec never got written (or was lost)
    (env.paths.claims_dir / stray).mkdir()
    (env.paths.claims_dir / stray / "limits").write_text("version 1\n")
    unmarked = ClaimUID("unmarked-2")  # a spec of ours that says nothing about its claim
    env.paths.cdi_spec_file(unmarked).write_text('{"cdiVersion": "0.6.0"}')
    env.paths.checkpoint_file.write_bytes(b"\x00" * 100)

    report = reconcile(env.preparer())
    recovery = report.recovery
    assert recovery is not None and report.checkpoint_set_aside == recovery.set_aside
    assert recovery.rebuilt == (r.uid,) and recovery.unattributed == (stray, unmarked)
    assert recovery.unaccounted_mig == (admin.uuid,)
    assert recovery.mig_mode_owned == (env.inventory().gpus[1].uuid,)
    assert stray in recovery.summary() and admin.uuid in recovery.summary()
    assert sorted(report.kept_claims) == sorted([r.uid, stray, unmarked])
    assert sum("owns them is unknown" in p for p in report.problems) == 2
    for _ in range(2):  # kept at every later start too, never taken for orphans
        assert env.claim_dirs() == sorted([r.uid, stray])
        assert cdi_spec_file_name(unmarked) in env.cdi_files()
        assert reconcile(env.preparer()).recovery is None

    # the kubelet names the claim: its unprepare settles it
    env.preparer().unprepare([ClaimRef(namespace="ns", name="stray", uid=stray)])
    env.preparer().unprepare([ClaimRef(namespace="ns", name="unmarked", uid=unmarked)])
    assert env.claim_dirs() == [r.uid] and env.cdi_files() == [cdi_spec_file_name(r.uid)]
    assert env.preparer().unprepare([r])[r.uid].error is None
    assert [m.uuid for m in env.inventory().gpus[2].mig_instances] == [admin.uuid]
    assert env.mig_modes() == [False, False, True]


def test_a_lost_checkpoint_entry_is_adopted_from_the_spec(env: Env) -> None:
    kept, gone = mixed(env, "kept"), env.put(claim("gone", vgpu(0)))[0]
    assert all(a.error is None for a in env.preparer().prepare([kept, gone]).values())
    env.paths.checkpoint_file.unlink()  # removed by hand
    env.claims.delete(namespace=gone.namespace, name=gone.name)
    report = reconcile(env.preparer())
    assert sorted(report.adopted_claims) == sorted([kept.uid, gone.uid]) and report.recovery is None
    assert report.released_claims == (gone.uid,) and report.kept_claims == (kept.uid,)
    assert_prepared(env, kept.uid)
    assert mig_records(env.checkpoint().claims[kept.uid])[0].created_by_tessera
    assert env.preparer().unprepare([kept])[kept.uid].error is None
    assert_clean(env)


def test_temp_files_under_our_names_are_swept_at_start_and_nothing_else(env: Env) -> None:
    """Issue #20, attack 5: a planted `.checkpoint.json.tmp-*` or `.limits.tmp-*` survived a restart."""
    (r,) = env.put(claim("a", vgpu(0)))
    assert env.preparer().prepare([r])[r.uid].error is None
    claim_dir, shared = env.paths.claim_dir(r.uid), env.paths.claim_dir(r.uid) / "shared"
    planted = [
        env.paths.plugin_dir / ".checkpoint.json.tmp-0badf00d",
        claim_dir / ".limits.tmp-0badf00d",
        shared / ".limits.tmp-0badf00d",
    ]
    for p in planted:
        p.write_text("planted")
    (shared / "work.tmp-1").write_text("the tenant's own")  # not a name of ours: the claim's to keep
    reconcile(env.preparer())
    assert env.claim_dirs() == [r.uid]
    end = time.monotonic() + 10  # the sweeper removes them in the background
    while [p for p in planted if p.exists()] and time.monotonic() < end:
        time.sleep(0.01)
    assert [p for p in planted if p.exists()] == []
    assert (shared / "work.tmp-1").read_text() == "the tenant's own"
    assert list(env.checkpoint().claims) == [r.uid]
