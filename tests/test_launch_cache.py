"""The forward's host-time path on the CPU (Triton's interpreter): the route memo of kernels.flash_fwd (a
layout checked and routed once) and kernels.hopper_common.layout_key / LaunchCache. The Gluon launch it
replays is tested on the GPU (tests/gpu/test_launch_cache_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from kernels import flash_fwd
from kernels.flash_fwd import flash_attention_forward, forward_path
from kernels.hopper_common import LaunchCache, layout_key
from kernels.reference import naive_attention, relative_error


def _decode_inputs(seed: int, transposed: bool = False):
    """One query per head against 300 keys, 4 heads on 2 K/V heads, D16: the split-KV route."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 4, 1, 16, generator=g)
    k, v = (torch.randn(1, 2, 300, 16, generator=g) for _ in range(2))
    if transposed:  # the same values in (batch, seq, heads, head_dim) storage
        q, k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    return q, k, v


def test_a_layout_is_routed_once_and_each_call_reads_its_own_data():
    flash_fwd._ROUTES.clear()
    first = _decode_inputs(0)
    path = forward_path(*first)
    assert path.startswith("split-kv") and len(flash_fwd._ROUTES) == 1
    route = flash_fwd._ROUTES[layout_key(*first), False]
    assert route[0] == "split" and route[1].label == path
    for seed in (1, 2):
        q, k, v = _decode_inputs(seed)
        o, _ = flash_attention_forward(q, k, v)
        assert relative_error(o, naive_attention(q.double(), k.double(), v.double())) < 1e-5
    assert len(flash_fwd._ROUTES) == 1  # the same layout: no new entry
    forward_path(*_decode_inputs(3, transposed=True))  # another memory order is another layout
    assert len(flash_fwd._ROUTES) == 2


def test_bad_inputs_are_checked_on_every_call_and_never_kept():
    flash_fwd._ROUTES.clear()
    q, k, v = _decode_inputs(0)
    bad = q[..., :12]  # head_dim 12 is not one the kernels take
    for _ in range(2):
        with pytest.raises(ValueError, match="head_dim"):
            flash_attention_forward(bad, k[..., :12], v[..., :12])
    assert not flash_fwd._ROUTES


def test_the_memo_keeps_a_bounded_number_of_layouts(monkeypatch):
    flash_fwd._ROUTES.clear()
    monkeypatch.setattr(flash_fwd, "ROUTES_KEPT", 3)
    for n in range(200, 205):  # a decode loop: a new key length, so a new layout, every step
        g = torch.Generator().manual_seed(n)
        forward_path(torch.randn(1, 2, 1, 16, generator=g), torch.randn(1, 2, n, 16, generator=g),
                     torch.randn(1, 2, n, 16, generator=g))
        assert len(flash_fwd._ROUTES) <= 3


def test_layout_key_reads_shape_strides_dtype_device_and_alignment():
    base = torch.randn(2, 3, 5, 16)
    assert layout_key(base) == ((base.shape, base.stride(), base.dtype, base.device, base.data_ptr() % 16),)
    shifted = torch.randn(2 * 3 * 5 * 16 + 2)[2:].view(2, 3, 5, 16)  # the same shape, 8 bytes off 16
    assert layout_key(shifted) != layout_key(base)
    assert layout_key(object()) is None  # no address to read (as a fake tensor while torch.compile traces)


def test_the_launch_cache_keeps_nothing_under_the_interpreter():
    calls = []

    class Kernel:
        arg_names = ["x", "N"]

        def __getitem__(self, grid):
            return lambda *args, **kw: calls.append((grid, args, kw))  # returns None, as an interpreted launch

    cache = LaunchCache(Kernel())
    assert not cache.enabled  # TRITON_INTERPRET=1 (tests/conftest.py)
    cache(("key",), (4,), (1,), {"N": 8}, num_warps=4)
    cache(("key",), (4,), (2,), {"N": 8}, num_warps=4)
    assert calls == [((4,), (1,), {"N": 8, "num_warps": 4}), ((4,), (2,), {"N": 8, "num_warps": 4})]
    assert not cache.entries
