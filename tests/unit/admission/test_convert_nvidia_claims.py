"""Claims written for NVIDIA's DRA driver (v0.4.1) → the nearest Tessera request: whole GPU, MIG,
time-slicing, MPS; what has no counterpart is refused, naming the field and why; everything else is left as
written."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from admission.convert.nvidia_claims import UnconvertibleClaimError, convert_claim, is_nvidia_claim
from dra_driver.vocabulary.errors import ConversionError

EXAMPLES = Path(__file__).resolve().parents[3] / "admission" / "examples" / "nvidia"


def example(name: str, kind: str) -> dict[str, Any]:
    docs = yaml.safe_load_all((EXAMPLES / name).read_text())
    found: dict[str, Any] = next(d for d in docs if d["kind"] == kind)
    return found


def template(*requests: dict[str, Any], config: list[Any] | None = None, **devices: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"requests": list(requests), **devices}
    if config is not None:
        spec["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": spec}},
    }


def request(name: str, cls: str = "gpu.nvidia.com", *cel: str) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in cel]
    return {"name": name, "exactly": exactly}


def gpu_config(sharing: dict[str, Any] | None, *requests: str, kind: str = "GpuConfig") -> dict[str, Any]:
    params: dict[str, Any] = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind}
    if sharing is not None:
        params["sharing"] = sharing
    return {"requests": list(requests), "opaque": {"driver": "gpu.nvidia.com", "parameters": params}}


def devices(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]["spec"] if obj["kind"] == "ResourceClaimTemplate" else obj["spec"]
    found: dict[str, Any] = spec["devices"]
    return found


def test_a_whole_gpu_keeps_its_selector_on_tesseras_attributes() -> None:
    c = convert_claim(example("whole-gpu.yaml", "ResourceClaimTemplate"))
    [r] = devices(c.obj)["requests"]
    assert r["name"] == "gpu" and r["exactly"]["deviceClassName"] == "gpu.tessera.dev"
    expr = r["exactly"]["selectors"][0]["cel"]["expression"]
    assert expr.startswith("device.attributes['gpu.tessera.dev'].productName.startsWith('NVIDIA H100')")
    assert "device.capacity['gpu.tessera.dev'].memory" in expr and "nvidia" not in expr
    assert c.summary == ("request gpu: whole GPU (gpu.tessera.dev)",) and not c.notes


def test_mig_devices_keep_their_profiles_and_their_common_parent() -> None:
    c = convert_claim(example("mig.yaml", "ResourceClaimTemplate"))
    d = devices(c.obj)
    assert [r["exactly"]["deviceClassName"] for r in d["requests"]] == ["mig.tessera.dev"] * 2
    assert [r["exactly"]["selectors"][0]["cel"]["expression"] for r in d["requests"]] == [
        "device.attributes['gpu.tessera.dev'].profile == '1g.10gb'",
        "device.attributes['gpu.tessera.dev'].profile == '3g.40gb'",
    ]
    assert d["constraints"] == [{"requests": [], "matchAttribute": "gpu.tessera.dev/parentUUID"}]


def test_time_slicing_is_a_whole_gpu_and_a_non_default_interval_is_noted() -> None:
    c = convert_claim(example("time-slicing.yaml", "ResourceClaim"))
    d = devices(c.obj)
    assert d["requests"][0]["exactly"] == {"deviceClassName": "gpu.tessera.dev"}
    assert "config" not in d  # NVIDIA's GpuConfig read and dropped
    assert c.summary == (
        "request gpu: whole GPU, time-sliced among the claim's containers (gpu.tessera.dev)",
    )
    [note] = c.notes
    assert "interval 'Medium'" in note and "spec.devices.config[0]" in note


def test_mps_becomes_a_tessera_mps_share_with_the_thread_percentage_and_pinned_memory() -> None:
    c = convert_claim(example("mps.yaml", "ResourceClaimTemplate"))
    [r] = devices(c.obj)["requests"]
    assert r["exactly"] == {
        "deviceClassName": "mps.tessera.dev",
        "capacity": {"requests": {"memory": "8Gi", "cores": "30"}},
    }
    assert "whole GPU" in c.notes[0] and "not for each container" in c.notes[0]


def test_a_gpu_config_on_a_mig_device_is_refused_as_nvidias_driver_refuses_it() -> None:
    obj = template(request("m", "mig.nvidia.com"), config=[gpu_config({"strategy": "TimeSlicing"})])
    with pytest.raises(UnconvertibleClaimError, match=r"requests\[0\].exactly: a GpuConfig applies to a MIG"):
        convert_claim(obj)


def test_an_unnamed_config_applies_to_every_request() -> None:
    mps = {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "4Gi"}}
    other = {"opaque": {"driver": "example.com", "parameters": {"x": 1}}}
    c = convert_claim(
        template(
            request("a"),
            request("b"),
            config=[gpu_config({"strategy": "TimeSlicing"}), gpu_config(mps, "b"), other],
        )
    )
    d = devices(c.obj)
    assert [r["exactly"]["deviceClassName"] for r in d["requests"]] == ["gpu.tessera.dev", "mps.tessera.dev"]
    assert d["requests"][1]["exactly"]["capacity"] == {"requests": {"memory": "4Gi"}}
    assert d["config"] == [other]  # another driver's config is not ours to drop


def test_first_available_subrequests_convert_each() -> None:
    obj = template(
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "gpu.nvidia.com"},
                {"name": "slice", "deviceClassName": "mig.nvidia.com"},
            ],
        },
        config=[gpu_config({"strategy": "MPS"}, "gpu/big")],
    )
    c = convert_claim(obj)
    subs = devices(c.obj)["requests"][0]["firstAvailable"]
    assert [s["deviceClassName"] for s in subs] == ["mps.tessera.dev", "mig.tessera.dev"]


@pytest.mark.parametrize(
    ("obj", "named"),
    [
        (
            template(request("cd", "compute-domain-default-channel.nvidia.com")),
            r"requests\[0\].exactly.deviceClassName: compute-domain-default-channel.nvidia.com: Compute",
        ),
        (
            template(
                request("gpu"),
                config=[{"opaque": {"driver": "compute-domain.nvidia.com", "parameters": {"kind": "x"}}}],
            ),
            r"config\[0\].opaque.driver: compute-domain.nvidia.com: ComputeDomains",
        ),
        (template(request("v", "vfio.gpu.nvidia.com")), "vfio-pci"),
        (template(request("x", "gpu2.nvidia.com")), "not a DeviceClass of NVIDIA's driver v0.4.1"),
        (
            template(
                request("m", "mig.nvidia.com"),
                config=[gpu_config({"strategy": "MPS"}, kind="MigDeviceConfig")],
            ),
            "MPS inside a MIG device",
        ),
        (
            template(
                request("g"),
                config=[
                    gpu_config(
                        {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": "1Gi"}}}
                    )
                ],
            ),
            r"mpsConfig.defaultPerDevicePinnedMemoryLimit: per-device",
        ),
        (
            template(
                request("g"),
                config=[gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 0}})],
            ),
            r"defaultActiveThreadPercentage: 0; give 1..100",
        ),
        (
            template(
                request("g"),
                config=[
                    gpu_config({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "lots"}})
                ],
            ),
            r"defaultPinnedDeviceMemoryLimit: ",
        ),
        (
            template(request("g"), config=[gpu_config({"strategy": "Exclusive"})]),
            r"sharing.strategy: 'Exclusive'",
        ),
        (
            template(request("g"), config=[gpu_config(None, kind="VfioDeviceConfig")]),
            r"kind: 'VfioDeviceConfig'",
        ),
        (
            template(
                request("g", "gpu.nvidia.com", "device.attributes['gpu.nvidia.com'].addressingMode == 'HMM'")
            ),
            r"requests\[0\].exactly.selectors\[0\].cel.expression: .*addressingMode",
        ),
        (
            template(request("a"), request("b"), constraints=[{"matchAttribute": "gpu.nvidia.com/numa"}]),
            r"constraints\[0\].matchAttribute: gpu.nvidia.com/numa",
        ),
        (
            {
                **template(),
                "spec": {
                    "spec": {"devices": {"requests": [{"exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
                },
            },
            "needs a name",
        ),
    ],
)
def test_what_has_no_counterpart_is_refused_naming_the_field(obj: dict[str, Any], named: str) -> None:
    with pytest.raises(UnconvertibleClaimError, match=named):
        convert_claim(obj)


def test_a_claim_of_another_driver_or_tesseras_own_is_left_alone() -> None:
    mine = template(request("g", "gpu.tessera.dev"))
    theirs = template(request("g", "example.com"))
    for obj in (mine, theirs):
        c = convert_claim(obj)
        assert not is_nvidia_claim(obj) and c.obj == obj and not c.changed
    converted = convert_claim(example("mps.yaml", "ResourceClaimTemplate")).obj
    assert convert_claim(converted).obj == converted  # converting twice changes nothing


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    | st.sampled_from(
        ["gpu.nvidia.com", "mig.nvidia.com", "MPS", "TimeSlicing", "GpuConfig", "resource.nvidia.com/v1beta1"]
    ),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "name",
                    "exactly",
                    "deviceClassName",
                    "selectors",
                    "cel",
                    "expression",
                    "config",
                    "opaque",
                    "driver",
                    "parameters",
                    "sharing",
                    "strategy",
                    "mpsConfig",
                    "requests",
                    "kind",
                    "apiVersion",
                    "constraints",
                    "matchAttribute",
                    "firstAvailable",
                    "capacity",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@given(_json)
def test_any_devices_section_converts_or_is_refused_and_the_input_is_never_changed(devices_: Any) -> None:
    obj = {"kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": {"devices": devices_}}
    before = copy.deepcopy(obj)
    with contextlib.suppress(ConversionError):  # a refusal is fine; any other exception fails the test
        convert_claim(obj)
    assert obj == before
