"""Every memory layout a model hands our kernels, on the GPU: contiguous BHSD, the (batch, seq, heads,
head_dim) storage that transformers and flash-attn pass as a BHSD view, and the q, k, v slices of one
packed QKV projection. On sm_90 the three take the Gluon forward and backward (their TMA descriptors
are built on the tensors' own strides); layouts a descriptor cannot read (head_dim not unit-stride, a
base address off 16 bytes) take the portable kernels. Each is checked against the fp64 oracle (odd
N, grouped heads, causal, Nq != Nkv), outputs and gradients come back in their inputs' memory order,
and the forward and dK/dV are bit for bit those of contiguous inputs (same tiles in the same order).
"""

from __future__ import annotations

import pytest
import torch

from kernels import flash_attention
from kernels.flash_bwd import backward_path
from kernels.flash_fwd import flash_attention_forward, forward_path
from kernels.hopper_common import tma_layout_reason
from kernels.reference import naive_attention, oracle_with_grads, relative_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

FLOOR = {torch.float16: 1e-3, torch.bfloat16: 8e-3}  # as in test_gpu_kernels.py
TMA_LAYOUTS = ("bhsd", "bshd", "packed")


def _layout_of(t: torch.Tensor) -> tuple[int, ...]:
    """The order of t's dimensions in memory, outermost first (ties in BHSD order)."""
    return tuple(sorted(range(t.dim()), key=lambda d: -t.stride(d)))


