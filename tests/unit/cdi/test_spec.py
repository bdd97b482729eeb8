from __future__ import annotations

import json
from typing import Any

import pytest

from cdi.spec import Device, Spec, SpecError
from dra_driver.vocabulary.container import ContainerEdits, DeviceNode, Mount

FULL = Spec(
    kind="k8s.gpu.tessera.dev/claim",
    devices=(
        Device(
            name="uid-1-gpu-0",
            container_edits=ContainerEdits(
                env=("A=1", "B="),
                device_nodes=(
                    DeviceNode("/dev/nvidia0", 195, 0),
                    DeviceNode("/dev/nvidia-caps/nvidia-cap3", 237, 3),
                ),
                mounts=(Mount(host_path="/h", container_path="/c", options=("ro", "bind")),),
            ),
        ),
        Device(name="uid-1-gpu-1", container_edits=ContainerEdits(env=("C=3",))),
    ),
    container_edits=ContainerEdits(mounts=(Mount(host_path="/lib", container_path="/lib"),)),
)


def test_round_trip_through_json() -> None:
    data = json.loads(json.dumps(FULL.to_dict()))
    assert Spec.from_dict(data) == FULL
    assert data["cdiVersion"] == "0.6.0"
    edits = data["devices"][0]["containerEdits"]
    # a device node as the runtime reads it: at the host's path, a character device, its numbers given
    assert edits["deviceNodes"][0] == {
        "path": "/dev/nvidia0",
        "hostPath": "/dev/nvidia0",
        "type": "c",
        "major": 195,
        "minor": 0,
    }
    assert edits["mounts"] == [
        {"hostPath": "/h", "containerPath": "/c", "type": "bind", "options": ["ro", "bind"]}
    ]
    assert data["containerEdits"]["mounts"] == [{"hostPath": "/lib", "containerPath": "/lib", "type": "bind"}]


def test_spec_without_claim_wide_edits_omits_the_key() -> None:
    spec = Spec(kind="a.b/c", devices=(Device(name="d", container_edits=ContainerEdits()),))
    assert "containerEdits" not in spec.to_dict()
    assert Spec.from_dict(spec.to_dict()) == spec


def test_a_node_or_mount_without_its_defaults_reads_as_tesseras() -> None:
    data = json.loads(json.dumps(FULL.to_dict()))
    node = data["devices"][0]["containerEdits"]["deviceNodes"][0]
    del node["hostPath"], node["type"]
    del data["containerEdits"]["mounts"][0]["type"]
    assert Spec.from_dict(data) == FULL


def test_qualified_names() -> None:
    assert FULL.qualified_names() == (
        "k8s.gpu.tessera.dev/claim=uid-1-gpu-0",
        "k8s.gpu.tessera.dev/claim=uid-1-gpu-1",
    )


def _node(d: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = d["devices"][0]["containerEdits"]["deviceNodes"][0]
    return node


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d.update(kind="novendor"), "kind: 'novendor' is not vendor/class"),
        (lambda d: d.update(cdiVersion="0.2.0"), "cdiVersion: '0.2.0' is not one of"),
        (lambda d: d.update(devices=[]), "a spec needs at least one device"),
        (lambda d: d["devices"].append(dict(d["devices"][0])), "device names repeat"),
        (lambda d: d["devices"][0].update(name="-bad"), "is not a valid CDI device name"),
        (lambda d: d["devices"][0]["containerEdits"].update(env=["NOVALUE"]), "'NOVALUE' is not NAME=value"),
        (lambda d: _node(d).update(major="195"), ".major: must be an integer"),
        (lambda d: _node(d).pop("minor"), "deviceNodes[0]: a device node needs its major and minor"),
        (
            lambda d: _node(d).update(hostPath="/dev/other"),
            ".hostPath: Tessera's device nodes are at the same path",
        ),
        (lambda d: _node(d).update(type="b"), ".type: Tessera's device nodes are character devices"),
        (lambda d: d["devices"][0]["containerEdits"]["mounts"][0].pop("hostPath"), ".hostPath: missing"),
        (lambda d: d["devices"][0]["containerEdits"]["mounts"][0].update(type="tmpfs"), "are bind mounts"),
        (lambda d: d["devices"][0]["containerEdits"].update(mounts={}), "must be a list of objects"),
        (
            lambda d: d["devices"][0]["containerEdits"].update(hooks=[{"hookName": "x", "path": "/x"}]),
            ".hooks: Tessera's specs have no hooks",
        ),
    ],
)
def test_from_dict_rejects_what_tessera_never_writes(mutate, needle: str) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(json.dumps(FULL.to_dict()))
    mutate(data)
    with pytest.raises(SpecError) as info:
        Spec.from_dict(data)
    assert needle in str(info.value)
