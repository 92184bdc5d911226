"""Our Triton FlashAttention backward against fp64 autograd through the oracle (CPU interpreter)."""

from __future__ import annotations

import warnings

import pytest
import torch

from kernels import flash_attention
from kernels.flash_bwd import flash_attention_backward
from kernels.reference import naive_attention, oracle_with_grads, relative_error

FLOOR = {torch.float16: 1e-3, torch.float32: 1e-6}
ZERO_ATOL = {torch.float16: 1e-2, torch.float32: 1e-5}


def _inputs(batch, heads, seq_q, seq_kv, head_dim, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)

    def rand(rows):
        return torch.randn(batch, heads, rows, head_dim, generator=g).to(dtype).requires_grad_(True)

    q, k, v = rand(seq_q), rand(seq_kv), rand(seq_kv)
    do = torch.randn(batch, heads, seq_q, head_dim, generator=g).to(dtype)
    return q, k, v, do


def _grads(fn, q, k, v, do, causal):
    for t in (q, k, v):
        t.grad = None
    o = fn(q, k, v, causal=causal)
    o.backward(do)
    return o.detach(), q.grad.clone(), k.grad.clone(), v.grad.clone()


def _check_grads(q, k, v, do, causal):
    ref = oracle_with_grads(q, k, v, do, causal=causal)
    naive = _grads(naive_attention, q, k, v, do, causal)
    ours = _grads(flash_attention, q, k, v, do, causal)
    for name, got, want, base in zip(("o", "dq", "dk", "dv"), ours, ref, naive):
        assert got.dtype == q.dtype and got.shape == want.shape
        assert torch.isfinite(got).all(), f"{name} has non-finite values"
        if not want.any():
            # With a single visible key dQ is exactly 0 (softmax of one score is constant); a relative
            # error is undefined there, so bound the rounding noise of dS = P (dP - delta) instead.
            assert got.abs().max() <= ZERO_ATOL[q.dtype], f"{name}: {got.abs().max():.1e} where 0 is exact"
            continue
        err, naive_err = relative_error(got, want), relative_error(base, want)
        assert err <= 2 * naive_err + FLOOR[q.dtype], f"{name}: error {err:.2e}, naive {naive_err:.2e}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [1, 77, 129, 300])
@pytest.mark.parametrize("head_dim", [16, 64, 128])
def test_backward_fp32_odd_lengths(head_dim, seq, causal):
    _check_grads(*_inputs(2, 1, seq, seq, head_dim, torch.float32, seed=seq), causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [1, 77, 200])
def test_backward_fp16(seq, causal):
    _check_grads(*_inputs(1, 2, seq, seq, 64, torch.float16, seed=seq), causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q,seq_kv", [(40, 100), (100, 40), (1, 33)])
def test_backward_different_q_and_kv_lengths(seq_q, seq_kv, causal):
    _check_grads(*_inputs(1, 2, seq_q, seq_kv, 32, torch.float32, seed=seq_q), causal)


def test_backward_non_contiguous_inputs():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 70, 3, 32, generator=g).transpose(1, 2).requires_grad_(True)  # BSHD storage
    k = torch.randn(2, 3, 70, 64, generator=g)[..., ::2].requires_grad_(True)  # strided head_dim
    v = torch.randn(2, 3, 70, 32, generator=g).requires_grad_(True)
    do = torch.randn(2, 70, 3, 32, generator=g).transpose(1, 2)
    assert not q.is_contiguous() and not k.is_contiguous() and not do.is_contiguous()
    _check_grads(q, k, v, do, causal=True)


def test_gradcheck_fp32():
    # Finite differences in fp32: central differences with eps 1e-3 are good to about 1e-3. Fast mode
    # checks random projections of the Jacobian, which keeps the interpreter's work small.
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 9, 16, generator=g, requires_grad=True) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gradcheck warns that the inputs are not fp64
        for causal in (False, True):
            assert torch.autograd.gradcheck(
                lambda q, k, v, c=causal: flash_attention(q, k, v, causal=c), (q, k, v),
                eps=1e-3, atol=3e-3, rtol=3e-3, fast_mode=True,
            )


def test_backward_rejects_a_gradient_of_the_wrong_shape_or_dtype():
    q, k, v, do = _inputs(1, 1, 8, 8, 16, torch.float32)
    from kernels import flash_attention_with_lse

    o, lse = flash_attention_with_lse(q, k, v)
    with pytest.raises(ValueError, match=r"gradient of o has shape \(1, 1, 4, 16\); it must match o \(1, 1, 8, 16\)"):
        flash_attention_backward(do[:, :, :4], q, k, v, o, lse, False, 0.25)
    with pytest.raises(TypeError, match="gradient of o has dtype torch.float16; it must match o"):
        flash_attention_backward(do.half(), q, k, v, o, lse, False, 0.25)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        flash_attention_backward(None, q, k, v, o, lse, False, 0.25)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):  # autograd's own check comes first
        flash_attention(q, k, v).backward(do[:, :, :4])


def test_backward_head_dim_256_is_a_clear_error():
    q, k, v, do = _inputs(1, 1, 4, 4, 256, torch.float32)
    o = flash_attention(q, k, v)  # the forward takes head_dim 256
    with pytest.raises(ValueError, match="backward supports head_dim in .* got 256"):
        o.backward(do)
