"""Memory layouts on the CPU: which ones a TMA descriptor can read (the Gluon kernels' test, run on the
GPU by tests/gpu/test_layouts_gpu.py), and the portable kernels (under the interpreter) on BSHD views and
packed-QKV slices: values against the fp64 oracle, outputs and gradients in their inputs' memory order."""

from __future__ import annotations

import pytest
import torch

from kernels import flash_attention
from kernels._layout import empty_in_layout
from kernels.hopper_common import tma_layout_reason, tma_strides
from kernels.reference import oracle_with_grads, relative_error


def _order(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(sorted(range(t.dim()), key=lambda d: -t.stride(d)))


def _against_the_oracle(q, k, v, causal: bool, seed: int):
    """o and (dq, dk, dv) of flash_attention on these inputs (each a leaf as it lies in memory), each
    within 1e-5 of the fp64 oracle; returns them for checks of their layout."""
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed))
    ref = oracle_with_grads(*[t.detach() for t in (q, k, v)], do, causal=causal)
    out = flash_attention(*leaves, causal=causal)
    grads = torch.autograd.grad(out, leaves, do)
    for name, got, want in zip(("o", "dq", "dk", "dv"), (out, *grads), ref):
        assert relative_error(got, want) <= 1e-5, name
    return out, grads


def _layouts(batch, heads, kv_heads, seq, head_dim, dtype=torch.float32, seed=0):
    """name -> (q, k, v) with equal values: contiguous BHSD, a BSHD view, a packed QKV projection's slices."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(batch, seq, heads + 2 * kv_heads, head_dim, generator=g, dtype=dtype)
    packed = (qkv[:, :, :heads].transpose(1, 2), qkv[:, :, heads:heads + kv_heads].transpose(1, 2),
              qkv[:, :, heads + kv_heads:].transpose(1, 2))
    return {"bhsd": tuple(t.contiguous() for t in packed),
            "bshd": tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in packed),
            "packed": packed}


def test_tma_reads_contiguous_bshd_and_packed_layouts_at_16_bit_head_dims():
    for head_dim in (64, 128):
        for name, tensors in _layouts(2, 8, 2, 33, head_dim, torch.float16).items():
            assert [tma_layout_reason(t) for t in tensors] == [None] * 3, (name, head_dim)


def test_tma_refuses_what_a_tensor_map_cannot_describe():
    q = torch.randn(1, 4, 33, 64, dtype=torch.float16)
    d_strided = q.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert tma_layout_reason(d_strided) == "its head_dim is not unit-stride (strides (8448, 2112, 1, 33))"
    misaligned = torch.empty(q.numel() + 1, dtype=torch.float16)[1:].view(q.shape)
    assert tma_layout_reason(misaligned) == "its address is not 16-byte aligned (offset 2 bytes)"
    # 33 heads of head_dim 4: a head's stride, 8 bytes, is not a multiple of 16
    odd = torch.randn(1, 5, 33, 4, dtype=torch.float16).transpose(1, 2)
    assert tma_layout_reason(odd) == "stride 4 x 2 bytes is not a multiple of 16 bytes (strides (660, 4, 132, 1))"


def test_the_sm90_answer_is_kept_per_layout_and_address_alignment(monkeypatch):
    """sm90_reason keeps its answer per (device, dtype, shape, strides, address mod 16, ATTN_GLUON): a model's
    repeated layouts skip the checks, and a layout that differs in any of those is checked afresh. Here the
    CPU stands in for an sm_90 GPU, so the only reasons left are the layouts'."""
    from kernels import hopper_common as hopper

    monkeypatch.setattr(hopper, "GLUON_IMPORT_ERROR", None)
    monkeypatch.setattr(hopper, "INTERPRET", False)
    monkeypatch.setattr(hopper, "cuda_properties", lambda index: type("Props", (), {"major": 9, "minor": 0}))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(hopper, "_SM90_REASONS", {})
    checked = []
    real = hopper._sm90_reason
    monkeypatch.setattr(hopper, "_sm90_reason", lambda *args: checked.append(args) or real(*args))

    q = torch.randn(1, 4, 33, 64, dtype=torch.float16)
    misaligned = torch.empty(q.numel() + 1, dtype=torch.float16)[1:].view(q.shape)
    assert hopper.sm90_reason("forward", (64,), q=q) is None
    assert hopper.sm90_reason("forward", (64,), q=q.clone()) is None  # same layout: the kept answer
    assert len(checked) == 1
    assert hopper.sm90_reason("forward", (64,), q=misaligned).endswith("not 16-byte aligned (offset 2 bytes)")
    assert hopper.sm90_reason("forward", (64,), q=q.transpose(1, 2).contiguous().transpose(1, 2)) is None
    assert hopper.sm90_reason("forward", (64,), q=q.float()).startswith("the Gluon forward takes fp16 or bf16")
    assert hopper.sm90_reason("forward", (128,), q=q).startswith("the Gluon forward takes head_dim in (128,)")
    monkeypatch.setenv("ATTN_GLUON", "0")
    assert hopper.sm90_reason("forward", (64,), q=q).startswith("Gluon kernels are off")
    assert len(checked) == 6


