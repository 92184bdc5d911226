"""Bad input gets a ValueError or TypeError that names the value and what is allowed."""

from __future__ import annotations

import pytest
import torch

from kernels import flash_attention, online_softmax
from profiler.registry import REGISTRY

TRITON_AND_TORCH = ["triton_flash", "triton_naive", "naive", "sdpa_math"]


def _t(*shape, dtype=torch.float32, device="cpu"):
    return torch.randn(*shape, dtype=dtype, device=device) if device != "meta" else torch.empty(*shape, device="meta")


@pytest.mark.parametrize("impl", TRITON_AND_TORCH)
def test_wrong_rank(impl):
    with pytest.raises(ValueError, match=r"q must be 4-D \(batch, heads, seq, head_dim\), got 3-D shape \(2, 8, 16\)"):
        REGISTRY[impl].fn(_t(2, 8, 16), _t(1, 2, 8, 16), _t(1, 2, 8, 16))


@pytest.mark.parametrize("impl", TRITON_AND_TORCH)
def test_mismatched_shapes(impl):
    with pytest.raises(ValueError, match=r"k has 3 heads; it must divide q's 2 heads \(grouped-query attention\)"):
        REGISTRY[impl].fn(_t(1, 2, 8, 16), _t(1, 3, 8, 16), _t(1, 3, 8, 16))
    with pytest.raises(ValueError, match=r"k shape \(2, 2, 8, 16\) does not match q shape \(1, 2, 8, 16\) in batch"):
        REGISTRY[impl].fn(_t(1, 2, 8, 16), _t(2, 2, 8, 16), _t(2, 2, 8, 16))
    with pytest.raises(ValueError, match=r"v shape \(1, 2, 9, 16\) must equal k shape \(1, 2, 8, 16\)"):
        REGISTRY[impl].fn(_t(1, 2, 8, 16), _t(1, 2, 8, 16), _t(1, 2, 9, 16))


@pytest.mark.parametrize("impl", TRITON_AND_TORCH)
def test_mixed_dtypes(impl):
    with pytest.raises(TypeError, match="must share one dtype, got torch.float32, torch.float16, torch.float32"):
        REGISTRY[impl].fn(_t(1, 1, 4, 16), _t(1, 1, 4, 16, dtype=torch.float16), _t(1, 1, 4, 16))


@pytest.mark.parametrize("impl", TRITON_AND_TORCH)
def test_mixed_devices(impl):
    with pytest.raises(ValueError, match="q, k, v must be on one device, got cpu, meta, cpu"):
        REGISTRY[impl].fn(_t(1, 1, 4, 16), _t(1, 1, 4, 16, device="meta"), _t(1, 1, 4, 16))


@pytest.mark.parametrize("impl", TRITON_AND_TORCH)
def test_empty_tensors(impl):
    with pytest.raises(ValueError, match=r"empty input: q \(1, 1, 0, 16\)"):
        REGISTRY[impl].fn(_t(1, 1, 0, 16), _t(1, 1, 4, 16), _t(1, 1, 4, 16))


@pytest.mark.parametrize("impl", ["triton_flash", "triton_naive"])
def test_unsupported_head_dim(impl):
    with pytest.raises(ValueError, match="head_dim 48 is not supported; allowed: 16, 32, 64, 128, 256"):
        REGISTRY[impl].fn(_t(1, 1, 4, 48), _t(1, 1, 4, 48), _t(1, 1, 4, 48))


@pytest.mark.parametrize("impl", ["triton_flash", "triton_naive"])
def test_unsupported_dtype(impl):
    x = _t(1, 1, 4, 16, dtype=torch.float64)
    with pytest.raises(TypeError, match="dtype torch.float64 is not supported here; allowed: torch.float16"):
        REGISTRY[impl].fn(x, x, x)
    i = torch.ones(1, 1, 4, 16, dtype=torch.int32)
    with pytest.raises(TypeError, match="dtype torch.int32 is not supported"):
        REGISTRY[impl].fn(i, i, i)


def test_not_a_tensor():
    with pytest.raises(TypeError, match="k must be a torch.Tensor, got list"):
        flash_attention(_t(1, 1, 4, 16), [1, 2], _t(1, 1, 4, 16))


@pytest.mark.parametrize("scale", [0, -1.0, float("nan"), "big"])
def test_bad_scale(scale):
    x = _t(1, 1, 4, 16)
    with pytest.raises(ValueError, match="sm_scale must be a positive finite number or None"):
        flash_attention(x, x, x, sm_scale=scale)


def test_online_softmax_bad_input():
    with pytest.raises(TypeError, match="dtype torch.int64 is not supported"):
        online_softmax(torch.arange(4))
    with pytest.raises(ValueError, match=r"at least one element and one dimension, got shape \(3, 0\)"):
        online_softmax(torch.empty(3, 0))


def test_triton_kernels_need_cuda_or_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    x = _t(1, 1, 4, 16)
    with pytest.raises(ValueError, match="Triton kernels need a CUDA tensor"):
        flash_attention(x, x, x)
