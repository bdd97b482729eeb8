"""The MostlyPaging decision (dra_driver/core/paging.py): a link's busy share from NVML's readings, its mean
over the window, and whom to warn, once per episode."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core.paging import (
    HostBacked,
    LinkSample,
    LinkTraffic,
    busy_share,
    decide,
)
from dra_driver.vocabulary.names import ClaimUID, GpuUUID

GPU0, GPU1 = GpuUUID("GPU-0"), GpuUUID("GPU-1")
GiB = 1 << 30


def claim(name: str, managed: int, gpu: GpuUUID = GPU0) -> HostBacked:
    return HostBacked(
        ClaimUID(f"uid-{name}"), "team", name, "gpu-0-vgpu", gpu, 0 if gpu == GPU0 else 1, managed
    )


def test_a_gen4_x16_link_carries_31_5_gb_per_second_each_way() -> None:
    link = LinkTraffic(tx_bytes_per_s=0, rx_bytes_per_s=0, generation=4, width=16)
    assert link.bandwidth_bytes_per_s == 31_504_000_000
    assert link.busy == 0


def test_both_directions_count_against_one_directions_bandwidth_capped_at_one() -> None:
    half = 31_504_000_000 // 4
    assert LinkTraffic(
        tx_bytes_per_s=half, rx_bytes_per_s=half, generation=4, width=16
    ).busy == pytest.approx(0.5)
    assert LinkTraffic(tx_bytes_per_s=4 * half, rx_bytes_per_s=4 * half, generation=4, width=16).busy == 1.0


@pytest.mark.parametrize(("generation", "width"), [(0, 16), (7, 16), (4, 0), (4, 33)])
def test_a_link_nvml_should_not_report_has_no_busy_share(generation: int, width: int) -> None:
    assert LinkTraffic(tx_bytes_per_s=1, rx_bytes_per_s=1, generation=generation, width=width).busy is None


def test_the_share_is_unknown_until_the_readings_cover_half_the_window() -> None:
    samples = [LinkSample(at_s=float(t), busy=1.0) for t in range(0, 29)]
    assert busy_share(samples, now_s=29.0, window_s=60.0) is None
    samples.append(LinkSample(at_s=30.0, busy=1.0))
    assert busy_share(samples, now_s=30.0, window_s=60.0) == 1.0


def test_readings_older_than_the_window_do_not_count() -> None:
    old = [LinkSample(at_s=float(t), busy=1.0) for t in range(0, 60)]
    new = [LinkSample(at_s=float(t), busy=0.0) for t in range(60, 121)]
    assert busy_share(old + new, now_s=120.0, window_s=60.0) == 0.0


@given(
    st.lists(st.tuples(st.floats(0, 200), st.floats(-1, 2, allow_nan=False)), min_size=0, max_size=80),
    st.floats(10, 100),
)
def test_the_share_is_the_mean_of_the_clamped_readings_in_the_window(
    raw: list[tuple[float, float]], window: float
) -> None:
    samples = sorted((LinkSample(at_s=t, busy=b) for t, b in raw), key=lambda s: s.at_s)
    now = 200.0
    share = busy_share(samples, now_s=now, window_s=window)
    inside = [min(1.0, max(0.0, s.busy)) for s in samples if now - window < s.at_s <= now]
    if share is None:
        return
    assert 0.0 <= share <= 1.0
    assert share == pytest.approx(sum(inside) / len(inside))


def test_a_claim_holding_host_backed_bytes_on_a_busy_link_is_warned_once_while_it_holds() -> None:
    c = claim("big", 3 * GiB)
    first = decide(shares={GPU0: 0.8}, claims=[c], warned={}, now_s=100.0)
    (w,) = first.warnings
    assert w.claim == c
    message = w.message
    assert "team/big" in message and "3Gi of host-backed" in message and "busy 80% of the last 60s" in message
    assert "less virtualMemory" in message and "lower memoryOversubscription" in message
    assert "drop the opt-in" in message and "not known" not in message
    again = decide(shares={GPU0: 0.9}, claims=[c], warned=first.warned, now_s=5000.0)
    assert again.warnings == ()


def test_no_warning_for_a_quiet_link_a_resident_claim_or_an_unknown_share() -> None:
    assert decide(shares={GPU0: 0.5}, claims=[claim("a", GiB)], warned={}, now_s=1.0).warnings == ()
    assert decide(shares={GPU0: 0.9}, claims=[claim("a", 0)], warned={}, now_s=1.0).warnings == ()
    assert decide(shares={GPU0: None}, claims=[claim("a", GiB)], warned={}, now_s=1.0).warnings == ()
    assert decide(shares={}, claims=[claim("a", GiB)], warned={}, now_s=1.0).warnings == ()
    # the busy GPU is another one
    assert (
        decide(shares={GPU0: 0.1, GPU1: 0.9}, claims=[claim("a", GiB)], warned={}, now_s=1.0).warnings == ()
    )


def test_claims_sharing_a_busy_gpu_are_each_warned_and_told_the_traffic_is_not_attributed() -> None:
    a, b, resident = claim("a", GiB), claim("b", 2 * GiB), claim("r", 0)
    d = decide(shares={GPU0: 0.7}, claims=[a, b, resident], warned={}, now_s=1.0)
    assert [w.claim.name for w in d.warnings] == ["a", "b"]
    assert all("2 claims on it hold host-backed memory" in w.message for w in d.warnings)


def test_once_the_condition_cleared_a_claim_is_warned_again_only_after_the_repeat_interval() -> None:
    c = claim("a", GiB)
    d = decide(shares={GPU0: 0.9}, claims=[c], warned={}, now_s=0.0, repeat_s=100.0)
    d = decide(shares={GPU0: 0.1}, claims=[c], warned=d.warned, now_s=50.0, repeat_s=100.0)
    assert decide(shares={GPU0: 0.9}, claims=[c], warned=d.warned, now_s=60.0, repeat_s=100.0).warnings == ()
    d = decide(shares={GPU0: 0.1}, claims=[c], warned=d.warned, now_s=150.0, repeat_s=100.0)
    assert (
        len(decide(shares={GPU0: 0.9}, claims=[c], warned=d.warned, now_s=160.0, repeat_s=100.0).warnings)
        == 1
    )


@given(
    st.lists(
        st.tuples(st.sampled_from([None, 0.2, 0.9]), st.sampled_from([0, GiB]), st.booleans()), max_size=60
    )
)
def test_a_claim_is_never_warned_twice_within_the_repeat_interval(
    rounds: list[tuple[float | None, int, bool]],
) -> None:
    warned: dict[tuple[ClaimUID, str], float] = {}
    times: list[float] = []
    for k, (share, managed, present) in enumerate(rounds):
        now = 10.0 * k
        d = decide(
            shares={GPU0: share},
            claims=[claim("a", managed)] if present else [],
            warned=warned,
            now_s=now,
            repeat_s=100.0,
        )
        times += [now for _ in d.warnings]
        warned = dict(d.warned)
    assert all(b - a >= 100.0 for a, b in itertools.pairwise(times))
