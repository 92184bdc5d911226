"""The host-time path of the forward (kernels._launch.LaunchCache, kernels.flash_fwd's route memo), on
the GPU: a call of a layout seen before launches the kernel compiled for the first call with the same
plan, and its output is bit for bit what a call without any memo gives, for new data at the same layout,
for each TMA layout, causal or not, and after the memo is cleared."""

from __future__ import annotations

import pytest
import torch

from kernels import flash_fwd, flash_fwd_hopper
from kernels._launch import layout_key
from kernels.flash_fwd import flash_attention_forward, forward_path
from kernels.reference import naive_attention, relative_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm_90 GPU (the Gluon forward)"),
]


def _inputs(layout: str, seed: int, batch=2, heads=8, kv_heads=2, seq=777, head_dim=128, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    shape = {"bhsd": (batch, heads, seq, head_dim), "bshd": (batch, seq, heads, head_dim)}[layout]
    q = torch.randn(*shape, device="cuda", dtype=dtype, generator=g)
    kv_shape = {"bhsd": (batch, kv_heads, seq, head_dim), "bshd": (batch, seq, kv_heads, head_dim)}[layout]
    k = torch.randn(*kv_shape, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(*kv_shape, device="cuda", dtype=dtype, generator=g)
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return q, k, v


def _uncached(q, k, v, causal):
    """The forward with the plan built afresh and the kernel launched through JITFunction.run."""
    return flash_fwd_hopper.hopper_forward(q, k, v, causal, q.shape[-1] ** -0.5,
                                           config=flash_fwd_hopper.default_config(q.shape[-1], causal, q.shape[2]))


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True])
def test_a_replayed_launch_reads_the_new_data_and_gives_the_uncached_bits(layout, causal):
    flash_fwd._ROUTES.clear(), flash_fwd_hopper._PLANS.clear(), flash_fwd_hopper._LAUNCHES.entries.clear()
    first = _inputs(layout, seed=1)
    assert forward_path(*first, causal=causal) == "gluon-ws"
    o1, lse1 = flash_attention_forward(*first, causal=causal)
    key = (layout_key(*first), causal, None)  # None: the output dtype, free in fp8 only
    assert key in flash_fwd_hopper._PLANS and key in flash_fwd_hopper._LAUNCHES.entries  # kept by the first call
    for seed in (2, 3):  # new data, same layout: the kept plan and kernel
        q, k, v = _inputs(layout, seed=seed)
        assert layout_key(q, k, v) == key[0]
        o, lse = flash_attention_forward(q, k, v, causal=causal)
        ref_o, ref_lse = _uncached(q, k, v, causal)
        assert torch.equal(o, ref_o) and torch.equal(lse, ref_lse)
        assert o.stride() == ref_o.stride()
        oracle = naive_attention(q.double(), k.double(), v.double(), causal=causal)
        assert relative_error(o, oracle) < 8e-3
        assert not torch.equal(o, o1)
    assert len(flash_fwd_hopper._LAUNCHES.entries) == 1


def test_another_layout_or_mask_is_another_key():
    flash_fwd._ROUTES.clear(), flash_fwd_hopper._PLANS.clear(), flash_fwd_hopper._LAUNCHES.entries.clear()
    for layout in ("bhsd", "bshd"):
        for causal in (False, True):
            q, k, v = _inputs(layout, seed=5)
            o, _ = flash_attention_forward(q, k, v, causal=causal)
            assert torch.equal(o, _uncached(q, k, v, causal)[0])
    assert len(flash_fwd_hopper._LAUNCHES.entries) == 4 and len(flash_fwd._ROUTES) == 4


