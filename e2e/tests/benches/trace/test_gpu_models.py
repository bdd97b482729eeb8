"""A share of a GPU in thousandths becomes memory and cores that pack exactly as the thousandths do."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from e2e.benches.trace.gpu_models import MODELS, model, share_of
from e2e.benches.trace.records import TraceError


@given(st.sampled_from(list(MODELS.values())), st.lists(st.integers(1, 999), min_size=1, max_size=10))
@example(MODELS["T4"], [333, 333, 334])  # exactly one GPU: rounding up would not fit
@example(MODELS["G3"], [500, 501])  # a thousandth too much: rounding down must not squeeze it in
def test_shares_fit_one_gpu_exactly_when_their_thousandths_do(product: object, millis: list[int]) -> None:
    assert product in MODELS.values()
    gpu = MODELS[product.key]  # type: ignore[attr-defined]
    shares = [share_of(gpu, m) for m in millis]
    fits = sum(s.memory_mib for s in shares) <= gpu.memory_mib
    assert fits == (sum(millis) <= 1000)
    if fits:  # cores never bind before memory does
        assert sum(s.cores for s in shares) <= 100


def test_a_share_is_its_fraction_of_the_model() -> None:
    assert share_of(model("T4"), 460).memory_mib == 15360 * 460 // 1000 == 7065
    assert share_of(model("T4"), 460).cores == 46
    assert share_of(model("G2"), 50).cores == 5
    with pytest.raises(TraceError, match=r"1\.\.999 thousandths"):
        share_of(model("T4"), 1000)
    with pytest.raises(TraceError, match="unknown GPU model 'K80'"):
        model("K80")


def test_every_model_of_the_trace_is_known_and_none_does_mig() -> None:
    assert set(MODELS) == {"P100", "T4", "V100M16", "V100M32", "A10", "G1", "G2", "G3"}
    assert not any(p.mig_capable for p in MODELS.values())
    assert len({p.product_name for p in MODELS.values()}) == len(MODELS)  # a selector tells them apart