def test_a_dimension_of_extent_one_keeps_any_stride():
    """A (1, H, 1, D) decode query sliced from a wider tensor: its batch and seq strides never step."""
    q = torch.randn(3, 1, 8, 64, dtype=torch.float16)[1:2].transpose(1, 2)  # (1, 8, 1, 64), odd seq stride
    assert tma_layout_reason(q) is None
    assert tma_strides(q) == [8 * 64, 64, 64, 1]


def test_empty_in_layout_keeps_the_dimension_order_also_of_a_packed_slice():
    layouts = _layouts(2, 4, 2, 7, 16)
    assert _order(empty_in_layout(layouts["bhsd"][0])) == (0, 1, 2, 3)
    for name in ("bshd", "packed"):
        out = empty_in_layout(layouts[name][0])
        assert out.shape == layouts[name][0].shape and _order(out) == (0, 2, 1, 3)
        assert out.transpose(1, 2).is_contiguous()  # dense: the BSHD copy transformers makes is a view
    assert empty_in_layout(layouts["bhsd"][0], torch.float64).dtype == torch.float64


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("layout", ["bshd", "packed"])
def test_the_portable_kernels_take_every_layout_and_answer_in_it(layout, causal):
    """N = 77 (no block size divides it; 154 query rows per K/V head, past the split-KV path's 128, so
    the tiled forward runs), 4 query heads on 2 K/V heads, fp32 under the interpreter."""
    q, k, v = _layouts(1, 4, 2, 77, 16, seed=3)[layout]
    out, grads = _against_the_oracle(q, k, v, causal, seed=4)
    assert _order(out) == _order(q) == (0, 2, 1, 3)
    assert [_order(g) for g in grads] == [(0, 2, 1, 3)] * 3


def test_k_and_v_in_different_layouts_get_right_gradients():
    """k a BSHD view, v contiguous BHSD: dk and dv both come back in k's order (one set of store strides)."""
    q, k, _ = _layouts(1, 4, 2, 77, 16, seed=5)["bshd"]
    v = _layouts(1, 4, 2, 77, 16, seed=6)["bhsd"][2]
    _, grads = _against_the_oracle(q, k, v, True, seed=7)
    assert _order(grads[2]) == _order(k)


def test_expanded_inputs_take_no_descriptor_and_answer_dense():
    """Multi-query attention written as k.expand(B, H, S, D): a stride of 0 on the heads."""
    k = torch.randn(1, 1, 77, 16).expand(1, 4, 77, 16)
    assert tma_layout_reason(k.half()) is None  # .half() copies: a dense tensor
    assert tma_layout_reason(k) == "it is expanded (a stride of 0: strides (1232, 0, 16, 1))"
    assert empty_in_layout(k).stride() == (4928, 16, 64, 1)  # dense, head_dim innermost, the heads inside seq
    q = torch.randn(1, 4, 77, 16, generator=torch.Generator().manual_seed(8))
    _against_the_oracle(q, k, k.clone(), True, seed=9)