@pytest.mark.parametrize("seq_kv", [4096, 70001])
def test_a_replayed_decode_step_gives_the_uncached_bits(seq_kv):
    """The split-KV path's two kernels (kernels.flash_decode), replayed from their first launch at a layout and
    plan: one query per head, 32 heads on 8 K/V heads, BSHD views as transformers passes them."""
    from kernels import flash_decode
    from kernels.flash_decode import LAUNCH, flash_decode_forward

    flash_fwd._ROUTES.clear(), flash_decode._SPLIT.entries.clear(), flash_decode._COMBINE.entries.clear()
    for seed in (1, 2, 3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
        k, v = (torch.randn(1, seq_kv, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
                for _ in range(2))
        o, lse = flash_attention_forward(q, k, v)
        plan = flash_fwd._ROUTES[layout_key(q, k, v), False][1]
        ref_o, ref_lse = flash_decode_forward(q, k, v, False, 128 ** -0.5, plan, launch=LAUNCH[128])  # uncached
        assert torch.equal(o, ref_o) and torch.equal(lse, ref_lse)
        assert relative_error(o, naive_attention(q.double(), k.double(), v.double())) < 8e-3
    assert len(flash_decode._SPLIT.entries) == 1 and len(flash_decode._COMBINE.entries) == (plan.splits > 1)


@pytest.mark.parametrize("causal", [False, True])
def test_a_replayed_backward_reads_the_new_data(causal):
    """The Gluon backward's three kernels (stats, the backward, the dQ conversion) replayed from their first launch
    at a layout (kernels.flash_bwd_hopper):
    dK and dV bit for bit an uncached launch's; dQ, reduce-added in fp32 by TMA (its sum order varies from run
    to run, and a last-bit difference can flip a bf16 rounding), as close to the fp64 oracle as the uncached
    launch's, for new data at the same BSHD layout."""
    from kernels.flash_bwd_hopper import _BWD, _DQ_CONVERT, _SCHEDULES, default_config, hopper_backward
    from kernels.reference import oracle_with_grads

    _SCHEDULES.clear(), _BWD.entries.clear(), _DQ_CONVERT.entries.clear()
    for seed in (1, 2, 3):
        q, k, v = _inputs("bshd", seed=seed)
        o, lse = flash_attention_forward(q, k, v, causal=causal)
        do = torch.randn_like(o)
        scale = q.shape[-1] ** -0.5
        dq, dk, dv = hopper_backward(do, q, k, v, o, lse, causal, scale)
        config = default_config(128, causal, q.shape[2], q.shape[1] // k.shape[1])  # the same kernel, uncached
        ref = hopper_backward(do, q, k, v, o, lse, causal, scale, config=config)
        assert torch.equal(dk, ref[1]) and torch.equal(dv, ref[2])
        _, want_dq, _, _ = oracle_with_grads(q, k, v, do, causal=causal)
        replayed, uncached = relative_error(dq, want_dq), relative_error(ref[0], want_dq)
        assert replayed <= 1.05 * uncached + 1e-4, (replayed, uncached)
    assert len(_BWD.entries) == 1 and len(_DQ_CONVERT.entries) == 1 and len(_SCHEDULES) == 1


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_a_replayed_split_tail_call_keeps_its_three_launches_and_gives_the_uncached_bits(layout):
    """head_dim 128 without a mask at 8195 keys takes split_tail by default; 325 query tiles on 132 SMs leave 61 to
    the chunks, two each. Its three launches (the whole tiles, the chunks, the merge) are each kept under the call's
    key, and a replay on new data gives what a call without any memo gives, bit for bit."""
    from kernels import tail_combine

    flash_fwd._ROUTES.clear(), flash_fwd_hopper._PLANS.clear(), flash_fwd_hopper._LAUNCHES.entries.clear()
    tail_combine._COMBINE.entries.clear()
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the shape is cut for 132 SMs (H100 and H200 SXM)")
    first = _inputs(layout, seed=1, batch=1, heads=5, kv_heads=5, seq=8195)
    assert flash_fwd_hopper.default_config(128, False, 8195).split_tail
    assert forward_path(*first) == "gluon-ws split-tail 61x2"
    flash_attention_forward(*first)
    key = (layout_key(*first), False, None)
    assert flash_fwd_hopper._PLANS[key].tail is not None
    assert set(flash_fwd_hopper._LAUNCHES.entries) == {key, (key, "chunks")} and key in tail_combine._COMBINE.entries
    for seed in (2, 3):
        q, k, v = _inputs(layout, seed=seed, batch=1, heads=5, kv_heads=5, seq=8195)
        o, lse = flash_attention_forward(q, k, v)
        ref_o, ref_lse = _uncached(q, k, v, False)
        assert torch.equal(o, ref_o) and torch.equal(lse, ref_lse)
        assert relative_error(o, naive_attention(q.double(), k.double(), v.double())) < 8e-3


@pytest.mark.parametrize("cached", [True, False], ids=["launch-cache", "no-launch-cache"])
def test_a_split_tail_call_in_a_cuda_graph_cuts_as_its_path_says_and_gives_the_eager_bits(cached, monkeypatch):
    """Under `bench --cuda-graph` (profiler.measure.timing.graphed: three warm-up calls, then the capture), the default
    forward at 8195 keys (head_dim 128, no mask: 61 tail tiles in 2 chunks on 132 SMs) is captured with its cut, with
    the launch cache (a plan kept by the first call) and without it (the tail's table made by the warm-up calls), as
    forward_path says, under the capture too; a replay gives the eager call's bits, within the fp64 oracle's bound."""
    from kernels import _launch, tail_combine
    from profiler.measure.timing import graphed

    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the shape is cut for 132 SMs (H100 and H200 SXM)")
    monkeypatch.setattr(_launch, "ENABLED", cached)
    if flash_fwd_hopper._LAUNCHES.enabled is not cached:
        pytest.skip("the launch cache runs on triton 3.6 only (kernels._launch.SUPPORTED)")
    flash_fwd._ROUTES.clear(), flash_fwd_hopper._PLANS.clear(), flash_fwd_hopper._LAUNCHES.entries.clear()
    monkeypatch.setattr(tail_combine, "_TAIL_TILES", {})
    merges, paths = [], []
    combine = tail_combine.combine
    monkeypatch.setattr(tail_combine, "combine", lambda *args: merges.append(torch.cuda.is_current_stream_capturing())
                        or combine(*args))
    q, k, v = _inputs("bhsd", seed=4, batch=1, heads=5, kv_heads=5, seq=8195)
    assert forward_path(q, k, v) == "gluon-ws split-tail 61x2"
    eager, _ = flash_attention_forward(q, k, v)
    kept = list(flash_fwd_hopper._PLANS.values())
    if cached:
        assert len(kept) == 1 and kept[0].tail is not None and not kept[0].cut_dropped
    else:
        assert len(flash_fwd_hopper._PLANS) == 0 and len(tail_combine._TAIL_TILES) == 1
    static = {}

    def call():
        paths.append((torch.cuda.is_current_stream_capturing(), forward_path(q, k, v)))
        static.update(o=flash_attention_forward(q, k, v)[0])

    replay = graphed(call)
    assert merges[-1] is True  # the merge was captured: the graph runs the cut
    assert paths[-1] == (True, "gluon-ws split-tail 61x2")  # and the path said so under the capture
    static["o"].zero_()
    replay()
    torch.cuda.synchronize()
    assert torch.equal(static["o"], eager)
    assert relative_error(eager, naive_attention(q.double(), k.double(), v.double())) < 8e-3
