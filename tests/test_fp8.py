"""fp8 attention where a CPU can check it: the quantizer, the kernel's refusals, the cost model, the roofs and the
CLI's one-line errors. The kernel itself runs on the GPU only (tests/gpu/test_fp8_gpu.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_readme import unwrapped

from attention_core.shape import Shape
from kernels.flash_fwd_fp8 import FP8, FP8_MAX, dequantize_fp8, flash_attention_fp8, quantize_fp8, unsupported_on
from kernels.reference import TOLERANCE, output_dtype
from profiler.model import hardware
from profiler.model.cost import cost_of
from profiler.model.roofs import exp_ceiling
from profiler.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]


def test_e4m3_is_the_format_the_kernel_assumes():
    assert FP8 == torch.float8_e4m3fn and FP8_MAX == torch.finfo(FP8).max == 448.0
    assert output_dtype(FP8) == torch.bfloat16 and output_dtype(torch.float16) == torch.float16
    assert TOLERANCE["fp8"] == 2.0**-4  # e4m3's unit roundoff (3 stored mantissa bits)


def test_quantize_maps_each_heads_largest_magnitude_to_448_and_round_trips_within_e4m3s_precision():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 37, 64, generator=g) * torch.tensor([0.01, 1.0, 300.0])[None, :, None, None]
    x8, descale = quantize_fp8(x)
    assert x8.dtype == FP8 and descale.shape == (2, 3) and descale.dtype == torch.float32
    assert torch.equal(x8.float().abs().amax(dim=(2, 3)), torch.full((2, 3), 448.0))
    back = dequantize_fp8(x8, descale)
    normal = x.abs() >= descale[..., None, None] * 2.0**-6  # e4m3's normal range (smallest normal 2^-6)
    rel = ((back - x).abs() / x.abs())[normal]
    assert rel.max().item() <= 2.0**-4 + 1e-7  # round to nearest: half an ulp, 2^-4 of the value at most


def test_the_kernel_refuses_the_cpu_and_bad_descales_in_one_line():
    q8 = torch.zeros(1, 2, 16, 64).to(FP8)
    ones = torch.ones(1, 2)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1|CUDA GPU"):
        flash_attention_fp8(q8, q8, q8, ones, ones, ones)
    with pytest.raises(ValueError, match=r"k_descale must be an fp32 tensor of shape \(1, 2\).*got \(2,\)"):
        flash_attention_fp8(q8, q8, q8, ones, torch.ones(2), ones)
    with pytest.raises(ValueError, match=r"v_descale must be an fp32 tensor.*torch.float16"):
        flash_attention_fp8(q8, q8, q8, ones, ones, ones.half())
    with pytest.raises(ValueError, match="out_dtype"):
        flash_attention_fp8(q8, q8, q8, ones, ones, ones, out_dtype=torch.float32)
    assert "cannot run an fp8 dot" in unsupported_on(torch.device("cpu"))  # the test session interprets Triton
    with pytest.raises(TypeError, match="not supported here"):
        flash_attention_fp8(q8.float(), q8.float(), q8.float(), ones, ones, ones)


def test_fp8_bytes_are_one_per_element_and_flops_as_in_bf16():
    fp8, bf16 = Shape(2, 16, 4096, 4096, 128, dtype="fp8"), Shape(2, 16, 4096, 4096, 128, dtype="bf16")
    costing = REGISTRY["triton_flash_fp8"].costing
    a, b = cost_of(costing, fp8, "total"), cost_of(costing, bf16, "total")
    assert a.flops == b.flops
    # Q, K, V in e4m3 (1 byte), O in bf16 (2 bytes), the fp32 logsumexp, 3 fp32 descales per (batch, head)
    elems, rows = 2 * 16 * 4096 * 128, 2 * 16 * 4096
    assert a.hbm_bytes == 3 * elems + 2 * elems + 4 * rows + 4 * 2 * (16 + 2 * 16)
    assert b.hbm_bytes == 4 * 2 * elems + 4 * rows


def test_the_exp_roof_binds_in_fp8_at_d128_on_hopper():
    """1,979 dense fp8 TFLOP/s against 3.9·10^12 exp2 per second: at D128 a forward's exponentials take as
    long as its matmuls (128/D), so with no overlap the kernel gets half the fp8 peak; in bf16 two thirds."""
    h100 = hardware.get_device("H100-SXM")
    assert h100.peak_flops("fp8") == 2 * h100.peak_flops("bf16")
    fp8 = exp_ceiling(h100.peak_flops("fp8"), h100.exp2_per_s, 128) / h100.peak_flops("fp8")
    bf16 = exp_ceiling(h100.peak_flops("bf16"), h100.exp2_per_s, 128) / h100.peak_flops("bf16")
    assert fp8 == pytest.approx(0.5, abs=0.01) and bf16 == pytest.approx(2 / 3, abs=0.01)


def test_the_registry_entry_takes_fp8_forward_only():
    from attention_core.implementations import FP8_HEAD_DIMS, _fp8_tiles
    from kernels.flash_fwd_fp8 import HEAD_DIMS, TILES

    # the torch-free costing's copy of the kernel's tiles and head_dims
    assert FP8_HEAD_DIMS == HEAD_DIMS and all(_fp8_tiles(d, "fp8").fwd == TILES[d][:2] for d in HEAD_DIMS)
    impl = REGISTRY["triton_flash_fp8"]
    assert impl.dtypes == ("fp8",) and not impl.supports_backward and impl.head_dims == (64, 128)
    # on this CPU (the test session interprets Triton) the device hook says why first
    assert "cannot run an fp8 dot" in impl.unsupported_reason("cpu", "fp8", 128)
    assert REGISTRY["sdpa_cudnn"].unsupported_reason("cuda", "fp8", 128) == "sdpa_cudnn does not take fp8"


@pytest.mark.parametrize("argv, message", [
    (["capture", "--seq", "256", "--dtype", "fp8", "--impl", "triton_flash_fp8"], "--dtype fp8: fp8 attention needs"),
    (["bench", "--seq", "256", "--dtype", "fp8,bf16", "--mode", "bwd"], "--dtype fp8 runs forward only"),
    (["bench", "--seq", "256", "--impl", "triton_flash_fp8", "--dtype", "bf16"],
     "--impl triton_flash_fp8 takes --dtype fp8; got --dtype bf16"),
    (["capture", "--seq", "256", "--impl", "triton_flash_fp8,sdpa_cudnn", "--dtype", "fp32"],
     "--impl triton_flash_fp8 takes --dtype fp8; --impl sdpa_cudnn takes --dtype fp16,bf16; got --dtype fp32"),
    (["capture", "--seq", "256", "--impl", "all", "--dtype", "fp8"], "--dtype fp8: fp8 attention needs"),
])
def test_fp8_on_the_cpu_or_backward_ends_in_one_line(argv, message, tmp_path):
    """(``--impl all`` with fp8 reaches the device check: 'all' is never refused for the dtypes of its parts.)"""
    proc = subprocess.run([sys.executable, "-m", "profiler", *argv, "--out", str(tmp_path / "cap")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


CAPTURE = ROOT / "reports" / "fp8-h100"


def test_the_fp8_capture_shows_the_exp_roof_binding_every_fp8_point():
    """reports/fp8-h100 (an H100, `python -m profiler bench ... --dtype fp8,bf16`): every fp8 point's binding
    roof is the exponentials' (no overlap), 819 TFLOP/s at D128 and 579 at D64 against the measured fp8 matmul
    of 1,396. Only overlap gets above it: the Gluon kernel's points without a mask from N 8192 (its
    warpgroups take turns, one's exponentials under another's matmuls) and the bf16 points of D128 without
    a mask; the Triton fp8 kernel's (causal D64) stay under it."""
    import json

    import pandas as pd

    from profiler.views import rooflines

    meta = json.loads((CAPTURE / "meta.json").read_text())
    rows = pd.read_parquet(CAPTURE / "results.parquet")
    ok = rows[rows.status == "ok"]
    assert set(ok[ok.dtype == "fp8"].impl) == {"triton_flash_fp8"}
    assert set(ok[ok.dtype == "bf16"].impl) == {"triton_flash", "sdpa_cudnn"}  # the peers that ran: bf16 baselines
    assert (rows[(rows.dtype == "fp8") & (rows.impl != "triton_flash_fp8")].status == "unsupported").all()
    assert (ok[ok.dtype == "fp8"].max_rel_err <= TOLERANCE["fp8"]).all()
    fp8 = rooflines.roofline_points(ok[ok.dtype == "fp8"], rooflines.roofs_from_meta(meta, "fp8"), "compulsory",
                                    rooflines.exp_rate(meta))
    assert (fp8.binds == "exp (SFU), no overlap").all()
    ceiling = fp8.groupby("head_dim").exp_ceiling_tflops.first()
    matmul = meta["measured_ceilings"]["matmul_tflops"]["fp8"] * 1e12  # below the datasheet's: the roof drawn
    for dim in (64, 128):
        assert ceiling[dim] * 1e12 == pytest.approx(exp_ceiling(matmul, rooflines.exp_rate(meta), dim))
    # 1 / (1 + matmul / (4·D · exp2 per second)) of the matmul at D128
    assert ceiling[128] / (matmul / 1e12) == pytest.approx(0.58, abs=0.01)
    assert set(fp8.path) == {"gluon-ws", "tiled"}
    assert set(fp8[fp8.path == "tiled"].head_dim) == {64} and fp8[fp8.path == "tiled"].causal.all()
    assert (fp8[fp8.path == "tiled"].of_ceiling < 1).all()  # no overlap of exponentials and matmuls
    assert (fp8[(fp8.path == "gluon-ws") & ~fp8.causal & (fp8.seq_q >= 8192)].of_ceiling > 1).all()
    bf16 = rooflines.roofline_points(ok[(ok.dtype == "bf16") & ~ok.causal], rooflines.roofs_from_meta(meta, "bf16"),
                                     "compulsory", rooflines.exp_rate(meta))
    assert (bf16[bf16.head_dim == 128].of_ceiling > 1).all()


