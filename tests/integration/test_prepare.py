"""Preparer over the simulated backend and a claim directory: CDI files, claim dirs, checkpoint, MIG state."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core.families import mig as mig_family
from dra_driver.libtessera.names import LIMITS_FILE_NAME
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.library_files.gpu_view import GpuView
from kubelet_plugin.record.checkpoint import ClaimState
from kubelet_plugin.record.results import ClaimRef
from kubelet_plugin.record.steps import Step
from tests.support.faults import Faults
from tests.support.prepare_env import (
    BACKENDS,
    POOL,
    Env,
    backend_env,
    claim,
    mig_records,
    opaque,
    result,
    vgpu,
)


@pytest.fixture(params=BACKENDS)
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Env]:
    with backend_env(tmp_path, request.param) as e:
        yield e


def spec_of(env: Env, uid: str) -> Any:
    return json.loads(env.paths.cdi_spec_file(ClaimUID(uid)).read_text())


def test_all_three_families_in_one_call(env: Env) -> None:
    whole = claim("whole", result("gpu-0"))
    shared = claim(
        "shared",
        vgpu(1, memory="20Gi", cores="30"),
        configs=[opaque("VgpuConfig", source="FromClass", priority=0)],
    )
    mig = claim("mig", result("gpu-2-mig-1g10gb-6"))
    refs = env.put(whole, shared, mig)
    answers = env.preparer().prepare(refs)

    assert all(a.error is None for a in answers.values()), answers
    w, s, m = (answers[r.uid] for r in refs)
    assert [(d.device_name, d.pool_name, d.request_names) for d in w.devices] == [("gpu-0", POOL, ("gpu",))]
    assert w.devices[0].cdi_device_ids == (f"k8s.gpu.tessera.dev/claim={refs[0].uid}-gpu-0",)
    share_id = shared["status"]["allocation"]["devices"]["results"][0]["shareID"]
    assert s.devices[0].share_id == share_id
    assert s.devices[0].cdi_device_ids == (f"k8s.gpu.tessera.dev/claim={refs[1].uid}-gpu-1-vgpu-{share_id}",)

    # every answered CDI id names a device in the claim's spec file
    for r, a in zip(refs, (w, s, m), strict=True):
        spec = spec_of(env, r.uid)
        names = {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
        assert {i for d in a.devices for i in d.cdi_device_ids} == names

    gpu1 = env.inventory().gpus[1]
    limits = (env.paths.claim_dir(refs[1].uid) / LIMITS_FILE_NAME).read_text()
    assert limits == (
        f"version 1\npolicy default\nloglevel 1\ngpu {gpu1.uuid} memory {20 << 30} cores 30 priority 0 "
        f"slot 1 view /var/run/tessera/gpus/{gpu1.uuid}/view\n"
    )
    # the GPU's view holds the claim's part of the frame: high priority has none, so it is empty
    view = GpuView(env.paths.gpus_dir / gpu1.uuid / "view")
    assert view.read_schedule() == (50_000, ())
    view.close()
    assert env.claim_dirs() == [refs[1].uid]

    (inst,) = env.inventory().gpus[2].mig_instances
    assert (inst.profile_name, inst.start) == ("1g.10gb", 6)
    mig_edits = spec_of(env, refs[2].uid)
    assert f"CUDA_VISIBLE_DEVICES={inst.uuid}" in mig_edits["containerEdits"]["env"]
    assert [n["path"] for n in mig_edits["devices"][0]["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia2",
        *(n.path for n in inst.device_nodes),
    ]

    cp = env.checkpoint()
    assert {u: e.state for u, e in cp.claims.items()} == {r.uid: ClaimState.PREPARE_COMPLETED for r in refs}
    assert mig_records(cp.claims[refs[2].uid])[0].uuid == inst.uuid and cp.boot_id == "boot-1"


def test_prepare_is_idempotent_and_touches_nothing(env: Env) -> None:
    refs = env.put(claim("a", vgpu(0)), claim("b", result("gpu-1-mig-3g40gb-0")))
    preparer = env.preparer()
    first = preparer.prepare(refs)

    def written() -> list[tuple[int, int, int, int]]:
        # what a rewrite changes (a read may move the access time: relatime, a second boundary)
        found = [env.paths.cdi_spec_file(r.uid).stat() for r in refs]
        return [(s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns) for s in found]

    stats = written()
    mig = env.mig()
    # a new process with the same checkpoint answers the same, without reading the claims again
    for r in refs:
        env.claims.delete(namespace=r.namespace, name=r.name)
    again = env.preparer().prepare(refs)
    assert again == first
    assert written() == stats
    assert env.mig() == mig == [(1, "3g.40gb", 0)]


def test_unprepare_removes_everything_and_is_idempotent(env: Env) -> None:
    refs = env.put(
        claim("a", vgpu(0)),
        claim("b", result("gpu-1-mig-3g40gb-4")),
        claim("c", result("gpu-2-mig-7g80gb-0")),
    )
    preparer = env.preparer()
    assert all(a.error is None for a in preparer.prepare(refs).values())
    assert env.mig_modes() == [False, True, True]
    unknown = ClaimRef(namespace="ns", name="never", uid=ClaimUID("never-prepared"))
    for _ in range(2):
        answers = preparer.unprepare([*refs, unknown])
        assert {u: a.error for u, a in answers.items()} == {r.uid: None for r in [*refs, unknown]}
        assert (env.cdi_files(), env.claim_dirs(), dict(env.checkpoint().claims), env.mig()) == (
            [],
            [],
            {},
            [],
        )
        # Tessera switched GPU 1's MIG mode on and off again; GPU 2's mode belongs to the administrator
        assert env.mig_modes() == [False, False, True]


def test_mig_mode_stays_on_until_the_last_tessera_instance(env: Env) -> None:
    a, b = env.put(claim("a", result("gpu-0-mig-1g10gb-0")), claim("b", result("gpu-0-mig-1g10gb-1")))
    preparer = env.preparer()
    assert preparer.prepare([a])[a.uid].error is None
    assert preparer.prepare([b])[b.uid].error is None
    assert env.checkpoint().owned_by(mig_family.NAME) == {env.inventory().gpus[0].uuid}
    preparer.unprepare([a])
    assert env.mig_modes()[0] and env.mig() == [(0, "1g.10gb", 1)]
    preparer.unprepare([b])
    assert not env.mig_modes()[0] and env.checkpoint().owned_by(mig_family.NAME) == frozenset()


def test_many_claims_in_one_call(env: Env) -> None:
    claims = [claim(f"v{i}", vgpu(i % 2, memory="1Gi", cores="5")) for i in range(40)]
    claims += [claim(f"m{i}", result(f"gpu-2-mig-1g10gb-{i}")) for i in range(7)]
    refs = env.put(*claims)
    preparer = env.preparer()
    answers = preparer.prepare(refs)
    assert [a.error for a in answers.values()] == [None] * len(refs)
    assert len(env.cdi_files()) == len(refs) and len(env.claim_dirs()) == 40
    assert len(env.mig()) == 7
    assert all(a.error is None for a in preparer.unprepare(refs).values())
    assert (env.cdi_files(), env.claim_dirs(), env.mig()) == ([], [], [])


def test_the_same_claim_twice_in_one_call_gets_one_answer(env: Env) -> None:
    (r,) = env.put(claim("a", vgpu(0)))
    answers = env.preparer().prepare([r, r])
    assert list(answers) == [r.uid] and answers[r.uid].error is None


def test_bad_input_fails_only_its_own_claim_and_leaves_nothing(env: Env) -> None:
    # an administrator's instance on GPU 2 takes slices 4-7
    admin = env.backend.create_mig_instance(gpu=env.inventory().gpus[2].uuid, profile_id=9, start=4)
    good = claim("good", vgpu(0), result("gpu-2-mig-1g10gb-0", request="mig"))
    missing = claim("missing", result("gpu-1"))
    renamed = claim("renamed", result("gpu-1"))
    table = {
        "missing": (missing, "ResourceClaim ns/missing not found"),
        "renamed": (renamed, "has UID"),
        "other-driver": (
            claim("other-driver", result("nic-0", driver="net.example.com")),
            "no allocation results for driver gpu.tessera.dev",
        ),
        "other-node": (
            claim("other-node", result("gpu-1", pool="node-b")),
            "pool 'node-b', but this node's pool is 'node-a'",
        ),
        "unknown-field": (
            claim("unknown-field", vgpu(1), configs=[opaque("VgpuConfig", smLimitPolcy="force")]),
            "opaque.parameters.smLimitPolcy: unknown field in VgpuConfig",
        ),
        "wrong-type": (
            claim("wrong-type", vgpu(1), configs=[opaque("VgpuConfig", priority="high")]),
            ".priority: must be an integer",
        ),
        "over-capacity": (claim("over-capacity", vgpu(1, memory="200Gi")), "outside the device's policy"),
        "placement-taken": (
            claim("placement-taken", result("gpu-2-mig-1g10gb-5")),
            f"overlaps instance 3g.40gb@4 ({admin.uuid}) created by an administrator",
        ),
        "disk-full": (
            claim("disk-full", vgpu(1), result("gpu-2-mig-2g20gb-2", request="mig")),
            "No space left on device",
        ),
    }
    env.put(*(c for name, (c, _) in table.items() if name != "missing"), good)
    refs = {
        name: ClaimRef(namespace="ns", name=name, uid=c["metadata"]["uid"]) for name, (c, _) in table.items()
    }
    refs["renamed"] = ClaimRef(namespace="ns", name="renamed", uid=ClaimUID("stale-uid"))
    good_ref = ClaimRef(namespace="ns", name="good", uid=good["metadata"]["uid"])
    faults = Faults(disk_full_cdi=True, claim=refs["disk-full"].uid)

    answers = env.preparer(faults=faults).prepare([*refs.values(), good_ref])

    assert answers[good_ref.uid].error is None
    assert len(answers[good_ref.uid].devices) == 2
    for name, (_, needle) in table.items():
        error = answers[refs[name].uid].error
        assert error is not None and needle in error, (name, error)
        assert answers[refs[name].uid].devices == ()
        assert env.has_traces_of(refs[name].uid) == [], name
    # the disk-full claim had created a claim dir and a MIG instance before the CDI write failed: rolled back
    assert sorted(env.mig()) == [(2, "1g.10gb", 0), (2, "3g.40gb", 4)]
    assert env.claim_dirs() == [good_ref.uid]
    assert not [f for f in env.paths.cdi_dir.iterdir() if f.name.startswith(".")]
    assert list(env.checkpoint().claims) == [good_ref.uid]


def test_a_placement_held_by_another_claim(env: Env) -> None:
    a, b = env.put(claim("a", result("gpu-0-mig-3g40gb-0")), claim("b", result("gpu-0-mig-3g40gb-0")))
    preparer = env.preparer()
    assert preparer.prepare([a])[a.uid].error is None
    error = preparer.prepare([b])[b.uid].error
    assert error is not None and "held by another prepared claim" in error
    assert env.has_traces_of(b.uid) == [] and env.mig() == [(0, "3g.40gb", 0)]


def test_admin_instance_is_used_in_place_and_never_destroyed(env: Env) -> None:
    admin = env.backend.create_mig_instance(gpu=env.inventory().gpus[2].uuid, profile_id=9, start=0)
    (r,) = env.put(claim("static", result("gpu-2-mig-3g40gb-0")))
    preparer = env.preparer()
    assert preparer.prepare([r])[r.uid].error is None
    assert f"CUDA_VISIBLE_DEVICES={admin.uuid}" in spec_of(env, r.uid)["containerEdits"]["env"]
    assert preparer.unprepare([r])[r.uid].error is None
    assert env.mig() == [(2, "3g.40gb", 0)] and env.cdi_files() == []


def test_roll_forward_reuses_the_instance_already_created(env: Env) -> None:
    class Crash(BaseException):
        pass

    def crash() -> None:
        raise Crash

    (r,) = env.put(claim("a", vgpu(0), result("gpu-1-mig-4g40gb-0", request="mig")))
    with pytest.raises(Crash):
        env.preparer(faults=Faults(kill_at=frozenset({Step.AFTER_CLAIMDIR}), die=crash)).prepare([r])
    assert env.checkpoint().claims[r.uid].state is ClaimState.PREPARE_STARTED
    (before,) = env.inventory().gpus[1].mig_instances
    assert env.preparer().prepare([r])[r.uid].error is None
    (after,) = env.inventory().gpus[1].mig_instances
    assert after.uuid == before.uuid
    assert mig_records(env.checkpoint().claims[r.uid])[0].uuid == before.uuid


def test_unreadable_checkpoint_fails_every_claim_but_touches_nothing(env: Env) -> None:
    (r,) = env.put(claim("a", vgpu(0)))
    env.paths.plugin_dir.mkdir(parents=True)
    env.paths.checkpoint_file.write_text("{garbage")
    answers = env.preparer().prepare([r])
    error = answers[r.uid].error
    assert error is not None and "corrupt" in error
    assert env.cdi_files() == [] and env.claim_dirs() == []


def test_damaged_files_of_a_prepared_claim_are_repaired_never_torn_down(env: Env) -> None:
    (r,) = env.put(claim("both", vgpu(0), result("gpu-1-mig-3g40gb-4", request="mig")))
    first = env.preparer().prepare([r])[r.uid]
    assert first.error is None
    spec = env.paths.cdi_spec_file(r.uid)
    good = spec.read_bytes()
    spec.write_bytes(good[: len(good) // 3])
    mig = env.mig()
    # the repair fails (disk full): the claim's MIG instance and directory stay for its running containers
    failing = env.preparer(faults=Faults(disk_full_cdi=True))
    error = failing.prepare([r])[r.uid].error
    assert error is not None and error.startswith("repairing the claim's files")
    assert env.mig() == mig and env.claim_dirs() == [r.uid]
    again = env.preparer().prepare([r])[r.uid]
    assert again == first and env.mig() == mig
    assert json.loads(spec.read_bytes()) == json.loads(good)
