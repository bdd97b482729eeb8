"""The control plane's state file: versioned, round-trips, and rejects what it cannot use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.state import (
    ComponentRecord,
    ControlPlaneState,
    dump_state,
    load_state,
    parse_state,
    save_state,
)

STATE = ControlPlaneState(
    server="https://127.0.0.1:6443",
    kubeconfig="/tmp/x/admin.kubeconfig",
    etcd="http://127.0.0.1:2379",
    components=(
        ComponentRecord(name="etcd", pid=11, binary="/bin/etcd", log="/tmp/x/logs/etcd.log"),
        ComponentRecord(name="kube-apiserver", pid=12, binary="/bin/kube-apiserver", log="/tmp/x/logs/a.log"),
    ),
)


def test_round_trip_through_disk(tmp_path: Path) -> None:
    save_state(tmp_path, STATE)
    assert load_state(tmp_path) == STATE
    document = json.loads((tmp_path / "state.json").read_text())
    assert (document["apiVersion"], document["kind"]) == ("tessera.dev/e2e/v1", "ControlPlaneState")
    assert not [p for p in tmp_path.iterdir() if p.name != "state.json"], "temp file left behind"


def test_missing_state_is_none(tmp_path: Path) -> None:
    assert load_state(tmp_path) is None


def test_other_version_is_rejected() -> None:
    document = json.loads(dump_state(STATE))
    document["apiVersion"] = "tessera.dev/e2e/v2"
    with pytest.raises(ControlPlaneError, match=r"apiVersion/kind must be tessera\.dev/e2e/v1"):
        parse_state(json.dumps(document).encode(), source="state.json")


def test_bad_field_is_named() -> None:
    document = json.loads(dump_state(STATE))
    document["components"][1]["pid"] = "twelve"
    with pytest.raises(ControlPlaneError, match=r"components\[1\]: field 'pid' must be a int"):
        parse_state(json.dumps(document).encode(), source="state.json")


def test_garbage_is_rejected() -> None:
    with pytest.raises(ControlPlaneError, match="not JSON"):
        parse_state(b"{half", source="state.json")
