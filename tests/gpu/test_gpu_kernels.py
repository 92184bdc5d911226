"""The GPU test set (`make test-gpu`): compiled Triton kernels on CUDA, bf16 included.

Same rule as the CPU tests: each implementation's error against the fp64 oracle is at most about
twice the naive PyTorch error in the same dtype, plus a small floor. The reference for the GPU
is the fp64 oracle on the CPU.
"""

from __future__ import annotations

import pytest
import torch

from kernels import Unsupported, flash_attention
from kernels.flash_fwd_hopper import HopperConfig
from kernels.reference import attention_oracle, naive_attention, oracle_with_grads, relative_error
from profiler.registry import REGISTRY

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

FLOOR = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-5}


def _inputs(batch, heads, seq_q, seq_kv, head_dim, dtype, requires_grad=False, seed=0, kv_heads=None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(batch, heads, seq_q, head_dim, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(batch, kv_heads or heads, seq_kv, head_dim, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(batch, kv_heads or heads, seq_kv, head_dim, device="cuda", dtype=dtype, generator=g)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


def _assert_backward_like_naive(q, k, v, causal, dtype):
    """o, dq, dk, dv of our kernels against the fp64 oracle, each within twice naive's error."""
    do = torch.randn_like(q)
    ref = oracle_with_grads(q, k, v, do, causal=causal)
    o = naive_attention(q, k, v, causal=causal)
    o.backward(do)
    naive_errs = [relative_error(a, b) for a, b in zip((o, q.grad, k.grad, v.grad), ref)]
    q.grad = k.grad = v.grad = None
    o = flash_attention(q, k, v, causal=causal)
    o.backward(do)
    for name, got, want, naive_err in zip(("o", "dq", "dk", "dv"), (o, q.grad, k.grad, v.grad), ref, naive_errs):
        err = relative_error(got, want)
        assert err <= 2 * naive_err + FLOOR[dtype], f"{name}: {err:.2e} vs naive {naive_err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "seq,head_dim", [(1, 64), (100, 64), (1000, 128), (4096, 64), (777, 256), (333, 16), (2048, 32)]
)
@pytest.mark.parametrize("impl", ["triton_flash", "triton_naive", "sdpa_flash", "sdpa_cudnn"])
def test_forward_matches_oracle(impl, seq, head_dim, causal, dtype):
    entry = REGISTRY[impl]
    if entry.unsupported_reason("cuda", dtype, head_dim):
        pytest.skip(entry.unsupported_reason("cuda", dtype, head_dim))
    if impl == "triton_naive" and seq > 1000:
        pytest.skip("row-per-program kernel: kept to N <= 1000 to bound test time")
    q, k, v = _inputs(2, 3, seq, seq, head_dim, dtype)
    ref = attention_oracle(q, k, v, causal=causal)
    naive_err = relative_error(naive_attention(q, k, v, causal=causal), ref)
    try:
        out = entry.fn(q, k, v, causal=causal)
    except Unsupported as err:
        pytest.skip(str(err))
    assert out.shape == q.shape and out.dtype == dtype
    err = relative_error(out, ref)
    assert err <= 2 * naive_err + FLOOR[dtype], f"{impl}: {err:.2e} vs naive {naive_err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [1000, 4096])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_backward_matches_oracle(seq, head_dim, causal, dtype):
    q, k, v = _inputs(1, 2, seq, seq, head_dim, dtype, requires_grad=True, seed=seq + head_dim)
    _assert_backward_like_naive(q, k, v, causal, dtype)


def test_forward_noncontiguous_and_long_causal_bf16():
    base = torch.randn(2, 2048, 4, 64, device="cuda", dtype=torch.bfloat16)  # BSHD storage
    q = k = v = base.transpose(1, 2)  # a BHSD view, not contiguous
    ref = attention_oracle(q, k, v, causal=True)
    naive_err = relative_error(naive_attention(q, k, v, causal=True), ref)
    assert relative_error(flash_attention(q, k, v, causal=True), ref) <= 2 * naive_err + FLOOR[torch.bfloat16]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("n_cols", [1, 1000, 4096, 5000])
def test_online_softmax_on_gpu(n_cols, dtype):
    from kernels import online_softmax

    x = (torch.randn(64, n_cols, device="cuda") * 4).to(dtype)
    x[0, : n_cols // 2] = float("-inf")
    want = torch.softmax(x.double(), dim=-1)
    tol = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-6}[dtype]
    torch.testing.assert_close(online_softmax(x).double(), want, rtol=0, atol=tol)


def test_timing_line_per_implementation(capsys):
    """One timing line per implementation (median do_bench) at the seed's shape, N=2048, with its
    error against fp32: the numbers are printed for the reader; speed targets live in
    `python -m profiler bench`, not in tests."""
    from attention_core.shape import Shape
    from profiler.measure.runner import run_case

    shape = Shape(4, 32, 2048, 2048, 64, "fp16")
    lines = []
    for impl in REGISTRY.values():
        result = run_case(impl, shape, "cuda", rep_ms=50)
        assert result.status in ("ok", "unsupported"), f"{impl.name}: {result.status} {result.message}"
        if result.status == "ok":
            assert result.timing.median_ms > 0 and result.max_rel_err < 1e-2
            lines.append(f"{impl.name:15s} {result.timing.median_ms:9.3f} ms {result.tflops:8.1f} TFLOP/s "
                         f"max rel err {result.max_rel_err:.1e}")
        else:
            lines.append(f"{impl.name:15s} unsupported: {result.message}")
    with capsys.disabled():
        print(f"\n{torch.cuda.get_device_name()} B4 H32 N2048 D64 fp16 forward\n" + "\n".join(lines))
    assert any(line.startswith("triton_flash") and "TFLOP/s" in line for line in lines)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q,seq_kv", [(1, 1), (1, 77), (3, 1000), (4, 32768), (16, 5000), (1, 131072)])
@pytest.mark.parametrize("heads,kv_heads", [(32, 8), (8, 1), (8, 8)], ids=["gqa", "mqa", "mha"])
@pytest.mark.parametrize("impl", ["triton_flash", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_repeat_kv"])
def test_decode_and_gqa_forward_match_oracle(impl, heads, kv_heads, seq_q, seq_kv, causal, dtype):
    """Decode shapes (our split-KV path) and grouped-query attention, against the fp64 oracle."""
    q, k, v = _inputs(1 if seq_kv > 32768 else 2, heads, seq_q, seq_kv, 128, dtype, kv_heads=kv_heads)
    ref = attention_oracle(q, k, v, causal=causal)
    naive_err = relative_error(naive_attention(q, k, v, causal=causal), ref)
    try:
        out = REGISTRY[impl].fn(q, k, v, causal=causal)
    except Unsupported as err:
        pytest.skip(str(err))
    err = relative_error(out, ref)
    assert err <= 2 * naive_err + FLOOR[dtype], f"{impl}: {err:.2e} vs naive {naive_err:.2e}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q,seq_kv", [(1, 1000), (4, 32768), (3, 1001)])
def test_decode_combine_under_pdl_matches_in_a_cuda_graph(seq_q, seq_kv, causal):
    """The combine kernel launched early (programmatic dependent launch, the default on sm_90+) waits
    for every split's partials: eager and CUDA-graph replays, with and without it, give the same bits,
    and those match the fp64 oracle."""
    from attention_core import split_kv
    from kernels.flash_decode import flash_decode_forward
    from profiler.measure.timing import graphed

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90 or later")
    q, k, v = _inputs(1, 64, seq_q, seq_kv, 128, torch.bfloat16, kv_heads=8)
    plan = split_kv.plan(1, 8, 8, seq_q, seq_kv)
    assert plan.splits > 1
    outs = []
    for pdl in (False, True):
        run = lambda pdl=pdl: flash_decode_forward(q, k, v, causal, 128 ** -0.5, plan, pdl=pdl)[0]  # noqa: E731
        outs.append(run())
        static = {}
        replay = graphed(lambda run=run, static=static: static.update(o=run()))  # the captured output
        static["o"].zero_()
        replay()
        torch.cuda.synchronize()
        outs.append(static["o"].clone())
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    err = relative_error(outs[0], attention_oracle(q, k, v, causal=causal))
    naive_err = relative_error(naive_attention(q, k, v, causal=causal), attention_oracle(q, k, v, causal=causal))
    assert err <= 2 * naive_err + FLOOR[torch.bfloat16]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads,kv_heads,seq_q,seq_kv", [(32, 8, 1000, 1000), (8, 1, 3, 4096), (16, 4, 777, 2000)])
def test_gqa_backward_matches_oracle(heads, kv_heads, seq_q, seq_kv, causal, dtype):
    q, k, v = _inputs(1, heads, seq_q, seq_kv, 128, dtype, requires_grad=True, seed=seq_q, kv_heads=kv_heads)
    _assert_backward_like_naive(q, k, v, causal, dtype)


def _assert_forward_like_oracle(q, k, v, o, causal, dtype, lse=None):
    """A forward's o within twice naive attention's error of the fp64 oracle (plus the dtype's floor) and, given, its
    logsumexp within 1e-3; k and v of grouped heads are repeated to q's heads for both."""
    group = q.shape[1] // k.shape[1]
    k_full, v_full = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    ref, ref_lse = attention_oracle(q, k_full, v_full, causal=causal, return_lse=True)
    naive_err = relative_error(naive_attention(q, k_full, v_full, causal=causal), ref)
    assert relative_error(o, ref) <= 2 * naive_err + FLOOR[dtype]
    if lse is not None:
        assert (lse.double().cpu() - ref_lse).abs().max().item() < 1e-3


def _needs_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Gluon forward runs on sm_90 (H100/H200) only")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q,seq_kv", [(1, 1), (77, 77), (128, 128), (1000, 1000), (300, 1000), (1000, 300),
                                          (3000, 3000), (4099, 4099)])
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (8, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gluon_forward_matches_oracle(head_dim, heads, kv_heads, seq_q, seq_kv, causal, dtype):
    """The sm_90 Gluon forward (the path triton_flash takes there, decode shapes apart) against the
    fp64 oracle: o within twice naive's error, the logsumexp to 1e-3. Called directly: at Nq = 1
    and 77 triton_flash takes the split-KV path instead."""
    from kernels.flash_fwd import forward_path
    from kernels.flash_fwd_hopper import hopper_forward

    _needs_sm90()
    q, k, v = _inputs(2, heads, seq_q, seq_kv, head_dim, dtype, kv_heads=kv_heads)
    assert seq_q < 1000 or forward_path(q, k, v) == "gluon-ws"
    o, lse = hopper_forward(q, k, v, causal, head_dim ** -0.5)
    _assert_forward_like_oracle(q, k, v, o, causal, dtype, lse)


# The variants docs/perf-notes.md ("Gluon forward") measured.
GLUON_VARIANTS = [
    HopperConfig(block_n=128, stages=2, overlap=True, pingpong=False, consumers=2, persistent=False),
    HopperConfig(block_n=128, stages=2, overlap=True, pingpong=True, consumers=2, persistent=True),
    HopperConfig(block_n=128, stages=3, overlap=True, pingpong=True, consumers=2, persistent=False),
    HopperConfig(block_n=128, stages=2, overlap=False, pingpong=False, consumers=2, persistent=True),
    HopperConfig(block_n=64, stages=2, overlap=True, pingpong=True, consumers=3, persistent=True),
    HopperConfig(block_n=128, stages=2, overlap=False, pingpong=True, consumers=3, persistent=False),
    HopperConfig(block_n=128, stages=2, overlap=False, pingpong=False, consumers=3, persistent=True),
    # O through a staging tile and a TMA store (round 16's default), one program per tile and persistent
    HopperConfig(block_n=128, stages=2, overlap=True, pingpong=True, consumers=2, persistent=True, o_tma=True),
    HopperConfig(block_n=128, stages=2, overlap=False, pingpong=False, consumers=3, persistent=False, o_tma=True),
]


@pytest.mark.parametrize("config", GLUON_VARIANTS)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gluon_variants_match_oracle(head_dim, config):
    """Each variant, causal at odd lengths with grouped heads, bf16."""
    from kernels.flash_fwd_hopper import hopper_forward

    _needs_sm90()
    if head_dim == 128 and config.consumers == 3:
        pytest.skip("three consumer warpgroups at head_dim 128 spill registers: not a variant we run")
    q, k, v = _inputs(2, 4, 1000, 1000, head_dim, torch.bfloat16, kv_heads=2)
    o, _ = hopper_forward(q, k, v, True, head_dim ** -0.5, config)
    _assert_forward_like_oracle(q, k, v, o, True, torch.bfloat16)


# Round 18's split_mask without round 19's row_partials (the row sums summed over the quad every key tile, as before
# round 19), on the defaults without a mask, run here causal too; the defaults (with both) run in
# test_gluon_forward_matches_oracle.
SPLIT_MASK_CONFIGS = {
    64: HopperConfig(block_n=128, stages=2, overlap=True, pingpong=True, consumers=3, persistent=True, o_tma=True,
                     split_mask=True, row_partials=False),
    128: HopperConfig(block_n=128, stages=2, overlap=True, pingpong=False, consumers=2, persistent=True, o_tma=True,
                      split_mask=True, row_partials=False),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q,seq_kv", [(1, 1), (77, 77), (128, 128), (1000, 1000), (300, 1000), (1000, 300),
                                          (4099, 4099)])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gluon_split_mask_matches_oracle(head_dim, seq_q, seq_kv, causal, dtype):
    """split_mask's configs without row_partials against the fp64 oracle on the odd shapes of
    test_gluon_forward_matches_oracle (one key tile, a ragged last tile, no unmasked tile, Nq != Nkv both ways),
    grouped heads."""
    from kernels.flash_fwd_hopper import hopper_forward

    _needs_sm90()
    q, k, v = _inputs(2, 8, seq_q, seq_kv, head_dim, dtype, kv_heads=2)
    o, lse = hopper_forward(q, k, v, causal, head_dim ** -0.5, SPLIT_MASK_CONFIGS[head_dim])
    _assert_forward_like_oracle(q, k, v, o, causal, dtype, lse)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("persistent", [False, True], ids=["tile", "persistent"])
@pytest.mark.parametrize("seq_q,seq_kv", [(1, 1), (77, 77), (128, 128), (300, 1000), (1000, 300), (1000, 1000),
                                          (2100, 2100)])
def test_gluon_causal_trim_matches_oracle(seq_q, seq_kv, persistent, dtype):
    """causal_trim (round 20: each consumer stops at its own rows' last key tile and only releases the program's
    later ones) in causal head_dim 64's three-consumer config, forced below Nq 1537 where the defaults run two
    consumers: one key tile, a ragged last tile, Nq != Nkv both ways (rows that see every key, keys past every row),
    grouped heads, one program per tile and persistent programs carrying the ring's phases across tiles."""
    from kernels.flash_fwd_hopper import CONFIGS, hopper_forward

    _needs_sm90()
    config = CONFIGS[64, True]._replace(persistent=persistent)
    assert config.causal_trim and config.consumers == 3
    q, k, v = _inputs(2, 8, seq_q, seq_kv, 64, dtype, kv_heads=2)
    o, lse = hopper_forward(q, k, v, True, 64 ** -0.5, config)
    _assert_forward_like_oracle(q, k, v, o, True, dtype, lse)


# (head_dim, batch, heads, kv_heads, seq_q, seq_kv): shapes whose tiles leave a partial last wave on 132 SMs (H100 and
# H200 SXM), so split_tail cuts it: 144 tiles (12 left, a key tile a chunk, the last one ragged), Nq != Nkv both ways,
# and 165 and 154 tiles of 33 key tiles (chunks of 9 and 6, the last shorter); keys a multiple of 128: 160 tiles (28
# left, 4 chunks of 8 key tiles) and 133 tiles (one left, 19 chunks of one key tile).
SPLIT_TAIL_SHAPES = [(128, 2, 9, 3, 1000, 1000), (128, 2, 24, 8, 300, 1000), (128, 2, 9, 3, 1000, 300),
                     (128, 1, 5, 5, 4099, 4099), (64, 2, 12, 4, 1000, 1000), (64, 1, 7, 7, 4099, 4099),
                     (128, 1, 5, 5, 4096, 4096), (128, 1, 7, 7, 2432, 2432)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("bshd", [False, True], ids=["bhsd", "bshd"])
@pytest.mark.parametrize("head_dim,batch,heads,kv_heads,seq_q,seq_kv", SPLIT_TAIL_SHAPES)
def test_gluon_split_tail_matches_oracle(head_dim, batch, heads, kv_heads, seq_q, seq_kv, bshd, dtype):
    """split_tail (the last wave's tiles cut by keys, merged by kernels.tail_combine) against the fp64 oracle: o and
    the logsumexp of every row, the merged tail rows and rows past Nq included; q, k, v and so o as BSHD views too."""
    from kernels.flash_fwd_hopper import CONFIGS, _launch_plan, hopper_forward

    _needs_sm90()
    q, k, v = _inputs(batch, heads, seq_q, seq_kv, head_dim, dtype, kv_heads=kv_heads)
    if bshd:
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    config = CONFIGS[head_dim, False]._replace(split_tail=True)
    plan = _launch_plan(q, k, v, False, config, None, None)
    if plan.tail is None:
        pytest.skip(f"no partial last wave on {torch.cuda.get_device_properties(0).multi_processor_count} SMs")
    o, lse = hopper_forward(q, k, v, False, head_dim ** -0.5, config)
    assert o.transpose(1, 2).is_contiguous() == bshd
    _assert_forward_like_oracle(q, k, v, o, False, dtype, lse)


def test_gluon_split_tail_merges_a_chunk_per_program():
    """One tail tile of 132 key tiles (133 tiles of 128 rows on 132 SMs): cut into 132 chunks of one key tile, as
    many as the merge takes at once (kernels.tail_combine pads them to 256), against the fp64 oracle."""
    from kernels.flash_fwd_hopper import CONFIGS, _launch_plan, hopper_forward

    _needs_sm90()
    q, k, v = _inputs(1, 7, 2432, 132 * 128, 128, torch.bfloat16, kv_heads=7)
    config = CONFIGS[128, False]._replace(split_tail=True)
    plan = _launch_plan(q, k, v, False, config, None, None)
    if torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("the shape is cut for 132 SMs (H100 and H200 SXM)")
    assert (plan.tail.tail, plan.tail.splits, plan.tail.chunk) == (1, 132, 1)
    o, lse = hopper_forward(q, k, v, False, 128 ** -0.5, config)
    _assert_forward_like_oracle(q, k, v, o, False, torch.bfloat16, lse)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [1000, 4099])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gluon_forward_writes_a_bshd_view_by_tma(head_dim, seq, causal):
    """q, k, v as BSHD views (transformers' layout): the default forward's O, stored by TMA on O's own strides,
    comes back as a BSHD view too, with the oracle's values. (A box written past a sequence's end would show here only
    where it landed after the next batch's rows were stored; compute-sanitizer's memcheck is the check for that.)"""
    from kernels.flash_fwd_hopper import default_config, hopper_forward

    _needs_sm90()
    assert default_config(head_dim, causal, seq).o_tma
    q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in _inputs(2, 4, seq, seq, head_dim,
                                                                               torch.bfloat16, kv_heads=2))
    o, lse = hopper_forward(q, k, v, causal, head_dim ** -0.5)
    assert o.transpose(1, 2).is_contiguous()
    _assert_forward_like_oracle(q, k, v, o, causal, torch.bfloat16, lse)


def test_gluon_path_falls_back_to_the_portable_kernel(monkeypatch):
    """What the Gluon forward does not take runs the portable kernel, and forward_path says so."""
    from kernels.flash_fwd import flash_attention_forward, forward_path

    _needs_sm90()
    q, k, v = _inputs(1, 2, 300, 300, 64, torch.float16)
    assert forward_path(q, k, v) == "gluon-ws"
    assert forward_path(q.transpose(1, 2).contiguous().transpose(1, 2), k, v) == "gluon-ws"  # a BSHD view too
    strided = q.transpose(-1, -2).contiguous().transpose(-1, -2)  # head_dim not unit-stride: no TMA descriptor
    assert forward_path(strided, k, v) == "tiled"
    assert forward_path(*_inputs(1, 2, 300, 300, 32, torch.float16)) == "tiled"
    assert forward_path(*_inputs(1, 2, 300, 300, 64, torch.float32)) == "tiled"
    with pytest.raises(ValueError, match="TMA descriptors cannot read q"):
        flash_attention_forward(strided, k, v, gluon=True)
    o, _ = flash_attention_forward(strided, k, v)
    assert relative_error(o, attention_oracle(strided, k, v)) < 5e-3
    assert forward_path(q, k, v, causal=True) == "tiled"  # PORTABLE_UP_TO: causal head_dim 64 up to Nq 1024
    long_q = _inputs(1, 2, 1025, 1025, 64, torch.float16)
    assert forward_path(*long_q, causal=True) == "gluon-ws"  # SHORT_CAUSAL's config
    o, _ = flash_attention_forward(*long_q, causal=True)
    assert relative_error(o, attention_oracle(*long_q, causal=True)) < 5e-3
    assert forward_path(*_inputs(1, 2, 300, 300, 128, torch.float16), causal=True) == "gluon-ws"
    monkeypatch.setenv("ATTN_GLUON", "0")
    assert forward_path(q, k, v) == "tiled"


def test_capture_row_names_the_gluon_path():
    """A case run on sm_90 records the paths it took, and its tile bytes follow the Gluon tiles."""
    from attention_core.costing import Tiles
    from attention_core.shape import Shape
    from kernels import flash_bwd_hopper, flash_fwd_hopper
    from profiler.measure.runner import run_case
    from profiler.model.cost import cost_of
    from profiler.model.fused import onepass_backward_bytes, tile_bytes

    _needs_sm90()
    costing = REGISTRY["triton_flash"].costing
    # The backward takes the Gluon kernel at head_dim 64 and 128; ATTN_GLUON=0 would give "tiled bwd".
    for head_dim in (64, 128):
        shape = Shape.square(2, 4, 1024, head_dim, dtype="fp16", mode="fwd+bwd")
        result = run_case(REGISTRY["triton_flash"], shape, "cuda", rep_ms=5)
        assert result.status == "ok" and result.path == "gluon-ws fwd, gluon-ws bwd", (result.status, result.message,
                                                                                     result.path)
        forward = tile_bytes(shape.with_mode("fwd"), Tiles(flash_fwd_hopper.forward_tile(head_dim)))
        backward = onepass_backward_bytes(shape.with_mode("bwd"), flash_bwd_hopper.backward_tile(head_dim))
        assert cost_of(costing, shape, path=result.path).tile_bytes == pytest.approx(forward + backward)


def test_a_timed_row_keeps_the_clock_and_power_nvml_read(monkeypatch):
    """On a GPU with NVML (profiler.measure.gpu_state): a timing keeps the SM clock and the board power read beside it,
    run metadata says which power reading that is, and ATTN_NVML=0 reads nothing."""
    from profiler.measure.gpu_state import nvml
    from profiler.measure.meta import run_metadata
    from profiler.measure.timing import measure

    if nvml() is None:
        pytest.skip("no NVML here (pip install nvidia-ml-py)")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    timing = measure(lambda: a @ a, "cuda", rep_ms=50)
    assert 300 < timing.sm_clock_mhz < 3000 and 20 < timing.power_w < 2000, timing  # MHz and W, not kHz and mW
    assert run_metadata("cuda")["nvml_power"] in ("instant", "average")
    monkeypatch.setenv("ATTN_NVML", "0")
    off = measure(lambda: a @ a, "cuda", rep_ms=20)
    assert off.sm_clock_mhz is None and off.power_w is None and run_metadata("cuda")["nvml_power"] is None


def _assert_gluon_backward_like_naive(q, k, v, causal, dtype, config=None):
    """dq, dk, dv of the Gluon backward (sm_90) against the fp64 oracle, each within twice naive's
    error; the forward is ours, as in a training step."""
    from kernels.flash_bwd import flash_attention_backward
    from kernels.flash_bwd_hopper import hopper_backward
    from kernels.flash_fwd import flash_attention_forward

    do = torch.randn_like(q)
    ref = oracle_with_grads(q, k, v, do, causal=causal)
    qn, kn, vn = (t.clone().requires_grad_(True) for t in (q, k, v))
    naive_attention(qn, kn, vn, causal=causal).backward(do)
    scale = q.shape[-1] ** -0.5
    o, lse = flash_attention_forward(q, k, v, causal=causal, sm_scale=scale)
    if config is None:
        grads = flash_attention_backward(do, q, k, v, o, lse, causal, scale, gluon=True)
    else:
        grads = hopper_backward(do, q, k, v, o, lse, causal, scale, config)
    for name, got, naive, want in zip(("dq", "dk", "dv"), grads, (qn.grad, kn.grad, vn.grad), ref[1:]):
        err, naive_err = relative_error(got, want), relative_error(naive, want)
        assert err <= 2 * naive_err + FLOOR[dtype], f"{name}: {err:.2e} vs naive {naive_err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads,kv_heads,seq_q,seq_kv", [(2, 2, 1, 1), (2, 2, 100, 100), (3, 3, 1000, 1000),
                                                          (4, 4, 128, 128), (8, 2, 777, 777), (4, 1, 200, 333),
                                                          (4, 2, 333, 200), (4, 4, 64, 1000), (2, 2, 4096, 4096)])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gluon_backward_matches_oracle(head_dim, heads, kv_heads, seq_q, seq_kv, causal, dtype):
    """The sm_90 Gluon backward (kernels/flash_bwd_hopper.py) at one row, ragged tiles, grouped and
    multi-query heads, Nq != Nkv both ways, causal: the cases of scripts/perf_experiments/gluon_bwd_probe.py."""
    _needs_sm90()
    q, k, v = _inputs(2 if seq_q == 1000 else 1, heads, seq_q, seq_kv, head_dim, dtype, seed=seq_q + head_dim,
                      kv_heads=kv_heads)
    _assert_gluon_backward_like_naive(q, k, v, causal, dtype)


