"""The release table and the gates a plane of each release is started with (no control plane needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dra_driver.core.cluster_features import SHARING_GATES
from e2e.controlplane import releases, settings
from e2e.controlplane.errors import ControlPlaneError

MODULES = Path(releases.MODULES_DIR)


def test_every_release_has_its_module_and_the_default_is_one_of_them() -> None:
    laid_out = {p.name for p in MODULES.iterdir() if p.is_dir()}
    assert laid_out == set(releases.RELEASES)
    assert releases.default_version() in releases.RELEASES
    for version in releases.RELEASES:
        go_mod = (MODULES / version / "go.mod").read_text()
        assert re.search(rf"^\s*k8s.io/kubernetes {re.escape(version)}$", go_mod, re.M), version
        staging = "v0." + version.removeprefix("v1.")
        assert f"k8s.io/kubelet => k8s.io/kubelet {staging}" in go_mod
        assert '_ "k8s.io/kubernetes/cmd/kubelet"' in (MODULES / version / "tools.go").read_text()


@pytest.mark.parametrize("given", ["1.35.4", "v1.35.4", " v1.35.4\n"])
def test_a_release_is_named_with_or_without_its_v(given: str) -> None:
    assert releases.release(given).version == "v1.35.4"


def test_an_unknown_release_names_the_known_ones_and_the_fix() -> None:
    with pytest.raises(
        ControlPlaneError, match=r"v1\.33\.0 is not a release .*v1\.37\.2.*new-version\.sh v1\.33\.0"
    ):
        releases.release("1.33.0")


def test_sharing_is_default_only_from_1_36() -> None:
    serves = {v: r.serves_sharing() for v, r in releases.RELEASES.items()}
    assert serves == {"v1.34.12": False, "v1.35.4": False, "v1.36.3": True, "v1.37.2": True}
    assert releases.newest_without_sharing().version == "v1.35.4"


def test_the_default_profile_sets_no_gate_and_sharing_only_what_is_off() -> None:
    for r in releases.RELEASES.values():
        assert r.profile("default") == {}
    old = releases.release("1.35.4").profile("sharing")
    assert old == {g: True for g in (*SHARING_GATES, "DRADeviceTaints", "DRAExtendedResource")}
    assert releases.release("1.37.2").profile("sharing") == {}
    with pytest.raises(ControlPlaneError, match="gate profile 'all' is unknown"):
        releases.release("1.37.2").profile("all")


def test_overrides_must_be_gates_the_release_knows() -> None:
    old = releases.release("1.35.4")
    assert settings.feature_gates({"DRAConsumableCapacity": True}, of=old, profile="default") == {
        "DRAConsumableCapacity": True
    }
    # DRAListTypeAttributes first exists in 1.36: a 1.35 component would refuse to start with it.
    with pytest.raises(
        ControlPlaneError, match=r"'DRAListTypeAttributes' is not a gate Kubernetes v1\.35\.4 knows"
    ):
        settings.feature_gates({"DRAListTypeAttributes": True}, of=old)


def test_flags_name_only_the_gates_set() -> None:
    assert settings.feature_gates_args({}) == []
    assert settings.feature_gates_args({"B": False, "A": True}) == ["--feature-gates=A=true,B=false"]


def test_gated_controllers_run_only_where_their_gate_is_on() -> None:
    old, new = releases.release("1.35.4"), releases.release("1.37.2")
    assert "device-taint-eviction-controller" not in settings.kcm_controllers({}, of=old)
    assert "device-taint-eviction-controller" in settings.kcm_controllers({"DRADeviceTaints": True}, of=old)
    assert "device-taint-eviction-controller" in settings.kcm_controllers({}, of=new)
    assert "resourcepoolstatusrequest-controller" not in settings.kcm_controllers({}, of=new)
    assert "resourceclaim-controller" in settings.kcm_controllers({}, of=old)
