"""The fp8 forward (kernels/flash_fwd_fp8.py, and on sm_90 the Gluon kernel of kernels/flash_fwd_hopper.py it
routes to) on the GPU against the fp64 oracle on the values its e4m3 inputs and descales stand for; within
kernels.reference.TOLERANCE["fp8"] (e4m3's unit roundoff, P's rounding)."""

from __future__ import annotations

import pytest
import torch

from attention_core.shape import Shape
from kernels.flash_fwd_fp8 import (
    dequantize_fp8,
    flash_attention_fp8,
    fp8_path,
    keys_contiguous_layout,
    quantize_fp8,
    unsupported_on,
)
from kernels.flash_fwd_hopper import FP8_PORTABLE, hopper_forward
from kernels.reference import TOLERANCE, attention_oracle, relative_error
from profiler.measure.runner import run_case
from profiler.registry import REGISTRY

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(torch.cuda.is_available() and unsupported_on(torch.device("cuda")) is not None,
                       reason="needs fp8 tensor cores"),
]


SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
# Each kernel: the Triton one (V as Q and K are), and on sm_90 the Gluon one (V with its keys contiguous)
PATHS = ["tiled", pytest.param("gluon-ws", marks=pytest.mark.skipif(not SM90, reason="the Gluon kernel needs sm_90"))]


def _quantized(batch, heads, kv_heads, seq_q, seq_kv, head_dim, seed=0, scales=(0.5, 3.0, 40.0), path="tiled"):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def make(h, n, scale):
        return torch.randn(batch, h, n, head_dim, device="cuda", generator=g, dtype=torch.bfloat16) * scale

    out = [quantize_fp8(t) for t in (make(heads, seq_q, scales[0]), make(kv_heads, seq_kv, scales[1]),
                                     make(kv_heads, seq_kv, scales[2]))]
    if path == "gluon-ws":
        out[2] = (keys_contiguous_layout(out[2][0]), out[2][1])
    return out


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("seq_q, seq_kv", [(1, 1), (77, 77), (300, 300), (1024, 1024), (128, 1000), (1000, 128)])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_forward_matches_the_oracle_on_its_dequantized_inputs(seq_q, seq_kv, head_dim, causal, path):
    (q8, dq), (k8, dk), (v8, dv) = _quantized(2, 4, 2, seq_q, seq_kv, head_dim, path=path)  # GQA: 4 heads on 2
    if path == "gluon-ws":  # the kernel itself, also where the default routes to the Triton one (FP8_PORTABLE)
        o, lse = hopper_forward(q8, k8, v8, causal, head_dim ** -0.5, descales=(dq, dk, dv), out_dtype=torch.bfloat16)
    else:
        o, lse = flash_attention_fp8(q8, k8, v8, dq, dk, dv, causal=causal, return_lse=True, gluon=False)
    ref, ref_lse = attention_oracle(dequantize_fp8(q8, dq), dequantize_fp8(k8, dk), dequantize_fp8(v8, dv),
                                    causal=causal, return_lse=True)
    err = relative_error(o, ref)
    print(f"fp8 {path} vs oracle Nq{seq_q} Nkv{seq_kv} D{head_dim}{' causal' if causal else ''}: {err:.2e}")  # -s
    assert o.dtype == torch.bfloat16 and err <= TOLERANCE["fp8"]
    assert (lse.cpu().double() - ref_lse).abs().max().item() < 0.05  # the row's log-normaliser, in nats


@pytest.mark.parametrize("path", PATHS)
def test_fp8_forward_takes_strided_views(path):
    (q8, dq), (k8, dk), (v8, dv) = _quantized(1, 4, 4, 500, 500, 128, seed=1, path=path)
    views = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q8, k8)]  # BSHD memory, BHSD view
    views.append(v8 if path == "gluon-ws" else v8.transpose(1, 2).contiguous().transpose(1, 2))
    assert fp8_path(*views, causal=True) == path
    o = flash_attention_fp8(*views, dq, dk, dv, causal=True)
    ref = attention_oracle(*(dequantize_fp8(t, d) for t, d in ((q8, dq), (k8, dk), (v8, dv))), causal=True)
    assert relative_error(o, ref) <= TOLERANCE["fp8"]


def test_the_descales_are_applied():
    """Scaling K's stored values and dividing its descale by the same power of two changes nothing."""
    (q8, dq), (k8, dk), (v8, dv) = _quantized(1, 2, 2, 256, 256, 64, seed=2)
    o = flash_attention_fp8(q8, k8, v8, dq, dk, dv)
    half = (k8.float() / 2).to(k8.dtype)
    o2 = flash_attention_fp8(q8, half, v8, dq, dk * 2, dv)
    assert relative_error(o2, o) < 2.0**-5  # halving moves subnormal e4m3 values only


def test_the_registry_runs_an_fp8_case_and_checks_it():
    result = run_case(REGISTRY["triton_flash_fp8"], Shape(1, 8, 1000, 1000, 128, dtype="fp8", causal=True), "cuda",
                      rep_ms=20)
    assert result.status == "ok", result.message
    assert result.max_rel_err is not None and result.max_rel_err <= TOLERANCE["fp8"]
    assert result.path == ("gluon-ws" if SM90 else "tiled")  # the profiler's fp8 V has its keys contiguous


