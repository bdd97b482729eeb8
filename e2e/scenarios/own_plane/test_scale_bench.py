"""The scale and device-order benchmarks' parts (e2e/benches/scale, e2e/benches/meters.py), and `make
bench-scale` in its smoke form on the real control plane, so the benchmark cannot rot unnoticed
(tests/README.md, "Smoke forms")."""

from __future__ import annotations

import os
import re
from itertools import islice

import pytest

from e2e.benches.meters import count_slice_writes, process_use
from e2e.benches.scale.cluster import LAYOUTS, layout_shape, pool_shape
from e2e.benches.scale.fragmentation import parse_seeds, seeded_events
from e2e.benches.scale.workloads import PER_NODE, family_wants
from e2e.controlplane.errors import ControlPlaneError
from e2e.volcano.binaries import VolcanoSnapshotMissingError
from e2e.volcano.binaries import ensure_built as ensure_volcano_built
from tests.support.smoke import covers, make_smoke

LINE = re.compile(
    r"^scale nodes=(\d+) devices=(\d+) family=(\S+) pods=(\d+) pods_per_s=([\d.]+|nan) p50_ms=(\d+|nan) "
    r"p99_ms=(\d+|nan) slices_per_node=(\d+) steady_writes=(\d+)$"
)


def test_every_layout_keeps_the_node_within_five_slices() -> None:
    shapes = {name: layout_shape(layout) for name, layout in LAYOUTS.items()}
    assert shapes == {
        "all": (5, 224),
        "fewer": (4, 136),
        "lean": (3, 80),
        "vgpu-mig-1g": (2, 64),
        "vgpu-only": (1, 8),
        "mig-1g-only": (1, 56),
    }


def test_a_pool_counts_only_when_complete() -> None:
    assert pool_shape([(2, 2, 64), (2, 2, 8)]) == (2, 72)
    assert pool_shape([(2, 3, 64), (2, 3, 8)]) is None  # a slice missing
    assert pool_shape([(2, 2, 64), (3, 2, 8)]) is None  # two generations
    assert pool_shape([]) is None


def test_families_ask_for_what_they_say() -> None:
    assert {w.kind for w in family_wants("vgpu", 3, seed=1)} == {"vgpu-10Gi"}
    assert {w.kind for w in family_wants("mig-1g", 2, seed=1)} == {"1g.10gb"}
    assert {w.kind for w in family_wants("whole", 2, seed=1)} == {"gpu"}
    mix = family_wants("mix", 200, seed=12)
    assert mix == family_wants("mix", 200, seed=12) and mix != family_wants("mix", 200, seed=13)
    assert {"gpu", "7g.80gb", "4g.40gb"} <= {w.kind for w in mix}
    assert set(PER_NODE) == {"whole", "vgpu", "mig-1g", "mix"}
    with pytest.raises(ValueError, match="unknown family 'tpu'"):
        family_wants("tpu", 1, seed=1)


def test_event_streams_are_seeded() -> None:
    assert parse_seeds("1-3") == [1, 2, 3] and parse_seeds("4,9") == [4, 9]
    first = list(islice(seeded_events(7, p_depart=0.4), 50))
    assert first == list(islice(seeded_events(7, p_depart=0.4), 50))
    assert {kind for kind, _ in first} == {"arrive", "depart"}


def test_slice_writes_are_read_from_the_request_counter() -> None:
    group = 'group="resource.k8s.io",resource="resourceslices"'
    metrics = "\n".join(
        [
            "# TYPE apiserver_request_total counter",
            f'apiserver_request_total{{code="201",{group},verb="POST"}} 5',
            f'apiserver_request_total{{code="200",{group},verb="PUT"}} 3',
            f'apiserver_request_total{{code="200",{group},verb="LIST"}} 90',
            'apiserver_request_total{code="201",group="",resource="pods",verb="POST"} 7',
        ]
    )
    assert count_slice_writes(metrics) == 8


def test_process_use_reads_proc() -> None:
    use = process_use(os.getpid())
    assert use.cpu_s > 0 and use.rss_bytes > 0 and use.peak_rss_bytes >= use.rss_bytes
    assert process_use(2**22 + 1).cpu_s == 0.0  # no such process


NAMED = re.compile(LINE.pattern.removesuffix("$") + r" scheduler=(default|volcano)$")
SIDE_BY_SIDE = re.compile(
    r"^schedulers nodes=3 family=vgpu default_pods_per_s=([\d.]+) volcano_pods_per_s=([\d.]+) "
    r"default_cpu_ms_per_pod=([\d.]+) volcano_cpu_ms_per_pod=([\d.]+) "
    r"default_bound=12/12 volcano_bound=12/12$"
)
GANG = re.compile(
    r"^gang nodes=3 workers=4 bound=4/4 bound_s=([\d.]+) running=(\d)/\2 running_s=([\d.]+|nan) "
    r"gang_nodes=[1-3] "
)


def volcano_missing() -> str | None:
    """Why Volcano cannot run here, or None."""
    try:
        ensure_volcano_built()
    except (VolcanoSnapshotMissingError, ControlPlaneError) as e:
        return str(e)
    return None


@pytest.mark.e2e
@pytest.mark.timeout(300)
@covers("make bench-scale", "make bench-scale SCHEDULERS=default,volcano")
def test_a_tiny_scale_run_places_the_same_pods_with_both_schedulers_and_a_gang() -> None:
    """`make bench-scale SMOKE=1 SCHEDULERS=default,volcano`: 3 nodes, the vgpu-only layout, the vgpu family
    at a fifth of its pods through kube-scheduler, then vc-scheduler on the same nodes, one line side by
    side, and a Volcano gang of 4 vgpu workers bound, those on the node with a kubelet Running. One run
    serves both commands (kube-scheduler's part is `make bench-scale`'s whole); without a Volcano build, the
    plain one runs and the test says it skipped the rest."""
    missing = volcano_missing()
    done = make_smoke("bench-scale", *([] if missing else ["SCHEDULERS=default,volcano"]), timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout.splitlines()
    line = LINE if missing else NAMED
    lines = [m.groups() for text in out if (m := line.match(text))]
    for nodes, devices, family, pods, _, _, _, slices, writes, *_ in lines:
        got = (nodes, devices, family, pods, slices, writes)
        assert got == ("3", "24", "vgpu", "12", "1", "0"), done.stdout
    assert sum(1 for text in out if text.startswith("  layout=") and "bound=12/12" in text) == len(lines)
    assert "running=" in done.stdout
    if missing:
        assert len(lines) == 1, done.stdout
        pytest.skip(f"kube-scheduler's part ran; Volcano cannot be built here: {missing}")
    assert [g[-1] for g in lines] == ["default", "volcano"], done.stdout
    assert [text for text in out if SIDE_BY_SIDE.match(text)], done.stdout
    gangs = [m.groups() for text in out if (m := GANG.match(text))]
    assert len(gangs) == 1, done.stdout
    bound_s, running, running_s = gangs[0]
    assert float(bound_s) > 0, done.stdout
    assert running == "0" or float(running_s) > 0, done.stdout
