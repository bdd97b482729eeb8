"""Pod → claims → per-container CDI ids, as the kubelet resolves them; the pod runtime record round-trips."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from e2e.kubelet_standin.container_edits import ContainerConfig, DeviceNodeEdit, HookEdit, MountEdit
from e2e.kubelet_standin.errors import StandInError
from e2e.kubelet_standin.kubelet import RUN_ELSEWHERE_LABEL, runs_here
from e2e.kubelet_standin.plugins import choose_version
from e2e.kubelet_standin.pod_claims import (
    ClaimUse,
    PreparedDevice,
    cdi_ids_for,
    claim_is_ready,
    pod_claims,
)
from e2e.kubelet_standin.runtime_record import (
    PodRuntime,
    PreparedClaim,
    decode,
    encode,
    find_record,
    record_file_name,
    write_record,
)


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {
            "resourceClaims": [
                {"name": "shared", "resourceClaimName": "claim-a"},
                {"name": "tpl", "resourceClaimTemplateName": "t"},
                {"name": "skipped", "resourceClaimTemplateName": "t2"},
            ],
            "initContainers": [{"name": "init", "resources": {"claims": [{"name": "shared"}]}}],
            "containers": [
                {
                    "name": "a",
                    "resources": {"claims": [{"name": "tpl", "request": "gpu"}, {"name": "shared"}]},
                },
                {"name": "b"},
            ],
        },
        "status": status,
    }


def test_template_claims_wait_for_their_generated_names() -> None:
    assert pod_claims(pod()).pending == ("tpl", "skipped")
    resolved = pod_claims(
        pod(resourceClaimStatuses=[{"name": "tpl", "resourceClaimName": "p-tpl-x"}, {"name": "skipped"}])
    )
    assert resolved.pending == ()
    assert resolved.claim_names == ("claim-a", "p-tpl-x")
    assert resolved.containers["a"] == (ClaimUse("p-tpl-x", "gpu"), ClaimUse("claim-a", None))
    assert resolved.containers["init"] == (ClaimUse("claim-a", None),)
    assert resolved.containers["b"] == ()


def test_extended_resource_claim_maps_requests_to_containers() -> None:
    p = pod(
        resourceClaimStatuses=[{"name": "tpl", "resourceClaimName": "x"}, {"name": "skipped"}],
        extendedResourceClaimStatus={
            "resourceClaimName": "p-extended-resources-abc",
            "requestMappings": [
                {
                    "containerName": "b",
                    "resourceName": "gpu.tessera.dev/gpu",
                    "requestName": "container-1-request-0",
                }
            ],
        },
    )
    claims = pod_claims(p)
    assert claims.claim_names[-1] == "p-extended-resources-abc"
    assert claims.containers["b"] == (ClaimUse("p-extended-resources-abc", "container-1-request-0"),)


def test_container_gets_devices_of_its_request_including_subrequests() -> None:
    prepared = {
        "c": [
            PreparedDevice(("gpu/mig",), "pool", "gpu-0-mig-1g10gb-0", ("k/c=1",)),
            PreparedDevice(("other",), "pool", "gpu-1", ("k/c=2",)),
        ]
    }
    assert cdi_ids_for([ClaimUse("c", "gpu")], prepared) == ("k/c=1",)
    assert cdi_ids_for([ClaimUse("c", None)], prepared) == ("k/c=1", "k/c=2")
    assert cdi_ids_for([ClaimUse("missing", None)], prepared) == ()


def test_claim_ready_needs_allocation_and_reservation_for_this_pod() -> None:
    assert not claim_is_ready({"status": {}}, "u1")
    assert not claim_is_ready(
        {"status": {"allocation": {"devices": {}}, "reservedFor": [{"uid": "u2"}]}}, "u1"
    )
    assert claim_is_ready({"status": {"allocation": {"devices": {}}, "reservedFor": [{"uid": "u1"}]}}, "u1")


def test_version_negotiation_prefers_v1() -> None:
    assert choose_version(["v1beta1.DRAPlugin", "v1.DRAPlugin", "v1.DRAResourceHealth"]) == "v1"
    assert choose_version(["v1beta1.DRAPlugin"]) == "v1beta1"
    assert choose_version(["v1alpha3.DRAPlugin", "v1.DRAResourceHealth"]) is None


def sample_record() -> PodRuntime:
    return PodRuntime(
        node="n",
        namespace="ns",
        name="p",
        uid="u1",
        claims=(PreparedClaim("c", "cu", (PreparedDevice(("gpu",), "n", "gpu-0", ("k/c=x",), "s1"),)),),
        containers={
            "a": ContainerConfig(
                cdi_devices=("k/c=x",),
                env=(("A", "1"), ("B", "x=y")),
                mounts=(MountEdit("/h", "/c", "bind", ("ro", "bind")),),
                device_nodes=(
                    DeviceNodeEdit("/dev/nvidia0", "/dev/nvidia0", "c", 195, 0, "rw", 0o666, 0, 0),
                ),
                hooks=(HookEdit("createContainer", "/bin/hook", ("a",), ("E=1",), 5),),
            ),
            "b": ContainerConfig(error="failed"),
        },
    )


def test_runtime_record_round_trips_through_disk(tmp_path: Path) -> None:
    record = sample_record()
    assert decode(encode(record)) == record
    write_record(tmp_path, record)
    assert find_record(tmp_path, namespace="ns", name="p") == record
    assert find_record(tmp_path, namespace="ns", name="other") is None
    assert [p.name for p in tmp_path.iterdir()] == [record_file_name("ns", "p", "u1")]


def test_runtime_record_rejects_other_versions() -> None:
    raw = encode(sample_record())
    raw["apiVersion"] = "standin.e2e.tessera.dev/v0"
    with pytest.raises(StandInError, match="apiVersion"):
        decode(raw)
    raw = encode(sample_record())
    del raw["containers"]
    with pytest.raises(StandInError, match="malformed"):
        decode(raw)


def test_pods_labelled_run_elsewhere_are_left_alone() -> None:
    assert runs_here(pod())
    labelled = pod()
    labelled["metadata"]["labels"] = {RUN_ELSEWHERE_LABEL: "true"}
    assert not runs_here(labelled)
    labelled["metadata"]["labels"] = {RUN_ELSEWHERE_LABEL: "false"}
    assert runs_here(labelled)
