"""What Tessera needs from the cluster: said in one place, and the guard for schedulers that cannot keep
shared families apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core import families
from dra_driver.core.cluster_features import (
    COMPONENTS,
    FAMILY_GATES,
    GATES,
    SHARED_FAMILIES,
    SHARING_GATES,
    enforceable_families,
    numa_list_advice,
    release_version,
    sharing_advice,
    unenforced_message,
)

INSTALL = Path(__file__).resolve().parents[4] / "docs" / "install.md"


def test_the_install_guide_lists_every_gate_with_its_release() -> None:
    rows = re.findall(r"^\| `(DRA\w+)` \| (.+?) \| (\d\.\d+) \|$", INSTALL.read_text(), re.M)
    assert [(name, since) for name, _, since in rows] == [(g.name, g.default_from) for g in GATES]
    assert [serves for _, serves, _ in rows] == [g.serves for g in GATES]


def test_every_family_says_what_it_needs() -> None:
    assert set(FAMILY_GATES) == set(families.names())
    assert FAMILY_GATES["gpu"] == ()
    for name in ("vgpu", "mps", "mig"):
        assert set(FAMILY_GATES[name]) == set(SHARING_GATES)


def test_the_advice_names_both_gates_and_every_component() -> None:
    advice = sharing_advice()
    assert "DRAPartitionableDevices and DRAConsumableCapacity" in advice
    assert all(c in advice for c in COMPONENTS) and "docs/install.md" in advice


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("v1.35.4", (1, 35, 4)),
        ("v1.37.2-gke.1200", (1, 37, 2)),
        ("1.36", (1, 36, 0)),
        ("v1.36.1", (1, 36, 1)),
        ("master", None),
        ("", None),
    ],
)
def test_release_versions_parse_with_their_patch(text: str, version: tuple[int, int, int] | None) -> None:
    assert release_version(text) == version


ALL = frozenset(families.names())


@pytest.mark.parametrize(
    ("offered", "on_1_35"),
    [
        (ALL, {"gpu", "mig"}),
        ({"gpu", "vgpu"}, {"gpu"}),
        ({"vgpu"}, {"vgpu"}),
        ({"mps"}, {"mps"}),
        ({"vgpu", "mps"}, {"vgpu"}),
        ({"gpu", "mig"}, {"gpu", "mig"}),
    ],
)
def test_before_1_36_2_a_shared_family_is_published_only_alone(offered: set[str], on_1_35: set[str]) -> None:
    assert enforceable_families(frozenset(offered), (1, 35, 4)) == on_1_35
    assert enforceable_families(frozenset(offered), (1, 34, 12)) == on_1_35
    # 1.36.0 and 1.36.1's allocator (k8s.io/dynamic-resource-allocation v0.36.1, which Volcano vendors)
    # lacks kubernetes/kubernetes#139040 too
    assert enforceable_families(frozenset(offered), (1, 36, 0)) == on_1_35
    assert enforceable_families(frozenset(offered), (1, 36, 1)) == on_1_35
    assert enforceable_families(frozenset(offered), (1, 36, 2)) == offered
    assert enforceable_families(frozenset(offered), (2, 0, 0)) == offered


@given(st.sets(st.sampled_from(sorted(ALL)), min_size=1), st.integers(0, 40), st.integers(0, 9))
def test_the_guard_never_leaves_a_shared_family_beside_another(
    offered: set[str], minor: int, patch: int
) -> None:
    kept = enforceable_families(frozenset(offered), (1, minor, patch))
    assert kept and kept <= offered
    if (minor, patch) < (36, 2) and kept & set(SHARED_FAMILIES):
        assert len(kept) == 1


def test_the_message_names_the_bug_the_fix_and_the_families() -> None:
    text = unenforced_message("kube-scheduler v1.35.4", frozenset({"vgpu", "mps"}))
    assert text.startswith("not publishing mps, vgpu: kube-scheduler v1.35.4 ignores")
    assert "#139040" in text and "1.36.2" in text and "nodeGroups[].families" in text


def test_the_numa_list_advice_names_the_setting_the_gate_and_where_it_goes() -> None:
    message = numa_list_advice()
    assert message.startswith("numaNodeForm: list needs the DRAListTypeAttributes feature gate")
    for component in ("kube-apiserver", "kube-scheduler", "kube-controller-manager"):
        assert component in message
    assert "published as an int" in message and "docs/topology.md" in message
