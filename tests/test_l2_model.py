"""profiler.model.l2 against the Nsight Compute captures it was measured on and checked against."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from attention_core.shape import Shape
from profiler.model.counters import packs_gqa
from profiler.model.l2 import SLICE_READ_FRACTION, KernelTraffic, Traffic, forward_traffic, kernel_family, pass_key
from profiler.nsight.validate import TARGETS

ROOT = Path(__file__).resolve().parents[1]
FIT = ["validate-h200-issue27/fit-prefill", "validate-h200-issue27/fit-gqa", "validate-h200-issue27/fit-bwd",
       "validate-h200-issue27/fit-gqa-bwd", "validate-h200-issue27/fit-decode", "validate-h100-issue43/fit-portable"]
UNSEEN = ["validate-h100-issue43/unseen4-prefill", "validate-h100-issue43/unseen4-gqa",
          "validate-h100-issue43/unseen4-bwd", "validate-h100-issue43/unseen4-gqa-bwd",
          "validate-h100-issue43/unseen4-decode", "validate-h100-issue43/unseen-portable"]


def _rows(captures):
    frames = [pd.read_parquet(ROOT / "reports" / c / "validation.parquet").assign(capture=c) for c in captures]
    rows = pd.concat(frames, ignore_index=True)
    return rows[(rows.step == "total") & (rows.impl != "naive")]


def test_slice_read_fractions_are_the_fit_captures_means():
    """The coalescing fractions in the code are what the fit captures' counters give, to the third decimal."""
    rows = _rows(FIT)
    rows = rows[rows.model_l2_read_bytes.notna()]
    unique = rows.apply(lambda r: Shape.from_row(r), axis=1)
    shares = [t.shares_reads() for t in (
        forward_traffic(s, r.kernel_names, (r.query_tile, r.key_tile), packs_gqa(r.impl, r.kernel_names, s),
                        kv_splits=r.kv_splits)
        if s.mode == "fwd" else Traffic((KernelTraffic("bwd", shared=1.0),))
        for s, r in zip(unique, rows.itertuples()))]
    rows = rows[shares]
    measured = rows.l2_lts_read_bytes / rows.l2_sm_read_bytes
    keys = pd.DataFrame({"family": [kernel_family(r.impl, r.kernel_names) for r in rows.itertuples()],
                         "key": [pass_key(Shape.from_row(r)) for r in rows.itertuples()],
                         "fraction": measured.to_numpy()})
    means = keys.groupby(["family", "key"]).fraction.mean()
    for (family, key), value in means.items():
        assert SLICE_READ_FRACTION[family][key] == pytest.approx(value, abs=0.0005), (family, key)
    assert len(means) == sum(len(v) for v in SLICE_READ_FRACTION.values())


@pytest.mark.parametrize("impl", ["triton_flash", "sdpa_cudnn"])
def test_the_l2_and_dram_model_holds_on_unseen_shapes(impl):
    """Shapes used for nothing else (H100, validate_h200.sh unseen4 and portable): DRAM within 15%, requested
    L2 reads within 10%, lts__t within 25%, the far-partition traffic within 25%, forward and backward."""
    rows = _rows(UNSEEN)
    rows = rows[rows.impl == impl]
    assert len(rows) >= 10 and set(rows["mode"]) == {"fwd", "bwd"}
    for column, tolerance in TARGETS.items():
        assert ((rows[column] - 1).abs() <= tolerance).all(), rows[[column, "capture"]]


def test_flashattention2_forward_spills_are_what_its_lts_excess_is():
    """FlashAttention-2's forward on sm_90 spills registers: the local-memory sectors ncu counts are the size of
    what its lts__t holds beyond the model (L1 keeps some of it); the other kernels of the runs spill ~nothing."""
    rows = _rows(["validate-h100-issue43/unseen4-prefill", "validate-h100-issue43/unseen4-gqa"])
    fa2, others = rows[rows.impl == "sdpa_flash"], rows[rows.impl != "sdpa_flash"]
    excess = fa2.l2_bytes - fa2.model_l2_bytes
    assert (fa2.spill_bytes > 40e6).all() and (others.spill_bytes < 0.01 * others.l2_bytes).all()
    assert ((excess / fa2.spill_bytes).between(0.3, 1.6)).all()


def test_forward_keeps_an_eighth_of_the_l2_when_q_k_v_o_are_alike_and_more_with_groups():
    """Retention derived, not fitted: Q, K, V and O of one size make O a quarter of what the kernel touches, of
    the half of the L2 a kernel keeps; a group of 4 query heads makes O 4/10 of it."""
    l2 = 50e6
    mha = forward_traffic(Shape(1, 16, 4096, 4096, 128), "_attn_fwd", (128, 64))
    (kernel,) = mha.kernels
    o = kernel.written
    assert kernel.private + kernel.shared + o > l2 / 2  # over the kept half: the share rule applies
    kept = kernel.private + kernel.shared + kernel.written - mha.dram_bytes(l2)
    assert kept == pytest.approx(l2 / 8, rel=0.02)  # the fp32 logsumexp is written too
    gqa = forward_traffic(Shape(1, 32, 2048, 2048, 128, kv_heads=8), "_attn_fwd", (128, 64))
    (kernel,) = gqa.kernels
    kept = kernel.private + kernel.shared + kernel.written - gqa.dram_bytes(l2)
    assert kept == pytest.approx(l2 / 2 * 4 / 10, rel=0.02)


def test_partition_terms_of_one_streamed_read_and_one_store():
    """A line read by one program and a line stored: at the slices 1 + 0.5 and 1.5 (half of the lines homed
    in the other partition), across the fabric 0.5 each; read by both partitions, the fabric sees it twice."""
    one = KernelTraffic("k", requested=32, private=32, written=32, stored=32)
    assert one.slice_bytes(1.0) == 32 + 16 + 48 and one.fabric() == 16 + 16
    both = KernelTraffic("k", requested=64, shared=32)
    assert both.fabric() == 32 and both.slice_bytes(0.5) == 32 + 32


def test_the_unseen4_captures_record_their_command():
    for c in UNSEEN:
        meta = json.loads((ROOT / "reports" / c / "meta.json").read_text())
        assert meta["command"].endswith(f"--out reports/{c}")


def test_our_gluon_epilogue_writes_each_sector_twice_and_tma_stores_once():
    """The half-sector store term, from the store counter (l1tex__t_sectors_pipe_lsu_mem_global_op_st) of
    reports/validate-h100-issue43/unseen4-prefill: our Gluon forward stores O from the wgmma accumulator layout
    (two sector writes per sector); the portable forward and FlashAttention-2 stage through registers in whole
    sectors; cuDNN stores by TMA (no LSU stores at all)."""
    kernels = pd.read_parquet(ROOT / "reports" / "validate-h100-issue43" / "unseen4-prefill" / "ncu_kernels.parquet")
    kernels = kernels[kernels.impl != ""]
    o = kernels.batch * kernels.heads * kernels.seq_q * kernels.head_dim * 2
    ratio = kernels.global_store_bytes / o
    gluon = kernels.kernel.str.contains("_attn_fwd_hopper")
    assert ratio[gluon].between(1.95, 2.1).all() and len(ratio[gluon]) == 3
    lsu = kernels.kernel.str.contains("_attn_fwd$|flash_fwd_kernel", regex=True)
    assert ratio[lsu].between(0.95, 1.1).all() and len(ratio[lsu]) == 5
    assert (kernels[kernels.impl == "sdpa_cudnn"].global_store_bytes == 0).all()