@pytest.mark.parametrize("persistent,dq_cols", [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gluon_backward_variants_match_oracle(head_dim, persistent, dq_cols):
    """The variants docs/perf-notes.md ("Gluon backward") timed, causal with grouped heads, bf16.
    (dQ by columns at head_dim 64 would split K inside one 128-byte swizzle row: not run.)"""
    from kernels.flash_bwd_hopper import CONFIGS

    _needs_sm90()
    if head_dim == 64 and dq_cols:
        pytest.skip("dQ by columns needs head_dim 128")
    # They were timed with keys as the wgmma rows; at head_dim 128 the causal default takes query_rows, whose
    # P staging beside whole-width dQ shares would need 246 KB of shared memory (sm_90 has 227 KB).
    config = CONFIGS[head_dim, True]._replace(persistent=persistent, dq_cols=dq_cols,
                                              query_rows=CONFIGS[head_dim, True].query_rows and dq_cols)
    q, k, v = _inputs(1, 4, 1000, 1000, head_dim, torch.bfloat16, kv_heads=2)
    _assert_gluon_backward_like_naive(q, k, v, True, torch.bfloat16, config)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch,heads,kv_heads,seq_q,seq_kv", [(1, 2, 2, 1, 1), (1, 3, 3, 1000, 1000),
                                                                (1, 8, 2, 777, 777), (1, 4, 1, 200, 333),
                                                                (1, 4, 2, 333, 200), (1, 4, 4, 64, 1000),
                                                                (2, 16, 16, 4096, 4096)])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gluon_backward_with_query_rows_matches_oracle(head_dim, batch, heads, kv_heads, seq_q, seq_kv, causal, dtype):
    """S and dP the right way up, P and dS through shared memory (BackwardConfig.query_rows, the
    layout FlashAttention-3 takes at head_dim 128): ragged, grouped, Nq != Nkv both ways, and at
    B2 H16 N4096 more key blocks than SMs, so persistent programs carry the ring and barrier
    phases from one key block to the next."""
    from kernels.flash_bwd_hopper import CONFIGS

    _needs_sm90()
    config = CONFIGS[head_dim, causal]._replace(query_rows=True)
    if head_dim == 64:
        # The default's 128-query tile leaves no room for P staging beside whole-width dQ shares (258 KB of
        # shared memory; sm_90 has 227 KB): the form as rounds 5 and 6 timed it, with 64 queries.
        config = config._replace(block_m=64)
    q, k, v = _inputs(batch, heads, seq_q, seq_kv, head_dim, dtype, seed=seq_q + head_dim + 7, kv_heads=kv_heads)
    _assert_gluon_backward_like_naive(q, k, v, causal, dtype, config)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch,heads,kv_heads,seq_q,seq_kv", [(1, 2, 2, 1, 1), (1, 8, 2, 777, 777),
                                                                (1, 4, 2, 333, 200), (2, 16, 16, 4096, 4096)])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gluon_backward_with_the_other_dq_staging_matches_oracle(head_dim, batch, heads, kv_heads, seq_q, seq_kv,
                                                                 causal, dtype):
    """dQ staged the other way from the default (BackwardConfig.dq_frag: every default stages in fragment order
    since round 12, so this is the swizzled tile), so both orders of the fp32 buffer and both of _dq_convert's
    reads stay checked at both head dims: ragged, grouped, Nq != Nkv, more key blocks than SMs."""
    from kernels.flash_bwd_hopper import CONFIGS

    _needs_sm90()
    config = CONFIGS[head_dim, causal]._replace(dq_frag=not CONFIGS[head_dim, causal].dq_frag)
    q, k, v = _inputs(batch, heads, seq_q, seq_kv, head_dim, dtype, seed=seq_q + head_dim + 13, kv_heads=kv_heads)
    _assert_gluon_backward_like_naive(q, k, v, causal, dtype, config)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch,heads,kv_heads,seq_q,seq_kv,bshd", [(1, 2, 2, 1, 1, False), (1, 8, 2, 777, 777, False),
                                                                     (1, 4, 2, 333, 200, True),
                                                                     (2, 16, 16, 4096, 4096, False),
                                                                     (2, 8, 4, 1000, 1777, True)])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gluon_backward_with_tma_dkv_stores_matches_oracle(head_dim, batch, heads, kv_heads, seq_q, seq_kv, bshd,
                                                           causal, dtype):
    """dK and dV stored by TMA from the dQ staging tile (BackwardConfig.dkv_tma: both at once at head_dim 64, one
    after the other at 128; rounds 14 and 15): a ragged last key block (TMA drops its rows past Nkv), grouped heads,
    more key blocks than SMs, and gradients in a BSHD view's layout (their descriptors on its strides)."""
    from kernels.flash_bwd_hopper import CONFIGS

    _needs_sm90()
    config = CONFIGS[head_dim, causal]._replace(dkv_tma=True)
    q, k, v = _inputs(batch, heads, seq_q, seq_kv, head_dim, dtype, seed=seq_q + 17, kv_heads=kv_heads)
    if bshd:  # the same values, laid out (batch, seq, heads, head_dim)
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    _assert_gluon_backward_like_naive(q, k, v, causal, dtype, config)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype,persistent", [(torch.float16, False), (torch.bfloat16, True)],
                         ids=["fp16-per-block", "bf16-persistent"])
