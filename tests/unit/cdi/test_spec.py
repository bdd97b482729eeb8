from __future__ import annotations

import json

import pytest

from cdi.spec import ContainerEdits, Device, DeviceNode, Hook, Mount, Spec, SpecError

FULL = Spec(
    kind="k8s.gpu.tessera.dev/claim",
    devices=(
        Device(
            name="uid-1-gpu-0",
            container_edits=ContainerEdits(
                env=("A=1", "B="),
                device_nodes=(
                    DeviceNode(
                        path="/dev/nvidia0", host_path="/dev/nvidia0", major=195, minor=0, file_mode=0o666
                    ),
                    DeviceNode(path="/dev/x", type=None, permissions="rw", uid=0, gid=44),
                ),
                mounts=(Mount(host_path="/h", container_path="/c", options=("ro", "bind")),),
                hooks=(
                    Hook(
                        hook_name="createContainer",
                        path="/bin/hook",
                        args=("hook", "x"),
                        env=("E=1",),
                        timeout=5,
                    ),
                ),
            ),
        ),
        Device(name="uid-1-gpu-1", container_edits=ContainerEdits(env=("C=3",))),
    ),
    container_edits=ContainerEdits(mounts=(Mount(host_path="/lib", container_path="/lib", type=None),)),
)


def test_round_trip_through_json() -> None:
    data = json.loads(json.dumps(FULL.to_dict()))
    assert Spec.from_dict(data) == FULL
    assert data["cdiVersion"] == "0.6.0"
    assert data["devices"][0]["containerEdits"]["deviceNodes"][0] == {
        "path": "/dev/nvidia0",
        "hostPath": "/dev/nvidia0",
        "type": "c",
        "major": 195,
        "minor": 0,
        "fileMode": 0o666,
    }
    assert data["devices"][0]["containerEdits"]["hooks"][0]["hookName"] == "createContainer"


def test_spec_without_claim_wide_edits_omits_the_key() -> None:
    spec = Spec(kind="a.b/c", devices=(Device(name="d", container_edits=ContainerEdits()),))
    assert "containerEdits" not in spec.to_dict()
    assert Spec.from_dict(spec.to_dict()) == spec


def test_qualified_names() -> None:
    assert FULL.qualified_names() == (
        "k8s.gpu.tessera.dev/claim=uid-1-gpu-0",
        "k8s.gpu.tessera.dev/claim=uid-1-gpu-1",
    )


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d.update(kind="novendor"), "kind: 'novendor' is not vendor/class"),
        (lambda d: d.update(cdiVersion="0.2.0"), "cdiVersion: '0.2.0' is not one of"),
        (lambda d: d.update(devices=[]), "a spec needs at least one device"),
        (lambda d: d["devices"].append(dict(d["devices"][0])), "device names repeat"),
        (lambda d: d["devices"][0].update(name="-bad"), "is not a valid CDI device name"),
        (lambda d: d["devices"][0]["containerEdits"].update(env=["NOVALUE"]), "'NOVALUE' is not NAME=value"),
        (
            lambda d: d["devices"][0]["containerEdits"]["deviceNodes"][0].update(major="195"),
            ".major: must be an integer",
        ),
        (lambda d: d["devices"][0]["containerEdits"]["mounts"][0].pop("hostPath"), ".hostPath: missing"),
        (lambda d: d["devices"][0]["containerEdits"].update(mounts={}), "must be a list of objects"),
    ],
)
def test_from_dict_rejects_bad_specs(mutate, needle: str) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(json.dumps(FULL.to_dict()))
    mutate(data)
    with pytest.raises(SpecError) as info:
        Spec.from_dict(data)
    assert needle in str(info.value)