@pytest.mark.skipif(not SM90, reason="the Gluon kernel needs sm_90")
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_the_default_routes_keys_contiguous_v_to_the_gluon_kernel(head_dim, causal):
    """Except where the Triton kernel measured faster (FP8_PORTABLE), and for V in Q's and K's order."""
    (q8, _), (k8, _), (v8, _) = _quantized(1, 2, 1, 300, 300, head_dim, path="tiled")
    assert fp8_path(q8, k8, v8, causal) == "tiled"
    want = "tiled" if (head_dim, causal) in FP8_PORTABLE else "gluon-ws"
    assert fp8_path(q8, k8, keys_contiguous_layout(v8), causal) == want


@pytest.mark.skipif(not SM90, reason="the Gluon kernel needs sm_90")
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gluon_and_triton_fp8_agree(head_dim):
    """The two kernels round the same P to e4m3 from nearly the same fp32 scores: their outputs differ by far
    less than either differs from the oracle."""
    (q8, dq), (k8, dk), (v8, dv) = _quantized(2, 8, 2, 1500, 1500, head_dim, seed=4, path="gluon-ws")
    for causal in (False, True):
        a, _ = hopper_forward(q8, k8, v8, causal, head_dim ** -0.5, descales=(dq, dk, dv), out_dtype=torch.bfloat16)
        b = flash_attention_fp8(q8, k8, v8, dq, dk, dv, causal=causal, gluon=False)
        print(f"fp8 gluon vs triton D{head_dim}{' causal' if causal else ''}: {relative_error(a, b):.2e}")
        assert relative_error(a, b) < 2.0**-7


@pytest.mark.parametrize("head_dim", [64, 128])
def test_v_with_its_keys_contiguous_gives_the_same_output(head_dim):
    """The fast order for V (keys contiguous: quantize_fp8(keys_contiguous=True)) changes the speed, not the
    result: the same e4m3 values in either memory order give the same output, to fp32 rounding."""
    (q8, dq), (k8, dk), (v8, dv) = _quantized(1, 4, 2, 700, 700, head_dim, seed=3)
    vt = keys_contiguous_layout(v8)
    assert vt.stride(2) == 1
    for causal in (False, True):
        a = flash_attention_fp8(q8, k8, v8, dq, dk, dv, causal=causal)
        b = flash_attention_fp8(q8, k8, vt, dq, dk, dv, causal=causal, gluon=False)
        assert relative_error(a, b) < 1e-6


@pytest.mark.skipif(not SM90, reason="the Gluon kernel needs sm_90")
def test_one_layout_in_two_output_dtypes():
    """The launch cache keys on the output dtype too: the same inputs asked for bf16, then fp16, then bf16 again
    come back in each dtype and right (a cached bf16 launch replayed with an fp16 output would write garbage)."""
    (q8, dq), (k8, dk), (v8, dv) = _quantized(1, 4, 2, 512, 512, 128, seed=5, path="gluon-ws")
    ref = attention_oracle(*(dequantize_fp8(t, d) for t, d in ((q8, dq), (k8, dk), (v8, dv))))
    for out_dtype in (torch.bfloat16, torch.float16, torch.bfloat16):
        o = flash_attention_fp8(q8, k8, v8, dq, dk, dv, out_dtype=out_dtype)
        assert o.dtype == out_dtype and relative_error(o, ref) <= TOLERANCE["fp8"]


@pytest.mark.skipif(not SM90, reason="the Gluon kernel needs sm_90")
@pytest.mark.parametrize("causal", [False, True])
def test_a_replayed_fp8_launch_reads_the_new_data_and_descales(causal):
    """Calls at one layout after the first reuse its launch plan and compiled kernel (kernels._launch); new values
    and new descales give what an uncached launch of the same configuration gives, bit for bit."""
    from kernels import flash_fwd_hopper

    flash_fwd_hopper._PLANS.clear(), flash_fwd_hopper._LAUNCHES.entries.clear()
    for seed in (6, 7, 8):
        (q8, dq), (k8, dk), (v8, dv) = _quantized(2, 8, 2, 777, 777, 128, seed=seed, path="gluon-ws")
        o, lse = flash_attention_fp8(q8, k8, v8, dq * seed, dk, dv, causal=causal, return_lse=True)
        config = flash_fwd_hopper.FP8_CONFIGS[128, causal]  # an explicit config: nothing kept, nothing reused
        ref_o, ref_lse = hopper_forward(q8, k8, v8, causal, 128 ** -0.5, config, descales=(dq * seed, dk, dv))
        assert torch.equal(o, ref_o) and torch.equal(lse, ref_lse)
    assert len(flash_fwd_hopper._LAUNCHES.entries) == 1


def test_observe_models_our_fp8_calls(tmp_path):
    """``observe`` around calls of flash_attention_fp8: one row per call shape, in fp8, with FLOPs, bytes and a rate
    (the run measured the fp8 matmul), causal read from the call."""
    import profiler
    from profiler.store import Capture

    (q8, dq), (k8, dk), (v8, dv) = _quantized(1, 8, 2, 2048, 2048, 128, seed=9, path="gluon-ws")
    with profiler.observe(out=tmp_path / "run", trace="none") as run:
        for _ in range(3):
            flash_attention_fp8(q8, k8, v8, dq, dk, dv, causal=True)
    rows = Capture(tmp_path / "run").results()
    assert len(rows) == 1 and run.summary.get("unmodelled_calls", {}) == {}
    row = rows.iloc[0]
    assert (row.impl, row["dtype"], bool(row.causal), row.kv_heads, row.calls) == ("triton_flash_fp8", "fp8", True, 2,
                                                                                   3)
    assert row.flops == 4 * 1 * 8 * 2048 * 2048 * 128 * 0.5  # per call; square causal: half
    assert row.tflops > 0 and row.hbm_bytes > 0
