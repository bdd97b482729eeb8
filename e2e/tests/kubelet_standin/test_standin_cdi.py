"""The stand-in's CDI resolution behaves like a runtime's: resolution, merge order, conflicts, failures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e.kubelet_standin.cdi_registry import CdiRegistry, parse_qualified_name
from e2e.kubelet_standin.errors import CdiError


def spec(
    kind: str, devices: dict[str, dict[str, Any]], edits: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "cdiVersion": "0.6.0",
        "kind": kind,
        "devices": [{"name": n, "containerEdits": e} for n, e in devices.items()],
    }
    if edits:
        body["containerEdits"] = edits
    return body


def write(directory: Path, name: str, body: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(json.dumps(body))


NODE = {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}


def test_parses_qualified_names() -> None:
    assert parse_qualified_name("k8s.gpu.tessera.dev/claim=abc-gpu-0") == (
        "k8s.gpu.tessera.dev",
        "claim",
        "abc-gpu-0",
    )
    for bad in ("noequals", "vendor=name", "/c=n", "v/c=", "v/c=-bad"):
        with pytest.raises(CdiError):
            parse_qualified_name(bad)


def test_injects_spec_edits_once_then_device_edits_in_order(tmp_path: Path) -> None:
    run = tmp_path / "run"
    host_lib = tmp_path / "lib.so"
    host_lib.write_bytes(b"")
    write(
        run,
        "a.json",
        spec(
            "v.example/claim",
            {
                "d0": {"env": ["X=0", "ONLY0=yes"], "deviceNodes": [NODE]},
                "d1": {"env": ["X=1"], "mounts": [{"hostPath": str(host_lib), "containerPath": "/lib/x.so"}]},
            },
            edits={
                "env": ["SPEC=1"],
                "deviceNodes": [{"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}],
            },
        ),
    )
    config = CdiRegistry(spec_dirs=[tmp_path / "etc", run]).inject(
        ["v.example/claim=d0", "v.example/claim=d1", "v.example/claim=d0"]
    )
    assert config.cdi_devices == ("v.example/claim=d0", "v.example/claim=d1")
    assert config.env_map() == {"SPEC": "1", "X": "1", "ONLY0": "yes"}  # later value wins
    assert config.device_paths() == {"/dev/nvidia0", "/dev/nvidiactl"}
    mount = config.mount_at("/lib/x.so")
    assert mount is not None and mount.host_path == str(host_lib)


def test_unknown_device_fails_the_container(tmp_path: Path) -> None:
    write(tmp_path, "a.json", spec("v.example/claim", {"d0": {"env": ["A=1"]}}))
    with pytest.raises(CdiError, match=r"unresolvable CDI devices v\.example/claim=nope"):
        CdiRegistry(spec_dirs=[tmp_path]).inject(["v.example/claim=d0", "v.example/claim=nope"])


def test_broken_spec_makes_its_devices_unresolvable_and_says_why(tmp_path: Path) -> None:
    write(tmp_path, "a.json", {"cdiVersion": "9.9.9", "kind": "v.example/claim", "devices": []})
    with pytest.raises(CdiError, match="unknown cdiVersion"):
        CdiRegistry(spec_dirs=[tmp_path]).inject(["v.example/claim=d0"])


def test_same_device_twice_in_one_directory_is_a_conflict(tmp_path: Path) -> None:
    write(tmp_path, "a.json", spec("v.example/claim", {"d0": {"env": ["A=1"]}}))
    write(tmp_path, "b.json", spec("v.example/claim", {"d0": {"env": ["A=2"]}}))
    with pytest.raises(CdiError, match="unresolvable"):
        CdiRegistry(spec_dirs=[tmp_path]).inject(["v.example/claim=d0"])


def test_later_directory_overrides_earlier(tmp_path: Path) -> None:
    write(tmp_path / "etc", "a.json", spec("v.example/claim", {"d0": {"env": ["A=etc"]}}))
    write(tmp_path / "run", "a.json", spec("v.example/claim", {"d0": {"env": ["A=run"]}}))
    config = CdiRegistry(spec_dirs=[tmp_path / "etc", tmp_path / "run"]).inject(["v.example/claim=d0"])
    assert config.env_map() == {"A": "run"}


def test_device_node_without_numbers_needs_the_host_node(tmp_path: Path) -> None:
    write(
        tmp_path,
        "a.json",
        spec("v.example/claim", {"d0": {"deviceNodes": [{"path": "/dev/tessera-missing"}]}}),
    )
    with pytest.raises(CdiError, match="cannot stat host device"):
        CdiRegistry(spec_dirs=[tmp_path]).inject(["v.example/claim=d0"])
    write(tmp_path, "a.json", spec("v.example/claim", {"d0": {"deviceNodes": [{"path": "/dev/null"}]}}))
    config = CdiRegistry(spec_dirs=[tmp_path]).inject(["v.example/claim=d0"])
    assert [(n.type, n.major, n.minor) for n in config.device_nodes] == [("c", 1, 3)]


def test_missing_mount_source_fails_the_container(tmp_path: Path) -> None:
    write(
        tmp_path,
        "a.json",
        spec(
            "v.example/claim",
            {"d0": {"mounts": [{"hostPath": str(tmp_path / "nope"), "containerPath": "/x"}]}},
        ),
    )
    with pytest.raises(CdiError, match="does not exist"):
        CdiRegistry(spec_dirs=[tmp_path]).inject(["v.example/claim=d0"])


def test_invalid_env_and_hook_are_rejected(tmp_path: Path) -> None:
    write(tmp_path, "a.json", spec("v.example/claim", {"d0": {"env": ["NOEQUALS"]}}))
    with pytest.raises(CdiError, match="KEY=VALUE"):
        CdiRegistry(spec_dirs=[tmp_path]).inject(["v.example/claim=d0"])
    write(
        tmp_path, "a.json", spec("v.example/claim", {"d0": {"hooks": [{"hookName": "bogus", "path": "/x"}]}})
    )
    with pytest.raises(CdiError, match="hookName"):
        CdiRegistry(spec_dirs=[tmp_path]).inject(["v.example/claim=d0"])
