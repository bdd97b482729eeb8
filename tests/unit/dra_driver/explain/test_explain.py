from pathlib import Path
from typing import Any

import pytest

from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.explain.catalog import allocations_of, build_catalog
from dra_driver.explain.explain import explain_claim
from dra_driver.explain.request import parse_claim, parse_device_class
from dra_driver.explain.sources import REPO_DEVICECLASSES, load_files
from dra_driver.explain.verdict import ClaimVerdict, ReasonKind, RequestVerdict, render
from dra_driver.vocabulary.errors import ConfigError
from tests.support.slicegen import NODE, allocated_claim, claim, exactly, node_slices

CLASSES = {c.name: c for c in map(parse_device_class, load_files([REPO_DEVICECLASSES]).classes)}
PRODUCT = 'device.attributes["gpu.tessera.dev"].productName'
H100X8 = Path(__file__).resolve().parents[4] / "e2e" / "nodes" / "h100x8.yaml"


def run(raw_claim: dict[str, Any], *existing: dict[str, Any], gpus: int = 2, shares: int = 2) -> ClaimVerdict:
    return explain_claim(
        claim=parse_claim(raw_claim),
        classes=CLASSES,
        catalog=build_catalog(node_slices(gpus, shares=shares), node=NODE),
        allocations=allocations_of(existing),
        node=NODE,
    )


def reason(request: RequestVerdict, device: str) -> tuple[ReasonKind | None, str]:
    v = next(d for d in request.devices if d.device == f"{NODE}/{device}")
    return (v.reason.kind, v.reason.message) if v.reason else (None, "")


def vgpu(name: str = "gpu", memory: str = "20Gi", cores: str = "50", **kw: Any) -> dict[str, Any]:
    return exactly(name, "vgpu.tessera.dev", capacity={"requests": {"memory": memory, "cores": cores}}, **kw)


def test_vgpu_request_fits_first_vgpu_device_and_class_refuses_the_rest() -> None:
    v = run(claim(vgpu()))
    assert v.satisfiable and not v.errors
    (r,) = v.requests
    assert r.allocated == (f"{NODE}/gpu-0-vgpu",)
    kind, message = reason(r, "gpu-0")
    assert kind is ReasonKind.CLASS_SELECTOR and "DeviceClass vgpu.tessera.dev selector #0" in message
    assert reason(r, "gpu-1-vgpu") == (None, "")


def test_claim_selector_false_names_the_selector() -> None:
    v = run(claim(vgpu(selectors=(f'{PRODUCT}.startsWith("NVIDIA A100")',))))
    assert not v.satisfiable
    kind, message = reason(v.requests[0], "gpu-0-vgpu")
    assert kind is ReasonKind.CLAIM_SELECTOR
    assert "request gpu selector #0" in message and "A100" in message
    assert "needs 1 device(s), 0 fit" in v.requests[0].problem


def test_capacity_request_outside_policy() -> None:
    v = run(claim(vgpu(memory="100Gi")))
    assert not v.satisfiable
    kind, message = reason(v.requests[0], "gpu-1-vgpu")
    assert kind is ReasonKind.CAPACITY_POLICY and "memory" in message and "80Gi" in message


def test_capacity_keys_match_the_published_spelling_exactly() -> None:
    # kube-scheduler does not qualify request keys: `gpu.tessera.dev/memory` is not the published `memory`.
    qualified_keys = exactly(
        "gpu", "vgpu.tessera.dev", capacity={"requests": {"gpu.tessera.dev/memory": "20Gi", "cores": "50"}}
    )
    v = run(claim(qualified_keys))
    assert not v.satisfiable
    kind, message = reason(v.requests[0], "gpu-0-vgpu")
    assert kind is ReasonKind.CAPACITY_POLICY and "'gpu.tessera.dev/memory'" in message


def test_whole_gpu_in_use_blocks_its_vgpu_through_counters() -> None:
    v = run(claim(vgpu()), allocated_claim("other", ("gpu-0", {})))
    assert v.satisfiable
    r = v.requests[0]
    assert r.allocated == (f"{NODE}/gpu-1-vgpu",)
    kind, message = reason(r, "gpu-0-vgpu")
    assert kind is ReasonKind.COUNTER_EXHAUSTED and "gpu-0-counters/memory-slice-0" in message


def test_exclusive_device_in_use_names_the_holder() -> None:
    v = run(claim(exactly("g", "gpu.tessera.dev")), allocated_claim("other", ("gpu-0", {})))
    kind, message = reason(v.requests[0], "gpu-0")
    assert kind is ReasonKind.ALREADY_ALLOCATED and "default/other" in message
    assert v.requests[0].allocated == (f"{NODE}/gpu-1",)


