"""A broken disk against the real daemon: an unreadable checkpoint is rebuilt from the node, never wiped.

Three live claims (a vgpu share, a MIG instance Tessera created with MIG mode switched on for it, and a
claim deleted from the API while the daemon was down) are prepared, the daemon is killed, its checkpoint is
damaged, and the daemon restarted: it must come up, keep every live claim's files byte for byte, still know
the MIG instance is Tessera's (unprepare destroys it and switches MIG mode off again), release the deleted
claim, keep the bad file aside and say so in its log. A checkpoint of a newer version stops start-up instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dra_driver.backends import open_backend
from dra_driver.core.families import mig as mig_family
from kubelet_plugin.record.checkpoint import ClaimState
from kubelet_plugin.record.checkpoint_store import CheckpointStore
from kubelet_plugin.record.results import ClaimRef
from tests.support.kubelet_client import DraClient
from tests.support.plugin_process import NODE, NODE_FILE, PluginProcess, cleanup, node_state
from tests.support.prepare_env import mig_records
from tests.support.sample_claims import allocated_claim, claim_ref, vgpu_claim

pytestmark = pytest.mark.timeout(90)


def prepare_three(p: PluginProcess) -> tuple[ClaimRef, ClaimRef, ClaimRef]:
    claims = [
        vgpu_claim("shared", pool=NODE, gpu=0, memory="8Gi", cores="25"),
        allocated_claim("mig", device="gpu-1-mig-3g40gb-4", family=mig_family.NAME, pool=NODE),
        vgpu_claim("deleted", pool=NODE, gpu=2),
    ]
    refs = []
    for c in claims:
        p.claims.put(c)
        refs.append(claim_ref(c))
    with DraClient(p.paths.dra_socket) as client:
        answers = client.prepare(refs)
    assert all(answers.claims[r.uid].error == "" for r in refs)
    return refs[0], refs[1], refs[2]


def files_of(p: PluginProcess, ref: ClaimRef) -> dict[str, bytes]:
    out = {"spec": p.paths.cdi_spec_file(ref.uid).read_bytes()}
    claim_dir = p.paths.claim_dir(ref.uid)
    if claim_dir.exists():
        files = [f for d in (claim_dir, claim_dir / "shared") if d.is_dir() for f in sorted(d.iterdir())]
        out.update({f"dir/{f.relative_to(claim_dir)}": f.read_bytes() for f in files if f.is_file()})
    return out


def untouched(p: PluginProcess) -> tuple[object, ...]:
    """Everything start-up could change, read without the checkpoint's own decoder."""
    backend = open_backend(simulate=NODE_FILE, state_file=p.sim_state)
    try:
        gpus = backend.inventory().gpus
    finally:
        backend.close()
    return (
        {f.name: f.read_bytes() for f in p.paths.cdi_dir.iterdir()},
        {d.name: sorted(os.listdir(d)) for d in p.paths.claims_dir.iterdir()},
        p.paths.checkpoint_file.read_bytes(),
        [(g.mig_enabled, [m.uuid for m in g.mig_instances]) for g in gpus],
    )


def damage(path: Path, how: str) -> bytes | None:
    good = path.read_bytes()
    if how == "garbage":
        path.write_bytes(os.urandom(4096))
    elif how == "truncated":
        path.write_bytes(good[: len(good) // 2])
    else:  # a read error: the path can no longer be read as a file
        path.unlink()
        path.mkdir()
        return None
    return path.read_bytes()


@pytest.mark.parametrize("how", ["garbage", "truncated", "read-error"])
def test_an_unreadable_checkpoint_is_rebuilt_and_no_live_claim_loses_its_files(root: Path, how: str) -> None:
    p = PluginProcess(root=root).start()
    try:
        shared, mig, deleted = prepare_three(p)
        kept = {r.uid: files_of(p, r) for r in (shared, mig)}
        p.kill()
        p.claims.delete(namespace=deleted.namespace, name=deleted.name)
        bad = damage(p.paths.checkpoint_file, how)

        p.start()
        assert "checkpoint rebuilt from the node" in p.log()
        asides = sorted(p.paths.plugin_dir.glob("checkpoint.json.unreadable-*"))
        assert len(asides) == 1
        if bad is not None:
            assert asides[0].read_bytes() == bad, "the unreadable file is kept as it was"
        assert {r.uid: files_of(p, r) for r in (shared, mig)} == kept
        cdi, dirs, entries, instances, modes = node_state(p)
        assert sorted(entries) == sorted([shared.uid, mig.uid]), "the deleted claim was released"
        assert dirs == [shared.uid] and instances == [(1, 4)] and modes[1]
        cp = CheckpointStore(path=p.paths.checkpoint_file).load(boot_id="-")
        assert {e.state for e in cp.claims.values()} == {ClaimState.PREPARE_COMPLETED}
        assert mig_records(cp.claims[mig.uid])[0].created_by_tessera

        with DraClient(p.paths.dra_socket) as client:
            again = client.prepare([shared, mig])  # the same answers, from the rebuilt record
            assert all(again.claims[r.uid].error == "" and again.claims[r.uid].devices for r in (shared, mig))
            assert client.unprepare([shared, mig]).claims[mig.uid].error == ""
        cdi, dirs, entries, instances, modes = node_state(p)
        assert (cdi, dirs, entries, instances) == ([], [], [], [])
        assert not modes[1], "Tessera still knows it switched MIG mode on, and switches it off again"
    finally:
        cleanup([p], root)


def test_a_checkpoint_of_a_newer_version_stops_start_up_and_changes_nothing(root: Path) -> None:
    p = PluginProcess(root=root).start()
    try:
        prepare_three(p)
        p.kill()
        doc = json.loads(p.paths.checkpoint_file.read_bytes())
        doc["apiVersion"] = "checkpoint.tessera.dev/v2"
        p.paths.checkpoint_file.write_text(json.dumps(doc))
        before = untouched(p)

        p.start(wait=False)
        assert p.wait_exit(30) == 1
        log = p.log()
        assert "checkpoint.tessera.dev/v2" in log and "newer" in log and "leaves the node as it is" in log
        assert untouched(p) == before
        assert not list(p.paths.plugin_dir.glob("checkpoint.json.unreadable-*"))
    finally:
        cleanup([p], root)