def test_the_dashboard_opens_the_fp8_capture(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr(sys, "argv", [str(ROOT / "dashboards" / "roofline.py"), "--reports", str(ROOT / "reports"),
                                      "--select", "fp8-h100"])
    at = AppTest.from_file(str(ROOT / "dashboards" / "roofline.py"), default_timeout=120).run()
    assert not at.exception
    assert next(m for m in at.multiselect if m.label == "dtype").value == ["fp8"]  # it opens on what it shows
    for label, value in (("dtype", ["fp8"]), ("head_dim", [128])):
        at = next(m for m in at.multiselect if m.label == label).set_value(value).run()
    assert not at.exception
    roofline = json.loads(at.get("plotly_chart")[0].proto.spec)
    names = [t.get("name") for t in roofline["data"]]
    assert "fp8" in roofline["layout"]["title"]["text"] and "triton_flash_fp8" in names
    assert "exp ceiling D128 fwd (no overlap)" in names and "roof: measured" in names


def test_the_readme_quotes_the_fp8_capture():
    """The README's fp8 paragraph: each figure recomputed from reports/fp8-h100."""
    import pandas as pd

    from profiler.views import rooflines

    text = unwrapped(ROOT / "README.md")
    rows = pd.read_parquet(CAPTURE / "results.parquet")
    ok = rows[rows.status == "ok"]
    fp8, cudnn = ok[ok.dtype == "fp8"], ok[(ok.dtype == "bf16") & (ok.impl == "sdpa_cudnn")]
    both = fp8.merge(cudnn, on=["batch", "heads", "seq_q", "head_dim", "causal"], suffixes=("", "_cudnn"))
    both["speed"] = both.time_ms_cudnn / both.time_ms
    d128 = both[(both.head_dim == 128) & ~both.causal]
    assert f"{d128.tflops.min():.0f} to {d128.tflops.max():.0f} TFLOP/s" in text
    for (dim, causal), group in both.groupby(["head_dim", "causal"]):
        assert f"{group.speed.min():.2f}x to {group.speed.max():.2f}x" in text, (dim, causal)
    meta = json.loads((CAPTURE / "meta.json").read_text())
    points = rooflines.roofline_points(fp8, rooflines.roofs_from_meta(meta, "fp8"), "compulsory",
                                       rooflines.exp_rate(meta))
    assert f"at {points.of_ceiling.min():.2f} to {points.of_ceiling.max():.2f} of it" in text
    assert f"{meta['measured_ceilings']['matmul_tflops']['fp8']:,.0f} measured" in text


def test_model_names_the_exp_roof_and_refuses_fp8_without_fp8_tensor_cores():
    import os

    run = [sys.executable, "-m", "profiler", "model", "--seq", "8192", "--dim", "128", "--dtype", "fp8"]
    wide = {**os.environ, "COLUMNS": "200"}  # rich's tables fit the terminal: a wide one shows whole names
    proc = subprocess.run(run, capture_output=True, text=True, cwd=ROOT, timeout=300, env=wide)
    assert proc.returncode == 0 and "triton_flash_fp8" in proc.stdout and "sdpa_cudnn" not in proc.stdout
    assert "(0.50 of the fp8 peak)" in proc.stdout.replace("\n", " ")
    proc = subprocess.run([*run, "--device-name", "A100-SXM4-80GB"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 2 and "A100-SXM4-80GB has no fp8 figure" in proc.stderr and "Traceback" not in proc.stderr


def test_the_what_if_names_the_exp_roof_for_fp8_on_another_gpu():
    import pandas as pd

    from profiler.views import plots

    rows = pd.read_parquet(CAPTURE / "results.parquet")
    rows = rows[(rows.status == "ok") & (rows.dtype == "fp8")]
    fig = plots.whatif_figure(rows, hardware.get_device("H200"), "fp8")
    hover = [str(h) for t in fig.data if t.name == "triton_flash_fp8" for h in t.hovertext]
    assert hover and all("binding ceiling: exp (SFU), no overlap" in h for h in hover)
    assert {"exp ceiling D64 fwd (no overlap)", "exp ceiling D128 fwd (no overlap)"} <= {t.name for t in fig.data}


def test_observe_intercepts_our_fp8_kernel_and_reads_its_arguments():
    """flash_attention_fp8 is one of observe's targets (the registry entry's ``observes``), read as e4m3 BHSD
    q, k, v, their descales, then causal: a call's shape is worked out here from the tensors."""
    from profiler.observer.hooks import READERS, default_targets

    target = next(t for t in default_targets() if t.api == "triton_flash_fp8")
    assert (target.module, target.attr) == ("kernels.flash_fwd_fp8", "flash_attention_fp8")
    q8 = torch.randn(2, 8, 300, 128).to(torch.float8_e4m3fn)
    k8 = torch.randn(2, 2, 500, 128).to(torch.float8_e4m3fn)
    ones = torch.ones(2, 8), torch.ones(2, 2), torch.ones(2, 2)
    call = READERS["fp8"]("triton_flash_fp8")(q8, k8, k8, *ones, causal=True)
    assert call.api == "triton_flash_fp8" and call.dtype == "fp8" and call.mask == "causal"
    assert call.shape == Shape(2, 8, 300, 500, 128, dtype="fp8", kv_heads=2)
    assert call == READERS["fp8"]("triton_flash_fp8")(q8, k8, k8, *ones, True)  # causal by position too


def test_the_recorder_models_fp8_calls_where_the_run_measured_fp8_roofs():
    """Where the GPU has fp8 tensor cores the run measures the fp8 matmul and models fp8 calls (FLOPs as any
    dtype's, bytes at one per element plus the descales); elsewhere it counts them as not modelled."""
    from attention_core.implementations import FLOAT_DTYPES
    from profiler.model.cost import call_cost
    from profiler.observer.hooks import READERS
    from profiler.observer.recorder import Recorder

    q8 = torch.randn(1, 4, 256, 64).to(torch.float8_e4m3fn)
    call = READERS["fp8"]("triton_flash_fp8")(q8, q8, q8, None, None, None)
    with_fp8 = Recorder("cpu", FLOAT_DTYPES + ("fp8",))
    row = with_fp8.row_for(call, "model.py:10", "fwd")
    flops, hbm, _ = call_cost(call.shape, call.density, call.mask_bytes)
    assert flops == 4 * 1 * 4 * 256 * 256 * 64
    bf16 = call_cost(replace(call.shape, dtype="bf16"), call.density, call.mask_bytes)[1]
    assert hbm < bf16  # e4m3 in, bf16 out: fewer bytes than all of it in bf16
    assert row.flops == flops and row.hbm_bytes == hbm
    without = Recorder("cpu")
    assert without.row_for(call, "model.py:10", "fwd") is None
    assert without.unmodelled == {"triton_flash_fp8 in fp8": 1}


def test_the_gluon_fp8_tile_is_the_cost_models():
    """Rows whose path is gluon-ws are costed with the tile FP8_CONFIGS runs (one for causal and not), the Triton
    kernel's rows with its TILES."""
    from kernels import flash_fwd_hopper
    from kernels.flash_fwd_fp8 import TILES

    for head_dim in (64, 128):
        tiles = {(c.block_m, c.block_n) for (d, _), c in flash_fwd_hopper.FP8_CONFIGS.items() if d == head_dim}
        assert tiles == {flash_fwd_hopper.forward_tile(head_dim, "fp8")} == {(192, 128)}
        costing = REGISTRY["triton_flash_fp8"].costing
        assert costing.tiles_for(head_dim, "fp8", "gluon-ws").fwd == (192, 128)
        assert costing.tiles_for(head_dim, "fp8", "tiled").fwd == TILES[head_dim][:2]


def test_why_the_gluon_fp8_kernel_does_not_take_inputs():
    """Causal head_dim 64 goes to the Triton kernel before anything else is asked; then V must have its keys
    contiguous; then the Gluon conditions (here: the interpreter is on, or this triton's Gluon differs), as
    the bf16 forward's."""
    from kernels.flash_fwd_fp8 import keys_contiguous_layout
    from kernels.flash_fwd_hopper import fp8_reason
    from kernels.hopper_common import sm90_reason

    q = torch.randn(1, 2, 100, 64).to(FP8)
    assert fp8_reason(q, q, q, causal=True).startswith("the Triton fp8 kernel measured faster at head_dim 64")
    assert "keys contiguous" in fp8_reason(q, q, q)
    assert fp8_reason(q, q, keys_contiguous_layout(q)) == sm90_reason("fp8 forward", (64, 128), (FP8,), q=q)


@pytest.mark.parametrize("seq", [1, 77, 128])
def test_keys_contiguous_v_has_a_tma_descriptor_at_any_length(seq):
    """Each head_dim row of the keys-contiguous V is padded to 16 bytes, so its transpose is TMA-readable
    (16-byte strides) at any N, and the values are V's."""
    from kernels.flash_fwd_fp8 import keys_contiguous_layout
    from kernels.hopper_common import tma_layout_reason

    v = torch.randn(2, 3, seq, 64).to(FP8)
    vt = keys_contiguous_layout(v)
    assert vt.stride(2) == 1 and vt.stride(3) == -(-seq // 16) * 16
    assert tma_layout_reason(vt.transpose(2, 3)) is None
    assert torch.equal(vt.float(), v.float())