def test_shares_exhausted_and_memory_exhausted() -> None:
    full = allocated_claim(
        "a",
        ("gpu-0-vgpu", {"memory": "10Gi", "cores": "0", "shares": "1"}),
        ("gpu-0-vgpu", {"memory": "10Gi", "cores": "0", "shares": "1"}),
    )
    v = run(claim(vgpu()), full, gpus=1)
    assert not v.satisfiable
    kind, message = reason(v.requests[0], "gpu-0-vgpu")
    assert kind is ReasonKind.SHARES_EXHAUSTED and "0 of 2 left" in message
    big = allocated_claim("b", ("gpu-0-vgpu", {"memory": "70Gi", "cores": "0", "shares": "1"}))
    v = run(claim(vgpu()), big, gpus=1, shares=10)
    kind, message = reason(v.requests[0], "gpu-0-vgpu")
    assert kind is ReasonKind.CAPACITY_EXHAUSTED and "memory: needs 20Gi, 10Gi of 80Gi left" in message


def test_live_vgpu_allocation_blocks_mig_and_whole_gpu() -> None:
    busy = allocated_claim("a", ("gpu-0-vgpu", {"memory": "10Gi", "cores": "0", "shares": "1"}))
    v = run(claim(exactly("m", "mig.tessera.dev")), busy, gpus=1)
    assert not v.satisfiable
    assert reason(v.requests[0], "gpu-0-mig-1g10gb-3")[0] is ReasonKind.COUNTER_EXHAUSTED
    # ...while a second vgpu claim still shares the device (its counters were taken once).
    assert run(claim(vgpu()), busy, gpus=1).satisfiable


def test_mig_placements_and_counters_across_requests_of_one_claim() -> None:
    v = run(
        claim(exactly("small", "mig-1g.10gb.gpu.tessera.dev"), exactly("big", "mig-7g.80gb.gpu.tessera.dev")),
        gpus=1,
    )
    assert not v.satisfiable
    small, big = v.requests
    assert small.allocated == (f"{NODE}/gpu-0-mig-1g10gb-0",)
    kind, message = reason(big, "gpu-0-mig-7g80gb-0")
    assert kind is ReasonKind.COUNTER_EXHAUSTED and "memory-slice-0" in message
    assert run(
        claim(exactly("small", "mig-1g.10gb.gpu.tessera.dev"), exactly("big", "mig-7g.80gb.gpu.tessera.dev")),
        gpus=2,
    ).satisfiable


def test_exact_count_and_backtracking() -> None:
    v = run(claim(exactly("g", "gpu.tessera.dev", count=2)))
    assert v.requests[0].allocated == (f"{NODE}/gpu-0", f"{NODE}/gpu-1")
    v = run(claim(exactly("g", "gpu.tessera.dev", count=3)))
    assert not v.satisfiable and "needs 3 device(s), 2 fit" in v.requests[0].problem


def test_allocation_mode_all() -> None:
    v = run(claim(exactly("g", "gpu.tessera.dev", allocationMode="All")))
    assert v.satisfiable and len(v.requests[0].allocated) == 2
    v = run(claim(exactly("g", "gpu.tessera.dev", allocationMode="All")), allocated_claim("o", ("gpu-1", {})))
    assert not v.satisfiable and "every matching device" in v.requests[0].problem


def test_first_available_falls_back_to_the_next_subrequest() -> None:
    raw = claim(
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "whole", "deviceClassName": "gpu.tessera.dev", "count": 3},
                {
                    "name": "slice",
                    "deviceClassName": "vgpu.tessera.dev",
                    "capacity": {"requests": {"memory": "8Gi"}},
                },
            ],
        }
    )
    v = run(raw)
    assert v.satisfiable
    whole, sl = v.requests
    assert whole.request == "gpu/whole" and not whole.satisfied
    assert sl.request == "gpu/slice" and sl.allocated == (f"{NODE}/gpu-0-vgpu",)


def test_match_and_distinct_attribute_constraints() -> None:
    two = (vgpu("a", memory="50Gi"), vgpu("b", memory="50Gi"))
    same = run(claim(*two, constraints=[{"matchAttribute": "gpu.tessera.dev/uuid"}]))
    assert not same.satisfiable
    kind, message = reason(same.requests[1], "gpu-1-vgpu")
    assert kind is ReasonKind.CONSTRAINT and "matchAttribute gpu.tessera.dev/uuid" in message
    distinct = run(claim(vgpu("a"), vgpu("b"), constraints=[{"distinctAttribute": "gpu.tessera.dev/uuid"}]))
    assert distinct.satisfiable
    assert [r.allocated for r in distinct.requests] == [(f"{NODE}/gpu-0-vgpu",), (f"{NODE}/gpu-1-vgpu",)]


def test_selector_runtime_error_is_reported_as_the_scheduler_does() -> None:
    v = run(claim(vgpu(selectors=('device.attributes["gpu.tessera.dev"].model == "x"',))))
    assert not v.satisfiable
    assert any("CEL runtime error" in e and "model" in e for e in v.errors)


def test_cel_the_api_server_rejects_and_unknown_class() -> None:
    v = run(claim(vgpu(selectors=("device.driver ==",)), exactly("x", "nope.example.com")))
    assert not v.satisfiable
    assert any("CEL rejected by the API server: syntax error" in e for e in v.errors)
    assert any("DeviceClass nope.example.com does not exist" in e for e in v.errors)


