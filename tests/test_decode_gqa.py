"""Decode shapes, grouped-query attention and the split-KV path: kernels against the fp64 oracle,
the cost model's GQA and split-KV bytes, the store's kv_heads column, and the command line."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
from test_cli import run_cli

from attention_core import split_kv
from attention_core.costing import Costing
from attention_core.shape import Shape
from kernels import flash_attention
from kernels.flash_fwd import flash_attention_forward
from kernels.reference import attention_oracle, naive_attention, oracle_with_grads, relative_error
from profiler.model.cost import cost_of, kernel_path, kernel_plan
from profiler.model.fused import compulsory_bytes, fused_flops, split_kv_executed_flops
from profiler.registry import REGISTRY
from profiler.store import read_results, to_frame

TOL = {torch.float32: 1e-5, torch.float16: 2e-3}


def _qkv(batch, heads, kv_heads, seq_q, seq_kv, head_dim, dtype, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, seq_q, head_dim, generator=g).to(dtype)
    k = torch.randn(batch, kv_heads, seq_kv, head_dim, generator=g).to(dtype)
    v = torch.randn(batch, kv_heads, seq_kv, head_dim, generator=g).to(dtype)
    return [t.requires_grad_(requires_grad) for t in (q, k, v)]


# Nq = 1 and 3 against Nkv = 1, 77 (not a multiple of any tile) and 1000 (four splits); one K/V head
# (multi-query) and heads / 4; causal both ways (top-left, as SDPA's is_causal).
DECODE = [(nq, nk, kvh) for nq in (1, 3) for nk in (1, 77, 1000) for kvh in (1, 2)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q,seq_kv,kv_heads", DECODE)
@pytest.mark.parametrize("split", [True, False], ids=["split-kv", "tiled"])
def test_triton_forward_gqa_decode_matches_oracle(split, seq_q, seq_kv, kv_heads, causal):
    q, k, v = _qkv(2, 8, kv_heads, seq_q, seq_kv, 32, torch.float32, seed=seq_kv)
    ref, ref_lse = attention_oracle(q, k, v, causal=causal, return_lse=True)
    o, lse = flash_attention_forward(q, k, v, causal=causal, split=split)
    assert relative_error(o, ref) < TOL[torch.float32]
    torch.testing.assert_close(lse.double(), ref_lse, rtol=0, atol=1e-5)


@pytest.mark.parametrize("seq_q,seq_kv,kv_heads,causal", [(1, 1000, 1, False), (3, 77, 2, True)])
def test_split_kv_fp16_and_noncontiguous(seq_q, seq_kv, kv_heads, causal):
    """fp16 inputs, and BSHD storage with padded rows seen as BHSD (strided views, nothing copied)."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, seq_q, 8, 80, generator=g).half()[..., :64].transpose(1, 2)
    k = torch.randn(2, seq_kv, kv_heads, 80, generator=g).half()[..., :64].transpose(1, 2)
    v = torch.randn(2, seq_kv, kv_heads, 80, generator=g).half()[..., :64].transpose(1, 2)
    assert not any(t.is_contiguous() for t in (q, k, v))
    assert split_kv.plan(2, kv_heads, 8 // kv_heads, seq_q, seq_kv) is not None
    ref = attention_oracle(q, k, v, causal=causal)
    naive_err = relative_error(naive_attention(q, k, v, causal=causal), ref)
    assert relative_error(flash_attention(q, k, v, causal=causal), ref) <= 2 * naive_err + 1e-3


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q,seq_kv,kv_heads", [(1, 77, 1), (3, 1000, 2), (77, 77, 2), (100, 33, 1)])
def test_triton_backward_gqa_matches_oracle(seq_q, seq_kv, kv_heads, causal):
    """dK and dV sum over each K/V head's group of query heads."""
    q, k, v = _qkv(1, 8, kv_heads, seq_q, seq_kv, 16, torch.float32, seed=seq_q, requires_grad=True)
    do = torch.randn(1, 8, seq_q, 16)
    ref = oracle_with_grads(q, k, v, do, causal=causal)
    o = flash_attention(q, k, v, causal=causal)
    o.backward(do)
    for got, want in zip((o, q.grad, k.grad, v.grad), ref):
        assert got.shape == want.shape
        assert relative_error(got, want) < 1e-5


@pytest.mark.parametrize("impl", ["naive", "triton_naive", "sdpa_math", "sdpa_flash", "sdpa_repeat_kv"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_every_cpu_implementation_takes_gqa(impl, causal):
    q, k, v = _qkv(2, 8, 2, 3, 77, 16, torch.float32, seed=3)
    out = REGISTRY[impl].fn(q, k, v, causal=causal)
    assert relative_error(out, attention_oracle(q, k, v, causal=causal)) < 1e-5


def test_naive_gqa_reads_k_without_copying_it():
    """The stepwise matmuls stack a group's queries against one K/V head: the same numbers as
    repeating K and V, with no expanded copy."""
    q, k, v = _qkv(1, 8, 2, 5, 9, 16, torch.float32)
    expanded = naive_attention(q, k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1))
    torch.testing.assert_close(naive_attention(q, k, v), expanded)


def test_user_implementations_without_gqa_are_unsupported_for_grouped_shapes():
    from profiler.registry import register

    register(lambda q, k, v, causal=False, sm_scale=None: q, name="plain_user_fn", replace=True)
    try:
        reason = REGISTRY["plain_user_fn"].unsupported_reason("cpu", torch.float32, 64, grouped=True)
        assert "fewer K/V heads" in reason
        assert REGISTRY["plain_user_fn"].unsupported_reason("cpu", torch.float32, 64) is None
    finally:
        REGISTRY.pop("plain_user_fn")


# ------------------------------------------------------------------------------------- cost model


def test_shape_kv_heads_default_and_validation():
    assert Shape(1, 32, 1, 8, 128).kv_heads == 32 and Shape(1, 32, 1, 8, 128, kv_heads=8).group == 4
    with pytest.raises(ValueError, match="kv_heads 5 must divide heads 32"):
        Shape(1, 32, 1, 8, 128, kv_heads=5)
    assert Shape.from_row({"batch": 1, "heads": 4, "seq_q": 1, "seq_kv": 8, "head_dim": 16, "dtype": "fp16",
                              "causal": False, "kv_heads": float("nan")}).kv_heads == 4


def test_gqa_compulsory_bytes_read_each_kv_head_once():
    """Llama-3-8B decode, B1 Nkv 32768 bf16: K and V are 8 heads × 32768 × 128 × 2 bytes each; Q and
    O are 32 × 1 × 128 × 2; the logsumexp 32 × 4."""
    shape = Shape(1, 32, 1, 32768, 128, "bf16", kv_heads=8)
    kv = 8 * 32768 * 128 * 2
    assert compulsory_bytes(shape) == 2 * kv + 2 * (32 * 128 * 2) + 32 * 4
    mha = Shape(1, 32, 1, 32768, 128, "bf16")
    assert compulsory_bytes(mha) - compulsory_bytes(shape) == 2 * kv * 3  # GQA saves 3/4 of the K/V reads
    assert fused_flops(shape) == fused_flops(mha) == 4 * 32 * 32768 * 128


def test_split_kv_plan_and_partial_bytes():
    plan = split_kv.plan(1, 8, 4, 1, 32768)
    assert plan.splits * 8 >= split_kv.TARGET_PROGRAMS and plan.chunk % split_kv.BLOCK_N == 0
    assert (plan.splits - 1) * plan.chunk < 32768 <= plan.splits * plan.chunk and plan.block_m == 16
    assert split_kv.plan(64, 8, 4, 1, 4096).splits == 1  # enough programs already
    assert split_kv.plan(1, 32, 1, 200, 4096) is None  # 200 query rows: the tiled forward
    assert split_kv.plan(1, 8, 8, 16, 4096).block_m == 128
    assert split_kv.partial_bytes(1, 32, 1, 128, 1) == 0
    assert split_kv.partial_bytes(1, 32, 1, 128, 64) == 2 * 64 * 32 * 129 * 4  # fp32 rows out and back in


def test_cost_of_split_kv_path_and_repeat_kv():
    shape = Shape(1, 32, 1, 32768, 128, "bf16", kv_heads=8)
    ours = REGISTRY["triton_flash"].costing
    plan = kernel_plan(ours, shape)
    cost = cost_of(ours, shape)
    assert cost.hbm_bytes == compulsory_bytes(shape)
    assert cost.tile_bytes == cost.hbm_bytes + split_kv.partial_bytes(1, 32, 1, 128, plan.splits)
    assert kernel_path(ours, shape) == f"split-kv x{plan.splits}"
    assert kernel_path(ours, Shape.square(4, 32, 8192, 64)) == "tiled"
    assert kernel_path(ours, shape.with_mode("fwd+bwd")) == f"split-kv x{plan.splits} fwd, tiled bwd"
    assert kernel_path(REGISTRY["sdpa_flash"].costing, shape) == ""
    # The repeat_interleave baseline copies K and V to 32 heads (read 8, write 32), then reads 32.
    repeat = cost_of(REGISTRY["sdpa_repeat_kv"].costing, shape)
    kv8, kv32 = 8 * 32768 * 128 * 2, 32 * 32768 * 128 * 2
    assert repeat.hbm_bytes == 2 * (kv8 + kv32) + compulsory_bytes(Shape(1, 32, 1, 32768, 128, "bf16"))
    mha = Shape(1, 8, 1, 64, 16)  # nothing to repeat without GQA
    assert cost_of(Costing("fused", repeats_kv=True), mha)[:2] == cost_of(Costing("fused"), mha)[:2]


def test_split_kv_executed_flops_count_padded_rows_and_tiles():
    shape = Shape(1, 32, 1, 1000, 128, "bf16", kv_heads=8)
    plan = split_kv.plan(1, 8, 4, 1, 1000)
    tiles = sum(math.ceil(min(plan.chunk, 1000 - lo) / split_kv.BLOCK_N) for lo in range(0, 1000, plan.chunk))
    assert split_kv_executed_flops(shape, plan) == 8 * tiles * 16 * split_kv.BLOCK_N * 4 * 128


def test_validate_names_its_decode_csvs_and_reads_them_back():
    from profiler.nsight.validate import CSV_NAME, csv_name, kv_splits

    shape = Shape(1, 32, 4, 32768, 128, "bf16", True, kv_heads=8)
    assert csv_name(shape) == "B1H32KV8N4x32768D128-bf16-causal.csv"
    assert CSV_NAME.match(csv_name(shape)).groups() == ("1", "32", "8", "4", "32768", "128", "bf16", "-causal")
    assert kv_splits("_decode_split | _decode_combine", "(64, 8, 1)") == 64


# ------------------------------------------------------------------------------------------ store


def test_captures_before_gqa_read_as_kv_heads_equal_heads(tmp_path):
    frame = to_frame([{"impl": "naive", "step": "total", "mode": "fwd", "batch": 1, "heads": 4, "seq_q": 8,
                       "seq_kv": 8, "head_dim": 16, "dtype": "fp32", "causal": False, "status": "ok"}])
    old = frame.drop(columns=["kv_heads", "path"])
    old.to_parquet(tmp_path / "results.parquet")
    back = read_results(tmp_path / "results.parquet")
    assert back.kv_heads.tolist() == [4] and back.path.tolist() == [""]


# ------------------------------------------------------------------------------------ command line


def test_preset_fills_heads_and_refuses_a_second_source():
    out = run_cli("model", "--preset", "llama3-8b", "--seq-q", "1", "--seq-kv", "32768", "--dtype", "bf16",
                  "--impl", "triton_flash", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["hbm_bytes"] == compulsory_bytes(Shape(4, 32, 1, 32768, 128, "bf16", kv_heads=8))
    assert row["bound"] == "memory"
    bad = run_cli("model", "--preset", "llama3-8b", "--heads", "16")
    assert bad.returncode == 2 and bad.stderr.strip().endswith(
        "--preset llama3-8b sets heads 32, K/V heads 8 and head_dim 128; drop --heads or the preset")
    assert "kv_heads 5 must divide heads 32" in run_cli("model", "--kv-heads", "5").stderr
    assert run_cli("capture", "--cuda-graph", "--device", "cpu").returncode == 2


def test_capture_decode_gqa_on_cpu(tmp_path):
    out = run_cli("sweep", "--seq-q", "1,3", "--seq-kv", "77", "--heads", "4", "--kv-heads", "1,4", "--dim", "16",
                  "--impl", "naive,triton_flash,sdpa_repeat_kv", "--device", "cpu", "--rep-ms", "5",
                  "--out", str(tmp_path / "c"), env={"TRITON_INTERPRET": "1"})
    assert out.returncode == 0, out.stderr
    frame = pd.read_parquet(tmp_path / "c" / "results.parquet")
    totals = frame[frame.step == "total"]
    assert sorted(set(zip(totals.seq_q, totals.seq_kv, totals.kv_heads))) == [(1, 77, 1), (1, 77, 4), (3, 77, 1),
                                                                              (3, 77, 4)]
    # triton_flash ran in the Triton interpreter: checked, but its time is not a kernel's
    assert (totals.status == totals.impl.map(lambda i: "interpreted" if i == "triton_flash" else "ok")).all()
    assert (totals.max_rel_err < 1e-5).all()
    ours = totals[totals.impl == "triton_flash"]
    assert set(ours.path) == {"split-kv x1"}
    grouped = totals[(totals.kv_heads == 1) & (totals.seq_q == 1)].set_index("impl")
    assert grouped.loc["sdpa_repeat_kv", "hbm_bytes"] > grouped.loc["triton_flash", "hbm_bytes"]
    assert "Nq=1 Nkv=77" in out.stdout and "H4/1" in out.stdout
