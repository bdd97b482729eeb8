"""Prepare defends a GPU the scheduler handed out twice (kubernetes/kubernetes#140806, a stale slice, a bug):
the second claim on a GPU whose exclusivity is held is refused with its own error, and nothing of the claim
already holding the GPU changes, over both backends, in one call or two, and through the daemon's socket."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.core.families import gpu as gpu_family
from dra_driver.core.families import mps as mps_family
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.record.results import ClaimRef
from tests.support.doubles.fake_mps import stop_mps_daemons
from tests.support.kubelet_client import DraClient
from tests.support.plugin_process import NODE, PluginProcess
from tests.support.prepare_env import BACKENDS, Env, backend_env, claim, result, vgpu
from tests.support.sample_claims import allocated_claim, claim_ref, vgpu_claim


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    # short: an MPS control socket's path must fit a unix socket address (108 bytes)
    root = Path(tempfile.mkdtemp(prefix="tpc-", dir="/tmp"))
    try:
        with backend_env(root, request.param) as e:
            yield e
            stop_mps_daemons(e.paths.family_dir(mps_family.NAME))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def mps(gpu: int) -> dict[str, Any]:
    return result(
        f"gpu-{gpu}-mps", shareID=os.urandom(4).hex(), consumedCapacity={"memory": "1Gi", "cores": "10"}
    )


def traces(env: Env, uid: ClaimUID) -> tuple[object, ...]:
    """Everything of a prepared claim on the node, to compare before and after."""
    spec = env.paths.cdi_spec_file(uid)
    limits = env.paths.claim_dir(uid) / "limits"
    return (
        spec.read_bytes(),
        spec.stat().st_mtime_ns,
        limits.read_bytes() if limits.exists() else None,
        env.checkpoint().claims[uid],
        env.mig(),
        env.mig_modes(),
    )


HELD = "claim ns/first prepared on this node holds device"
IN_MIG_MODE = "is in MIG mode, so it cannot be used as"  # the GPU's MIG mode, switched on for the first claim

# (held by the first claim, asked for by the second, what the refusal says): every pair of ways to use GPU 0
# that exclude each other
CONFLICTS = {
    "whole after vgpu": (vgpu(0), result("gpu-0"), HELD),
    "vgpu after whole": (result("gpu-0"), vgpu(0), HELD),
    "mig after vgpu": (vgpu(0), result("gpu-0-mig-1g10gb-0"), HELD),
    "mig after whole": (result("gpu-0"), result("gpu-0-mig-7g80gb-0"), HELD),
    "vgpu after mig": (result("gpu-0-mig-1g10gb-6"), vgpu(0), IN_MIG_MODE),
    "whole after mig": (result("gpu-0-mig-1g10gb-6"), result("gpu-0"), IN_MIG_MODE),
    "whole after mps": (mps(0), result("gpu-0"), HELD),
    "vgpu after mps": (mps(0), vgpu(0), HELD),
    "mps after vgpu": (vgpu(0), mps(0), HELD),
    "mig after mps": (mps(0), result("gpu-0-mig-1g10gb-3"), HELD),
    "mps after mig": (result("gpu-0-mig-3g40gb-4"), mps(0), IN_MIG_MODE),
}


@pytest.mark.parametrize("pair", CONFLICTS.values(), ids=CONFLICTS.keys())
def test_the_second_claim_on_a_held_gpu_is_refused_and_the_first_untouched(
    env: Env, pair: tuple[dict[str, Any], dict[str, Any], str]
) -> None:
    first, second = env.put(claim("first", pair[0]), claim("second", pair[1]))
    preparer = env.preparer()
    assert preparer.prepare([first])[first.uid].error is None
    before = traces(env, first.uid)

    answer = preparer.prepare([second])[second.uid]
    assert answer.error is not None and answer.devices == ()
    assert pair[2] in answer.error
    assert env.has_traces_of(second.uid) == []
    assert traces(env, first.uid) == before
    # a daemon started afresh on the same checkpoint refuses it the same way
    assert env.preparer().prepare([second])[second.uid].error == answer.error

    # once the first claim is gone the second is prepared
    assert preparer.unprepare([first])[first.uid].error is None
    assert preparer.prepare([second])[second.uid].error is None


def test_in_one_call_the_first_claim_wins_and_the_rest_of_the_call_goes_on(env: Env) -> None:
    shared, whole, other = env.put(
        claim("shared", vgpu(1)), claim("whole", result("gpu-1")), claim("other", result("gpu-0"))
    )
    answers = env.preparer().prepare([shared, whole, other])
    assert answers[shared.uid].error is None and answers[other.uid].error is None
    assert "claim ns/shared prepared on this node holds device gpu-1-vgpu" in str(answers[whole.uid].error)
    assert env.has_traces_of(whole.uid) == []


def test_one_claim_with_two_devices_that_exclude_each_other_is_refused(env: Env) -> None:
    (both,) = env.put(claim("both", vgpu(1, request="a"), result("gpu-1", request="b")))
    error = env.preparer().prepare([both])[both.uid].error
    assert error is not None and "of the same claim" in error
    assert env.has_traces_of(both.uid) == []


def test_shares_of_one_gpu_and_disjoint_placements_are_prepared(env: Env) -> None:
    refs = env.put(
        claim("a", vgpu(0)),
        claim("b", vgpu(0)),
        claim("c", result("gpu-1-mig-3g40gb-0")),
        claim("d", result("gpu-1-mig-1g10gb-4")),
    )
    answers = env.preparer().prepare(refs)
    assert {r.name: answers[r.uid].error for r in refs} == dict.fromkeys("abcd")


def test_the_daemon_refuses_a_whole_gpu_while_a_vgpu_share_of_it_is_prepared(plugin: PluginProcess) -> None:
    shared = vgpu_claim("shared", pool=NODE, gpu=0)
    whole = allocated_claim("whole", device="gpu-0", family=gpu_family.NAME, pool=NODE)
    for c in (shared, whole):
        plugin.claims.put(c)
    refs: list[ClaimRef] = [claim_ref(shared), claim_ref(whole)]
    with DraClient(plugin.paths.dra_socket) as client:
        assert client.prepare(refs[:1]).claims[refs[0].uid].error == ""
        spec = plugin.paths.cdi_spec_file(refs[0].uid).read_bytes()
        refused = client.prepare(refs[1:]).claims[refs[1].uid]
        assert refused.error.startswith("device gpu-0 (request gpu) is a whole GPU on GPU 0, but claim ")
        assert list(refused.devices) == []
        assert not plugin.paths.cdi_spec_file(refs[1].uid).exists()
        assert plugin.paths.cdi_spec_file(refs[0].uid).read_bytes() == spec
        assert client.unprepare(refs[:1]).claims[refs[0].uid].error == ""
        assert client.prepare(refs[1:]).claims[refs[1].uid].error == ""
        assert client.unprepare(refs[1:]).claims[refs[1].uid].error == ""