def test_taints_need_tolerations() -> None:
    slices = node_slices(1)
    slices[1]["spec"]["devices"][0]["taints"] = [{"key": "gpu.tessera.dev/unhealthy", "effect": "NoSchedule"}]
    catalog = build_catalog(slices, node=NODE)
    plain = explain_claim(
        claim=parse_claim(claim(exactly("g", "gpu.tessera.dev"))),
        classes=CLASSES,
        catalog=catalog,
        allocations=(),
        node=NODE,
    )
    assert reason(plain.requests[0], "gpu-0")[0] is ReasonKind.TAINTED
    tolerant = claim(
        exactly(
            "g", "gpu.tessera.dev", tolerations=[{"key": "gpu.tessera.dev/unhealthy", "operator": "Exists"}]
        )
    )
    assert explain_claim(
        claim=parse_claim(tolerant), classes=CLASSES, catalog=catalog, allocations=(), node=NODE
    ).satisfiable


def test_own_allocation_is_ignored_and_other_nodes_slices_too() -> None:
    mine = allocated_claim("c", ("gpu-0", {}))  # the claim being explained, already allocated
    v = explain_claim(
        claim=parse_claim(claim(exactly("g", "gpu.tessera.dev"))),
        classes=CLASSES,
        catalog=build_catalog(node_slices(1) + node_slices(1, node="node-b"), node=NODE),
        allocations=allocations_of([mine], skip="default/c"),
        node=NODE,
    )
    assert v.satisfiable and v.requests[0].allocated == (f"{NODE}/gpu-0",)
    assert all(d.device.startswith(f"{NODE}/") for d in v.requests[0].devices)


def test_render_folds_other_classes_and_json_round_trips() -> None:
    v = run(claim(vgpu(selectors=(f'{PRODUCT}.startsWith("NVIDIA A100")',))))
    text = render(v)
    assert "cannot be allocated" in text and "[claim-selector]" in text and "not shown" in text
    assert "[class-selector]" in render(v, verbose=True)
    d = v.to_dict()
    assert d["satisfiable"] is False and d["requests"][0]["devices"][0]["fits"] is False


@pytest.mark.parametrize(
    "bad",
    [
        {"name": "x", "exactly": {}},
        {"name": "x", "exactly": {"deviceClassName": "gpu.tessera.dev", "count": 0}},
        {"name": "x", "exactly": {"deviceClassName": "gpu.tessera.dev", "allocationMode": "Some"}},
        {"name": "x"},
    ],
)
def test_bad_claims_are_config_errors_naming_the_field(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"spec\.devices\.requests\[0\]"):
        parse_claim(claim(bad))


def test_a_pool_without_counter_sets_names_the_gates_the_cluster_lacks() -> None:
    # What the publisher falls back to on an API server that drops sharedCounters (Kubernetes 1.35 defaults).
    backend = SimulatedBackend.from_file(node_file=H100X8, state_file=None)
    degraded = build_slices(backend.inventory(), NodeSettings(node_name=NODE), degraded=True)
    full = build_slices(backend.inventory(), NodeSettings(node_name=NODE))

    def verdict(slices: list[dict[str, Any]], request: dict[str, Any]) -> ClaimVerdict:
        return explain_claim(
            claim=parse_claim(claim(request)),
            classes=CLASSES,
            catalog=build_catalog(slices, node=NODE),
            allocations=(),
            node=NODE,
        )

    for request in (vgpu(), exactly("gpu", "mig.tessera.dev"), exactly("gpu", "mps.tessera.dev")):
        (req,) = verdict(degraded, request).requests
        assert not req.satisfied
        assert req.problem.startswith(
            "needs 1 device(s), 0 fit; this cluster does not serve shared counters: Tessera's pool "
            f"{NODE} has whole GPUs only"
        )
        assert "DRAPartitionableDevices" in req.problem and "DRAConsumableCapacity" in req.problem
        assert verdict(full, request).satisfiable
    # a whole GPU still fits there, and a full pool whose GPUs are taken says nothing about gates
    assert verdict(degraded, exactly("gpu", "gpu.tessera.dev")).satisfiable
    (req,) = run(claim(vgpu(memory="200Gi"))).requests
    assert "shared counters" not in req.problem


def test_a_cordoned_gpu_is_named_with_the_command_that_lifts_it() -> None:
    slices = node_slices(1)
    cordon = {"key": "gpu.tessera.dev/cordoned", "value": "drain", "effect": "NoExecute"}
    slices[1]["spec"]["devices"][0]["taints"] = [cordon]
    v = explain_claim(
        claim=parse_claim(claim(exactly("g", "gpu.tessera.dev"))),
        classes=CLASSES,
        catalog=build_catalog(slices, node=NODE),
        allocations=(),
        node=NODE,
    )
    kind, message = reason(v.requests[0], "gpu-0")
    assert kind is ReasonKind.TAINTED
    assert "an administrator drained gpu-0 of this node" in message
    assert f"`tessera gpu uncordon {NODE} gpu-0` lifts it" in message