@pytest.mark.parametrize("batch,heads,kv_heads,seq_q,seq_kv", [(1, 2, 2, 1, 1), (1, 3, 3, 1000, 1000),
                                                                (1, 8, 2, 777, 777), (1, 4, 1, 200, 333),
                                                                (1, 4, 2, 333, 200), (1, 4, 4, 64, 1000),
                                                                (2, 16, 16, 4096, 4096), (4, 16, 8, 1000, 1777)])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gluon_backward_masked_first_matches_oracle(head_dim, batch, heads, kv_heads, seq_q, seq_kv, dtype,
                                                    persistent, causal):
    """A key block's masked query tiles (the causal diagonal and a ragged end) walked first, then the
    clean ones (BackwardConfig.masked_first): the loader and both consumers must agree on that order,
    across key blocks of one persistent program too (B2 H16 N4096, and B4 H16/8 Nq1000 Nkv1777: 448
    ragged key blocks, grouped heads)."""
    from kernels.flash_bwd_hopper import CONFIGS

    _needs_sm90()
    config = CONFIGS[head_dim, causal]._replace(masked_first=True, persistent=persistent)
    q, k, v = _inputs(batch, heads, seq_q, seq_kv, head_dim, dtype, seed=seq_q + head_dim + 11, kv_heads=kv_heads)
    _assert_gluon_backward_like_naive(q, k, v, causal, dtype, config)


def test_gluon_backward_is_the_default_on_sm90():
    """On sm_90 the default backward takes the Gluon kernel at head_dim 64 and 128; gluon=True/False
    force either (capture rows:
    test_capture_row_names_the_gluon_path)."""
    from kernels.flash_bwd import backward_path

    _needs_sm90()
    for head_dim in (64, 128):
        q, k, v = _inputs(1, 2, 256, 256, head_dim, torch.bfloat16)
        assert backward_path(q, k, v) == backward_path(q, k, v, gluon=True) == "gluon-ws"
        assert backward_path(q, k, v, gluon=False) == "tiled"
