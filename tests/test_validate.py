"""Nsight Compute validation: parsing real ncu CSVs from the H200 (reports/validate-h200/ncu) and
the cost model against those counters."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from profiler import cost_model as cm
from profiler import ncu, validate
from profiler.cli import main

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "reports" / "validate-h200"


def test_raw_csv_parses_into_one_row_per_kernel():
    k = ncu.read_raw_csv(CAPTURE / "ncu" / "B1H16N4096D64-fp16.csv")
    assert list(zip(k.impl, k.step)) == [("naive", "qk_matmul"), ("naive", "scale_mask"), ("naive", "softmax"),
                                         ("naive", "pv_matmul"), ("triton_flash", "total"), ("sdpa_flash", "total"),
                                         ("sdpa_cudnn", "total")]
    assert k["range"][0] == "attn:validate/naive/qk_matmul"
    flash = k[k.impl == "triton_flash"].iloc[0]
    assert flash.kernel == "_attn_fwd" and flash.grid == "(64, 16, 1)"
    # Q, K and V (3 × 16·4096·64·2 bytes = 25.17 MB) come from DRAM once; the L2 serves the re-reads.
    assert flash.dram_read_bytes == pytest.approx(25.17e6, rel=0.01)
    assert flash.tensor_ops_fp16 == 4 * 16 * 4096**2 * 64  # = 4·B·H·N²·D exactly
    causal = ncu.read_raw_csv(CAPTURE / "ncu" / "B1H16N4096D64-fp16-causal.csv")
    assert (causal.step == "scale_mask").sum() == 4  # multiply, ones, triu, masked_fill


def test_stored_validation_is_what_the_model_gives_for_the_stored_counters(tmp_path):
    meta = json.loads((CAPTURE / "meta.json").read_text())
    for part in ("ncu", ):
        (tmp_path / part).mkdir()
        for f in (CAPTURE / part).glob("*.csv"):
            (tmp_path / part / f.name).write_bytes(f.read_bytes())
    rebuilt = validate.rebuild(tmp_path, meta["l2_bytes"])
    stored = pd.read_parquet(CAPTURE / "validation.parquet")
    pd.testing.assert_frame_equal(rebuilt.reset_index(drop=True), stored.reset_index(drop=True), check_dtype=False)


@pytest.fixture(scope="module")
def table():
    return pd.read_parquet(CAPTURE / "validation.parquet")


def test_tensor_flops_within_two_percent_everywhere(table):
    assert len(table) == 112  # 16 shapes × (4 naive steps + 3 fused kernels)
    matmuls = table[table.model_tensor_flops > 0]
    assert ((matmuls.tensor_flops_ratio - 1).abs() <= 0.02).all()
    elementwise = table[table.model_tensor_flops == 0]
    assert set(elementwise.step) == {"scale_mask", "softmax"} and (elementwise.tensor_flops == 0).all()


def test_dram_bytes_within_fifteen_percent_for_fused_kernels_and_at_n4096(table):
    fused = table[table.step == "total"]
    assert ((fused.dram_ratio - 1).abs() <= 0.15).all()
    big = table[table.seq_q == 4096]
    assert ((big.dram_ratio - 1).abs() <= 0.15).all()


def test_causal_diagonal_tiles_are_counted_by_the_kernels_query_tile(table):
    causal = table[(table.step == "total") & table.causal & (table.seq_q == 1024)]
    # 8 query tiles of 128 rows compute 36 of 64 tile pairs: 1.125x the exact causal half.
    assert (causal.model_tensor_flops / (cm.fused_flops(cm.Shape(1, 16, 1024, 1024, 64, causal=True))
                                         * causal.head_dim / 64)).round(6).tolist() == [1.125] * len(causal)


def test_query_tile_sources():
    assert validate.query_tile("triton_flash", "_attn_fwd", "(64, 16, 1)", 4096) == 64
    assert validate.query_tile("triton_flash", "_attn_fwd", "(8, 16, 1)", 1000) == 125
    fa2 = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, 0, 0, cutlass::half_t>>"
    assert validate.query_tile("sdpa_flash", fa2, "(32, 1, 16)", 4096) == 128
    assert validate.query_tile("sdpa_cudnn", "cudnn_generated_fort_native_sdpa_sm90", "(132, 1, 1)", 4096) == 128


def test_dram_model_keeps_what_l2_retains():
    s = cm.Shape(1, 16, 4096, 4096, 64)
    score = 16 * 4096**2 * 2
    assert cm.dram_bytes(s, "naive", "softmax") == 2 * score  # no L2: read S, write P
    assert cm.dram_bytes(s, "naive", "softmax", l2_bytes=60e6) == 2 * score - 0.4 * 60e6
    o = 16 * 4096 * 64 * 2
    assert cm.dram_bytes(s, "triton_flash", "total", l2_bytes=60e6) == 3 * o + o + 16 * 4096 * 4 - 7.5e6


def test_bad_input(tmp_path, monkeypatch, capsys):
    (tmp_path / "empty.csv").write_text("==PROF== nothing profiled\n")
    with pytest.raises(ncu.NcuError, match="holds no ncu CSV table"):
        ncu.read_raw_csv(tmp_path / "empty.csv")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("NCU", str(tmp_path / "nope"))
    monkeypatch.setattr(ncu.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(ncu.Path, "is_file", lambda self: False)
    with pytest.raises(ncu.NcuError, match=r"Nsight Compute \(ncu\) not found .* set NCU=/path/to/ncu"):
        ncu.find_ncu()
    assert main(["validate"]) == 2  # no GPU here
    assert "validate needs a CUDA GPU" in capsys.readouterr().err
    assert main(["validate", "--rebuild", str(tmp_path)]) == 2
    assert "not a capture" in capsys.readouterr().err


def test_hierarchical_roofline_puts_each_kernel_at_both_intensities(table):
    from profiler import plots

    meta = json.loads((CAPTURE / "meta.json").read_text())
    fig = plots.hierarchical_roofline_figure(table, meta, "fp16")
    roofs = [t.name for t in fig.data if t.name.startswith("roof:")]
    assert roofs[:2] == ["roof: H200 datasheet", "roof: measured"] and roofs[2].startswith("roof: L2 (highest")
    flash_dram = next(t for t in fig.data if t.name == "triton_flash (DRAM)")
    flash_l2 = next(t for t in fig.data if t.name == "triton_flash (L2)")
    assert len(flash_dram.x) == len(flash_l2.x) == 8  # fp16: 2 lengths × 2 head_dims × causal or not
    assert all(d > l2 for d, l2 in zip(flash_dram.x, flash_l2.x))  # L2 moves more bytes than DRAM
    view = plots.validation_table_view(table)
    assert {"DRAM ratio", "L2 ratio", "tensor ratio"} <= set(view.columns) and len(view) == 112


def test_dashboard_validation_tab(tmp_path, monkeypatch):
    import shutil

    from streamlit.testing.v1 import AppTest

    shutil.copytree(CAPTURE, tmp_path / "validate-h200")
    monkeypatch.setenv("ATTN_REPORTS", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "dashboards" / "roofline.py"), default_timeout=120).run()
    assert not at.exception
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert "Hierarchical roofline from Nsight Compute counters (fp16)" in titles


def test_ncu_driver_profiles_the_capture_s_naive_steps_then_whole_kernels():
    from profiler.ncu_driver import measured_calls

    shape = cm.Shape(1, 2, 40, 40, 16, "fp32", causal=True)
    seen = []
    for impl, step, call in measured_calls(shape, ["naive", "triton_flash"], device="cpu"):
        out = call()
        seen.append((impl, step, tuple(out.shape)))
    assert seen == [("naive", "qk_matmul", (1, 2, 40, 40)), ("naive", "scale_mask", (1, 2, 40, 40)),
                    ("naive", "softmax", (1, 2, 40, 40)), ("naive", "pv_matmul", (1, 2, 40, 16)),
                    ("triton_flash", "total", (1, 2, 40, 16))]