def _make(layout, batch, heads, kv_heads, seq_q, seq_kv, head_dim, dtype, seed):
    """q, k, v with the values of contiguous BHSD inputs of the same seed, stored in ``layout``."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(batch, heads, seq_q, head_dim, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(batch, kv_heads, seq_kv, head_dim, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(batch, kv_heads, seq_kv, head_dim, device="cuda", dtype=dtype, generator=g)
    if layout == "bhsd":
        return q, k, v
    if layout == "bshd":  # transformers: proj(x).view(B, S, H, D).transpose(1, 2)
        return tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    if layout == "packed":  # one (B, S, H + 2·Hkv, D) projection, sliced by head (Nq = Nkv only)
        assert seq_q == seq_kv
        qkv = torch.cat([t.transpose(1, 2) for t in (q, k, v)], dim=2)
        return (qkv[:, :, :heads].transpose(1, 2), qkv[:, :, heads:heads + kv_heads].transpose(1, 2),
                qkv[:, :, heads + kv_heads:].transpose(1, 2))
    if layout == "d_strided":  # head_dim not unit-stride: no tensor map reads it
        return tuple(t.transpose(-1, -2).contiguous().transpose(-1, -2) for t in (q, k, v))
    if layout == "expanded":  # multi-query heads written as k.expand(B, H, S, D): a stride of 0
        return q, k[:, :1].expand(k.shape), v[:, :1].expand(v.shape)
    if layout == "misaligned":  # a base address 2 bytes past 16-byte alignment
        out = []
        for t in (q, k, v):
            flat = torch.empty(t.numel() + 1, device="cuda", dtype=dtype)
            view = flat[1:].view(t.shape)
            view.copy_(t)
            out.append(view)
        return tuple(out)
    raise ValueError(layout)


def _needs_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Gluon kernels run on sm_90 (H100/H200) only")


# (batch, heads, kv_heads, seq_q, seq_kv): odd lengths, grouped heads, Nq != Nkv both ways, more key
# blocks than SMs at the last one.
SHAPES = [(2, 4, 4, 1000, 1000), (1, 8, 2, 777, 777), (2, 4, 2, 300, 1000), (1, 4, 1, 1000, 333),
          (2, 16, 8, 2049, 2049)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}-{}N{}-{}".format(*s))
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("layout", TMA_LAYOUTS)
def test_every_tma_layout_takes_the_gluon_kernels_and_matches_the_oracle(layout, head_dim, shape, causal, dtype):
    _needs_sm90()
    batch, heads, kv_heads, seq_q, seq_kv = shape
    if layout == "packed" and seq_q != seq_kv:
        pytest.skip("a packed QKV projection has one sequence length")
    seed = seq_q + head_dim
    q, k, v = _make(layout, *shape, head_dim, dtype, seed)
    assert all(tma_layout_reason(t) is None for t in (q, k, v))
    assert forward_path(q, k, v, causal) == "gluon-ws" or (head_dim, causal, seq_q) <= (64, True, 4096)
    assert backward_path(q, k, v) == "gluon-ws"

    # The forward, bit for bit the contiguous inputs' (the same kernel and tiles: only the addresses move).
    contiguous = [t.contiguous() for t in (q, k, v)]
    o, lse = flash_attention_forward(q, k, v, causal=causal)
    o_ref, lse_ref = flash_attention_forward(*contiguous, causal=causal)
    assert torch.equal(o, o_ref) and torch.equal(lse, lse_ref)
    assert _layout_of(o) == _layout_of(q)

    # Forward and backward through autograd against the fp64 oracle, within twice naive's error.
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    do = torch.randn_like(o)
    ref = oracle_with_grads(*[t.detach() for t in leaves], do, causal=causal)
    naive = [t.detach().contiguous().requires_grad_(True) for t in leaves]
    group = heads // kv_heads
    o_naive = naive_attention(naive[0], naive[1].repeat_interleave(group, 1), naive[2].repeat_interleave(group, 1),
                              causal=causal)
    o_naive.backward(do)
    out = flash_attention(*leaves, causal=causal)
    # autograd.grad hands back what our backward returned (a leaf's .grad would be made contiguous when the
    # leaf is not dense, as a packed slice is not: autograd's layout contract for accumulated gradients).
    grads = torch.autograd.grad(out, leaves, do)
    for name, g, n, want in zip(("o", "dq", "dk", "dv"), (out, *grads), (o_naive, *(t.grad for t in naive)), ref):
        err, naive_err = relative_error(g, want), relative_error(n, want)
        assert err <= 2 * naive_err + FLOOR[dtype], f"{name}: {err:.2e} vs naive {naive_err:.2e}"
    # Gradients in their inputs' memory order: autograd's views back to the model's layout copy nothing.
    assert [_layout_of(g) for g in grads] == [_layout_of(t) for t in leaves]


@pytest.mark.parametrize("layout", ["d_strided", "misaligned", "expanded"])
def test_layouts_no_descriptor_reads_take_the_portable_kernels(layout):
    _needs_sm90()
    q, k, v = _make(layout, 1, 4, 2, 333, 333, 64, torch.float16, seed=5)
    assert tma_layout_reason(k) is not None
    assert forward_path(q, k, v) == "tiled" and backward_path(q, k, v) == "tiled"
    with pytest.raises(ValueError, match="TMA descriptors cannot read"):
        flash_attention_forward(q, k, v, gluon=True)
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    do = torch.randn_like(q)
    ref = oracle_with_grads(q, k, v, do)
    out = flash_attention(*leaves)
    out.backward(do)
    for name, got, want in zip(("o", "dq", "dk", "dv"), (out, *(t.grad for t in leaves)), ref):
        assert relative_error(got, want) < 5e-3, name


def test_a_bshd_attention_block_copies_nothing_around_our_kernels():
    """A transformers-style block (projections viewed as BSHD, attention, transpose back) runs forward
    and backward with no copy kernel on the GPU: outputs and gradients come back in the layout the
    views need, so autograd's view and transpose backwards stay views."""
    _needs_sm90()
    batch, seq, heads, head_dim = 2, 1000, 8, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    projections = [torch.randn(batch, seq, heads * head_dim, device="cuda", dtype=torch.bfloat16, generator=g,
                               requires_grad=True) for _ in range(3)]
    weight = torch.randn(batch, seq, heads * head_dim, device="cuda", dtype=torch.bfloat16, generator=g)

    def step():
        q, k, v = (x.view(batch, seq, heads, head_dim).transpose(1, 2) for x in projections)
        o = flash_attention(q, k, v, causal=True)
        (o.transpose(1, 2).reshape(batch, seq, heads * head_dim) * weight).sum().backward()

    step()  # compile and warm up
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert any("_attn_fwd_hopper" in n for n in names) and any("_attn_bwd_hopper" in n for n in names), names
    assert not [n for n in names if "copy" in n.lower()], names
