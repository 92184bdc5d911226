"""fa4 on the GPU (`make test-gpu`): FlashAttention-4's forward and backward against the fp64 oracle.

Skipped where flash-attn-4 is not installed (``pip install '.[fa4]'``) or the GPU is not one FA4 runs
on (sm_90, sm_100). Same rule as tests/gpu/test_gpu_kernels.py: the error against the fp64 oracle is
at most about twice the naive PyTorch error in the same dtype plus a small floor, and within the
correctness gate's tolerance (kernels.reference.TOLERANCE) that a capture applies. Odd lengths (not
multiples of FA4's 128 or 192-row tiles), grouped- and multi-query heads, Nq != Nkv where FA4's
bottom-right causal mask is not ours (those raise Unsupported), fp16 and bf16.
"""

from __future__ import annotations

import pytest
import torch

from attention_core.shape import Shape
from kernels import Unsupported
from kernels.fa4 import import_error
from kernels.reference import TOLERANCE, attention_oracle, naive_attention, oracle_with_grads, relative_error
from profiler.measure.runner import run_case
from profiler.registry import REGISTRY

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(import_error() is not None, reason=str(import_error())),
]

FLOOR = {torch.float16: 1e-3, torch.bfloat16: 8e-3}
DTYPES = [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")]
NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def _runs_here(dtype, head_dim, backward=False):
    reason = REGISTRY["fa4"].unsupported_reason("cuda", dtype, head_dim, backward=backward, grouped=True)
    if reason:
        pytest.skip(reason)


def _inputs(batch, heads, kv_heads, seq_q, seq_kv, head_dim, dtype, requires_grad=False):
    g = torch.Generator(device="cuda").manual_seed(seq_q * 7 + seq_kv)
    shapes = [(batch, heads, seq_q, head_dim), *[(batch, kv_heads, seq_kv, head_dim)] * 2]
    return [torch.randn(s, device="cuda", dtype=dtype, generator=g).requires_grad_(requires_grad) for s in shapes]


def _assert_close(name, got, want, naive_err, dtype):
    err = relative_error(got, want)
    assert err <= 2 * naive_err + FLOOR[dtype], f"{name}: {err:.2e} vs naive {naive_err:.2e}"
    assert err <= TOLERANCE[NAMES[dtype]], f"{name}: {err:.2e} above the gate's {TOLERANCE[NAMES[dtype]]:.2e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch,heads,kv_heads,seq_q,seq_kv,head_dim", [
    (2, 4, 4, 1000, 1000, 128),
    (2, 8, 2, 777, 777, 64),
    (1, 8, 1, 300, 1000, 128),
    (1, 4, 4, 1000, 300, 64),
    (2, 8, 2, 1, 4099, 128),
    (1, 4, 4, 333, 333, 96),
    (1, 2, 2, 513, 513, 256),
])
def test_forward_matches_oracle(batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal, dtype):
    _runs_here(dtype, head_dim)
    q, k, v = _inputs(batch, heads, kv_heads, seq_q, seq_kv, head_dim, dtype)
    if causal and seq_q != seq_kv:
        with pytest.raises(Unsupported, match="bottom-right"):
            REGISTRY["fa4"].fn(q, k, v, causal=True)
        return
    ref = attention_oracle(q, k, v, causal=causal)
    o = REGISTRY["fa4"].fn(q, k, v, causal=causal)
    assert o.shape == q.shape and o.dtype == dtype
    _assert_close("o", o, ref, relative_error(naive_attention(q, k, v, causal=causal), ref), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch,heads,kv_heads,seq_q,seq_kv,head_dim", [
    (1, 4, 4, 1000, 1000, 128),
    (2, 8, 2, 777, 777, 64),
    (1, 8, 1, 300, 1000, 128),
])
def test_backward_matches_oracle(batch, heads, kv_heads, seq_q, seq_kv, head_dim, causal, dtype):
    if causal and seq_q != seq_kv:
        pytest.skip("causal with Nq != Nkv is unsupported (test_forward_matches_oracle checks it raises)")
    _runs_here(dtype, head_dim, backward=True)
    q, k, v = _inputs(batch, heads, kv_heads, seq_q, seq_kv, head_dim, dtype, requires_grad=True)
    do = torch.randn_like(q)
    ref = oracle_with_grads(q, k, v, do, causal=causal)
    o = naive_attention(q, k, v, causal=causal)
    o.backward(do)
    naive_errs = [relative_error(a, b) for a, b in zip((o, q.grad, k.grad, v.grad), ref)]
    q.grad = k.grad = v.grad = None
    o = REGISTRY["fa4"].fn(q, k, v, causal=causal)
    o.backward(do)
    for name, got, want, naive_err in zip(("o", "dq", "dk", "dv"), (o, q.grad, k.grad, v.grad), ref, naive_errs):
        assert got.shape == want.shape, name
        _assert_close(name, got, want, naive_err, dtype)


@pytest.mark.parametrize("seq_kv,status", [(1024, "ok"), (2000, "unsupported")])
def test_a_capture_case_is_checked_and_timed_or_refused(seq_kv, status):
    """The capture's path: the correctness gate (output and gradients) and the timing, or the reason."""
    _runs_here(torch.bfloat16, 128, backward=True)
    shape = Shape(2, 8, 1024, seq_kv, 128, "bf16", causal=True, mode="fwd+bwd", kv_heads=2)
    result = run_case(REGISTRY["fa4"], shape, "cuda", rep_ms=20)
    assert result.status == status, result.message
    if status == "ok":
        assert result.max_rel_err <= TOLERANCE["bf16"] and result.timing.median_ms > 0
    else:
        assert "bottom-right" in result.message
