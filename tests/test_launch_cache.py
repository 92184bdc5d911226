"""The forward's host-time path on the CPU (Triton's interpreter): the route memo of kernels.flash_fwd (a
layout checked and routed once) and kernels._launch.layout_key / LaunchCache. The Gluon launch it
replays is tested on the GPU (tests/gpu/test_launch_cache_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from kernels import _launch, flash_fwd
from kernels._launch import LaunchCache, layout_key
from kernels.flash_fwd import flash_attention_forward, forward_path
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
    monkeypatch.setattr(flash_fwd._ROUTES, "size", 3)
    for n in range(200, 205):  # a decode loop: a new key length, so a new layout, every step
        g = torch.Generator().manual_seed(n)
        forward_path(torch.randn(1, 2, 1, 16, generator=g), torch.randn(1, 2, n, 16, generator=g),
                     torch.randn(1, 2, n, 16, generator=g))
        assert len(flash_fwd._ROUTES) <= 3


def test_layout_key_reads_shape_strides_dtype_device_alignment_and_the_switches(monkeypatch):
    base = torch.randn(2, 3, 5, 16)
    monkeypatch.delenv("ATTN_GLUON", raising=False)
    monkeypatch.delenv("ATTN_SPLIT_TAIL", raising=False)
    assert layout_key(base) == ((base.shape, base.stride(), base.dtype, base.device, base.data_ptr() % 16), None, None)
    monkeypatch.setenv("ATTN_GLUON", "0")  # the routes read it (hopper_common.sm90_reason): another key
    assert layout_key(base)[-2:] == (None, "0")
    monkeypatch.setenv("ATTN_SPLIT_TAIL", "0")  # the forward's default config reads it: another key
    assert layout_key(base)[-2:] == ("0", "0")
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


def test_a_kept_launch_replays_the_compiled_kernel_with_every_parameter_in_order(monkeypatch):
    """With the cache on (triton 3.6 on a GPU), the first launch at a key goes through ``kernel[grid]`` and keeps
    what it returned; later ones call that compiled kernel's launcher with the grid padded to three and the
    constexprs after the arguments, in the kernel's parameter order; a new key launches through Triton again."""
    launched = []

    class Compiled:
        packed_metadata = object()

        def __getitem__(self, grid):
            return lambda *args: launched.append(("replay", grid, args))

    class Kernel:
        arg_names = ["x", "n", "BLOCK", "CAUSAL"]

        def __getitem__(self, grid):
            def run(*args, **kw):
                launched.append(("run", grid, args, kw))
                return Compiled()
            return run

    cache = LaunchCache(Kernel(), size=2)
    monkeypatch.setattr(_launch, "SUPPORTED", True)  # as triton 3.6 on a GPU
    constexprs = {"CAUSAL": True, "BLOCK": 64}  # any order: the replay orders them as the kernel does
    cache(("a",), (4,), ("x1", 7), constexprs, num_warps=4)
    cache(("a",), (4,), ("x2", 7), constexprs, num_warps=4)
    assert launched == [("run", (4,), ("x1", 7), {"CAUSAL": True, "BLOCK": 64, "num_warps": 4}),
                        ("replay", (4, 1, 1), ("x2", 7, 64, True))]
    cache(("b",), (4, 2), ("x3", 7), constexprs, num_warps=4)
    cache(("c",), (4,), ("x4", 7), constexprs, num_warps=4)  # a third key: the cache of two starts again
    assert [entry[0] for entry in launched[2:]] == ["run", "run"] and set(cache.entries) == {("c",)}
    cache(("d",), (1,), ("x5",), {"BLOCK": 64, "CAUSAL": True, "n": 7})  # constexprs naming every parameter
    cache(("e",), (1,), ("x6", 7), {"BLOCK": 64})  # CAUSAL left to its default: never kept
    assert ("e",) not in cache.entries


def test_forward_path_does_not_keep_a_route_the_forward_would_refuse(monkeypatch):
    """A CPU tensor without the interpreter: forward_path names the path, but keeps nothing, so the forward
    still checks the device and refuses it in one sentence."""
    from kernels import flash_fwd as module

    module._ROUTES.clear()
    monkeypatch.delenv("TRITON_INTERPRET")
    q, k, v = _decode_inputs(0)
    assert forward_path(q, k, v).startswith("split-kv") and not module._ROUTES
    with pytest.raises(ValueError, match="Triton kernels need a CUDA tensor"):
        flash_attention_forward(q, k, v)
