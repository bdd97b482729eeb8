"""`make bench-trace SMOKE=1` end to end on its own control plane, its figures against a hand count
(tests/README.md, "Smoke forms").

The smoke form replays the slice of the openb trace kept in e2e/benches/trace/slice/ with seed 45: two nodes
of one GPU each (a V100M16, a P100; 8 CPUs each) and four pods, one of them given `gpu_spec: V100M16`. Counted
by hand, in the cluster's 2,000 GPU-milli:
- the seed's order is 0006 (a whole GPU, V100M16 only), 8106 (32 CPUs, no GPU), 0062 (810 milli of a GPU),
  2207 (650 milli), then one padded copy of 2207: 2,460 milli arrived is short of 130 % (2,600), 3,110 is not;
- 0006 can go only to the V100 (its selector): placed, arrived 50 %, unallocated 50 %;
- 8106 fits no node's CPUs: dropped, arrived still 50 %;
- 0062 takes the P100, the one GPU left (no share fits beside a whole GPU): placed, arrived 90.5 %,
  unallocated (2000 - 1810) / 2000 = 9.5 %;
- 2207 and its copy need 650 milli, and the P100 has 190 left: dropped, arrived 123 % and 155.5 %.
So unallocated is 50 % up to the 50 % mark, 9.5 % from 60 % on; the 100 % point is the 4th pod tried
(arrived 123 %) and the 130 % point the 5th (155.5 %), with 2 placed. The placements do not depend on the
scheduler's scores: no GPU can hold two of these pods."""

from __future__ import annotations

import re

import pytest

from tests.support.smoke import covers, make_smoke

pytestmark = pytest.mark.e2e
POINT = re.compile(
    r"^  (?:so far )?arrived>=(\d+)% tried=(\d+) placed=(\d+) arrived=([\d.]+)% unallocated=([\d.]+)%$"
)
SEED = re.compile(r"^seed=45 tried=(\d+) placed=(\d+) at100=([\d.]+)% at130=([\d.]+)% .*stuck=(\d+)$")


@covers("make bench-trace SMOKE=1")
@pytest.mark.timeout(300)
def test_the_smoke_replay_matches_the_hand_count() -> None:
    done = make_smoke("bench-trace", timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "seed=45 pods=5 padded=1" in out, out
    matches = [m for line in out.splitlines() if (m := POINT.match(line))]
    # each point shows once as the arrivals reach it ("so far") and once in the seed's curve, the same
    early = [m.groups() for m in matches if m[0].startswith("  so far ")]
    final = [m.groups() for m in matches if not m[0].startswith("  so far ")]
    assert early == final, out
    points = {int(m[0]): m[1:] for m in final}
    assert sorted(points) == list(range(10, 131, 10)), out
    by_hand = {mark: ("1", "1", "50.00", "50.00") for mark in range(10, 51, 10)}
    by_hand |= {mark: ("3", "2", "90.50", "9.50") for mark in range(60, 91, 10)}
    by_hand |= {mark: ("4", "2", "123.00", "9.50") for mark in range(100, 121, 10)}
    by_hand[130] = ("5", "2", "155.50", "9.50")
    assert points == by_hand, out
    seed = [m.groups() for line in out.splitlines() if (m := SEED.match(line))]
    assert seed == [("5", "2", "9.50", "9.50", "0")], out
    assert "trace median seeds=1 at100=9.50% at130=9.50%" in out
    assert "published FGD: at100=4.77% at130=4.60%" in out


EXTENDER = re.compile(r"^extender failed=(\d+) filled=(\d+) prioritized=(\d+) refused=(\d+)$")


@covers("make bench-trace SMOKE=1 EXTENDER=1")
@pytest.mark.timeout(300)
def test_the_smoke_replay_with_the_shipped_extender_configuration_counts_the_same() -> None:
    """kube-scheduler runs deploy/scheduler/kube-scheduler-extender-config.yaml as it ships (its score
    plugins disabled, DynamicResources reweighted, the extender's two stanzas pointed at a local replica)."""
    done = make_smoke("bench-trace", "EXTENDER=1", timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "scheduler_config=deploy/scheduler/kube-scheduler-extender-config.yaml extender=yes" in out, out
    # the placements of the hand count do not depend on scores: the same figures
    assert "trace median seeds=1 at100=9.50% at130=9.50%" in out, out
    # the extender ran beside the plane and answered every call it got (here no pod has two feasible nodes)
    calls = [m.groups() for line in out.splitlines() if (m := EXTENDER.match(line))]
    assert len(calls) == 1 and calls[0][0] == "0" and calls[0][3] == "0", out
    # kube-scheduler calls an extender only when a pod has more than one feasible node: both verbs or none
    assert calls[0][1] == calls[0][2], out
