"""Every attention implementation against the fp64 oracle, on the CPU (Triton under the interpreter).

Tolerance rule: an implementation's relative error against fp64 is at most twice the error of
naive PyTorch attention in the same dtype, plus a small floor.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import Unsupported, flash_attention_with_lse, online_softmax
from kernels.reference import attention_oracle, naive_attention, relative_error
from profiler.registry import REGISTRY

FLOOR = {torch.float16: 1e-3, torch.float32: 1e-6}
CPU_IMPLS = ["naive", "triton_flash", "sdpa_flash", "sdpa_math"]


def _qkv(batch, heads, seq_q, seq_kv, head_dim, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, seq_q, head_dim, generator=g).to(dtype)
    k = torch.randn(batch, heads, seq_kv, head_dim, generator=g).to(dtype)
    v = torch.randn(batch, heads, seq_kv, head_dim, generator=g).to(dtype)
    return q, k, v


def _check(impl: str, q, k, v, causal: bool, sm_scale=None):
    ref = attention_oracle(q, k, v, causal=causal, sm_scale=sm_scale)
    naive_err = relative_error(naive_attention(q, k, v, causal=causal, sm_scale=sm_scale), ref)
    out = REGISTRY[impl].fn(q, k, v, causal=causal, sm_scale=sm_scale)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.isfinite(out).all()
    err = relative_error(out, ref)
    assert err <= 2 * naive_err + FLOOR[q.dtype], f"{impl}: error {err:.2e}, naive {naive_err:.2e}"
    return err


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [1, 7, 100, 129, 300])
@pytest.mark.parametrize("head_dim", [16, 32, 64, 128])
@pytest.mark.parametrize("impl", CPU_IMPLS)
def test_forward_fp32_odd_lengths(impl, head_dim, seq, causal):
    q, k, v = _qkv(2, 1, seq, seq, head_dim, torch.float32, seed=seq * head_dim)
    _check(impl, q, k, v, causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [1, 100, 129])
@pytest.mark.parametrize("impl", CPU_IMPLS)
def test_forward_fp16(impl, seq, causal):
    q, k, v = _qkv(1, 2, seq, seq, 64, torch.float16, seed=seq)
    _check(impl, q, k, v, causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [1, 7, 65])
@pytest.mark.parametrize("head_dim", [16, 64])
def test_triton_naive(head_dim, seq, causal):
    # The row-per-program kernel is slow under the interpreter: fewer, shorter cases.
    q, k, v = _qkv(1, 2, seq, seq, head_dim, torch.float32, seed=seq)
    _check("triton_naive", q, k, v, causal)


@pytest.mark.parametrize("impl", ["naive", "triton_flash", "triton_naive", "sdpa_math"])
@pytest.mark.parametrize("seq_q,seq_kv", [(37, 100), (100, 37), (1, 50)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_different_q_and_kv_lengths(impl, seq_q, seq_kv, causal):
    q, k, v = _qkv(1, 2, seq_q, seq_kv, 32, torch.float32, seed=seq_q + seq_kv)
    _check(impl, q, k, v, causal)


@pytest.mark.parametrize("impl", ["naive", "triton_flash", "triton_naive", "sdpa_flash", "sdpa_math"])
def test_forward_non_contiguous_inputs(impl):
    # BSHD storage seen through a BHSD view (transpose), plus a strided slice of K and V.
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 45, 3, 32, generator=g).transpose(1, 2)
    kv = torch.randn(2, 3, 90, 32, generator=g)
    k, v = kv[:, :, ::2], kv[:, :, 1::2]
    assert not q.is_contiguous() and not k.is_contiguous()
    _check(impl, q, k, v, causal=True)


def test_forward_custom_scale():
    q, k, v = _qkv(1, 2, 50, 50, 64, torch.float32)
    _check("triton_flash", q, k, v, causal=False, sm_scale=0.3)


@pytest.mark.parametrize("block_m,block_n", [(32, 16), (32, 32), (64, 16)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_forward_explicit_configs(block_m, block_n, causal):
    # The benchmark's configs skip the autotuner; causal programs run longest-first, and a query
    # length that is not a multiple of either block leaves ragged tiles on both sides.
    from kernels.flash_fwd import flash_attention_forward

    q, k, v = _qkv(2, 2, 100, 100, 32, torch.float32, seed=3)
    config = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4, num_stages=1)
    o, lse = flash_attention_forward(q, k, v, causal=causal, config=config)
    ref_o, ref_lse = attention_oracle(q, k, v, causal=causal, return_lse=True)
    assert relative_error(o, ref_o) < 1e-6
    torch.testing.assert_close(lse.double(), ref_lse, rtol=0, atol=1e-5)


def test_flash_forward_rejects_a_key_tile_wider_than_the_query_tile():
    # With BLOCK_N > BLOCK_M a causal diagonal tile would straddle the unmasked and masked loops.
    from kernels.flash_fwd import flash_attention_forward

    q, k, v = _qkv(1, 1, 64, 64, 16, torch.float32)
    with pytest.raises(Exception, match="BLOCK_M % BLOCK_N != 0"):
        flash_attention_forward(q, k, v, causal=True, config=dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1))


def test_flash_logsumexp_matches_oracle():
    q, k, v = _qkv(2, 2, 77, 77, 64, torch.float32, seed=11)
    for causal in (False, True):
        o, lse = flash_attention_with_lse(q, k, v, causal=causal)
        ref_o, ref_lse = attention_oracle(q, k, v, causal=causal, return_lse=True)
        assert lse.shape == (2, 2, 77) and lse.dtype == torch.float32
        torch.testing.assert_close(lse.double(), ref_lse, rtol=0, atol=1e-5)
        assert relative_error(o, ref_o) < 1e-6


@settings(max_examples=10, deadline=None, derandomize=True)
@given(
    batch=st.integers(1, 2),
    heads=st.integers(1, 2),
    seq_q=st.integers(1, 90),
    seq_kv=st.integers(1, 90),
    head_dim=st.sampled_from([16, 32, 64]),
    causal=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float16]),
)
def test_flash_random_shapes(batch, heads, seq_q, seq_kv, head_dim, causal, dtype):
    q, k, v = _qkv(batch, heads, seq_q, seq_kv, head_dim, dtype, seed=seq_q * 97 + seq_kv)
    _check("triton_flash", q, k, v, causal)


def test_sdpa_backends_without_cuda_are_unsupported_not_crashes():
    q, k, v = _qkv(1, 1, 8, 8, 16, torch.float32)
    for name in ("sdpa_cudnn", "sdpa_efficient"):
        with pytest.raises(Unsupported, match="needs a CUDA device"):
            REGISTRY[name].fn(q, k, v)


def test_the_worked_example_of_the_online_softmax_seed():
    # Scores [2, 3, 5, 4] and values [10, 20, 30, 40] give 30.86 (second seed post).
    scores = torch.tensor([[2.0, 3.0, 5.0, 4.0]])
    p = online_softmax(scores)
    assert torch.allclose(p, torch.softmax(scores, dim=-1), atol=1e-7)
    assert round(float(p @ torch.tensor([10.0, 20.0, 30.0, 40.0])), 2) == 30.86


@pytest.mark.parametrize("n_cols", [1, 7, 1000, 1025, 3000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_online_softmax_matches_torch(n_cols, dtype):
    g = torch.Generator().manual_seed(n_cols)
    x = (torch.randn(3, 2, n_cols, generator=g) * 4).to(dtype)
    x[0, 0, : n_cols // 2] = float("-inf")  # masked entries, as causal attention produces
    want = torch.softmax(x.double(), dim=-1)
    got = online_softmax(x)
    assert got.shape == x.shape and got.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-3
    torch.testing.assert_close(got.double(), want, rtol=0, atol=tol)


def test_online_softmax_non_contiguous_rows():
    x = torch.randn(40, 30).t()  # rows are strided
    torch.testing.assert_close(online_softmax(x), torch.softmax(x, dim=-1), rtol=0, atol=1e-6)
