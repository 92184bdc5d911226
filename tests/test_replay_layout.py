"""observe's replays: in the memory layout the run's calls had, and charged at an implementation's whole
time, never a step's. The savings are checked on a frame built by hand (exact values), and the layouts
end to end on a CPU replay of an observed BSHD call."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import profiler
from attention_core.shape import Shape
from profiler.measure.runner import make_inputs
from profiler.model.roofs import Roofs
from profiler.observer.replay import replay, replay_layouts, savings
from profiler.registry import get_impl
from profiler.store import Capture

SHAPE = Shape(2, 4, 64, 64, 16, "fp32", causal=True)


def _row(**fields) -> dict:
    return SHAPE.to_row() | {"status": "ok", "site": "", "step": "total", "mask": "causal"} | fields


def test_a_stepwise_replay_is_charged_its_total_not_its_last_step():
    """naive's replay has a total row (3.0 ms) and step rows (pv_matmul 0.9 ms): 10 observed calls of 1.0 ms
    would take 30 ms on naive, a saving of -20 ms (slower), whatever order the rows come in."""
    frame = pd.DataFrame([
        _row(source="observed", impl="sdpa", calls=10, total_ms=10.0, layout="bshd"),
        _row(source="replay", impl="naive", time_ms=3.0, layout="bshd"),
        _row(source="replay", impl="naive", step="qk_matmul", time_ms=0.8, layout="bshd"),
        _row(source="replay", impl="naive", step="pv_matmul", time_ms=0.9, layout="bshd"),
        _row(source="replay", impl="sdpa_math", time_ms=0.5, layout="bhsd"),
    ])
    per_row, whole = savings(frame, {"wall_s": 0.1})
    naive = per_row.set_index("impl").loc["naive"]
    assert naive.replayed_ms == pytest.approx(30.0) and naive.saved_ms == pytest.approx(-20.0)
    assert naive.same_layout
    whole = whole.set_index("impl")
    assert whole.loc["naive", "speedup"] == pytest.approx(100 / 120)  # 1.2x slower: 100 ms of wall time + 20
    # sdpa_math ran on BHSD inputs while the run's calls were BSHD views: counted, and said.
    assert whole.loc["sdpa_math", "saved_ms"] == pytest.approx(5.0)
    assert (whole.loc["sdpa_math", "calls_other_layout"], whole.loc["naive", "calls_other_layout"]) == (10, 0)


def test_each_shape_replays_in_the_layout_of_most_of_its_calls():
    other = Shape(1, 2, 32, 32, 16, "fp32")
    observed = pd.DataFrame([
        _row(calls=3, layout="bhsd"), _row(calls=5, layout="bshd"),
        other.to_row() | {"mask": "none", "calls": 4, "layout": "packed"},  # varlen: replayed as BHSD
    ])
    assert replay_layouts(observed) == {SHAPE: "bshd", other: "bhsd"}


def test_make_inputs_lays_out_bshd_views_with_the_same_values():
    q, k, v, do = make_inputs(SHAPE, "cpu", requires_grad=True, layout="bshd")
    ref = make_inputs(SHAPE, "cpu", requires_grad=True)
    for t, r in zip((q, k, v), ref):
        assert t.is_leaf and t.requires_grad and torch.equal(t, r)
        assert t.stride(2) > t.stride(1) and t.transpose(1, 2).is_contiguous()  # (B, S, H, D) storage
    with pytest.raises(ValueError, match="layout 'packed' is not one of bhsd, bshd"):
        make_inputs(SHAPE, "cpu", layout="packed")


def test_an_observed_bshd_call_is_replayed_as_bshd(tmp_path):
    """SDPA called as transformers calls it (BSHD storage as a BHSD view), observed, then replayed on
    sdpa_math and naive: the replay rows say bshd and the savings compare like with like."""
    x = torch.randn(SHAPE.batch, SHAPE.seq_q, 3, SHAPE.heads, SHAPE.head_dim)
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
    with profiler.observe(out=tmp_path / "run"):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    capture = Capture(tmp_path / "run")
    replay(tmp_path / "run", [get_impl("sdpa_math"), get_impl("naive")], "cpu", Roofs.from_meta(capture.meta()),
           rep_ms=2)
    meta, frame = capture.load()
    observed = frame[frame.source == "observed"]
    assert observed.layout.tolist() == ["bshd"] and observed.calls.tolist() == [3]
    replayed = frame[frame.source == "replay"]
    assert set(replayed.impl) == {"sdpa_math", "naive"} and set(replayed.layout) == {"bshd"}
    per_row, whole = savings(frame, meta["observed"])
    assert per_row.same_layout.all() and (whole.calls_other_layout == 0).all()
    naive_total = replayed[(replayed.impl == "naive") & (replayed.step == "total")].time_ms.item()
    naive = per_row.set_index("impl").loc["naive"]
    assert naive.replayed_ms == pytest.approx(3 * naive_total)


def test_the_savings_sentence_says_when_replays_ran_in_another_layout():
    from profiler.observer.summary import savings_sentence

    frame = pd.DataFrame([
        _row(source="observed", impl="sdpa", calls=10, total_ms=10.0, layout="packed"),
        _row(source="replay", impl="sdpa_math", time_ms=0.5, layout="bhsd"),
    ])
    _, whole = savings(frame, {"wall_s": 0.1})
    assert savings_sentence(whole) == ("Attention is 10.0% of wall time; sdpa_math would make the run 1.05x faster "
                                       "(10 of the 10 replayed calls were replayed in another memory layout than the "
                                       "run's)")
