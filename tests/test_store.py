"""profiler.store.Capture on the shipped captures: each artefact's path and what loading it gives, None for
an optional artefact that is absent, and the errors of a folder that is not a capture."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from profiler.nsight import nsys
from profiler.store import KEY, Capture, CaptureError, ResultStore, discover_captures, load_capture, merge_parts

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
NSYS_DATA = ROOT / "tests" / "data" / "nsys-h200-n2048"


def test_reference_capture_has_results_kernels_and_traces_but_no_counters():
    capture = Capture(REPORTS / "reference-h200")
    meta, results = capture.load()
    assert meta["device"] == "NVIDIA H200" and capture.meta() == meta
    assert len(results) == 1152 and results.equals(load_capture(capture.path)[1])
    assert capture.results_path == REPORTS / "reference-h200" / "results.parquet"
    # kernels.parquet: the torch profiler's kernels of the 8 traces in traces/, one file each
    kernels = capture.kernels()
    assert len(kernels) == 35
    assert sorted(kernels.trace.unique()) == [p.name for p in capture.trace_files()]
    assert len(capture.trace_files()) == 8 and capture.trace_path("x.json") == capture.traces_dir / "x.json"
    source, drawn = capture.gpu_kernels()
    assert source == "torch profiler" and drawn.equals(kernels)  # a torch table has no memsets to drop
    # Nothing of Nsight Systems or Nsight Compute was taken for this capture.
    assert capture.validation() is None and capture.ncu_kernels() is None and capture.ncu_csvs() == []
    assert capture.nsys_export is None and capture.nsys_ranges() is None and capture.nsys_gpu_ops() is None
    assert capture.report_path.name == "report.html" and capture.stamp[0] > 0 and capture.stamp[1] > 0


def test_validation_capture_has_its_ncu_files_and_tables():
    capture = Capture(REPORTS / "validate-h200")
    _, results = capture.load()
    validation = capture.validation()
    # validate writes one results row per validation row (times: ncu's one profiled run)
    assert len(validation) == len(results) == 112
    assert (results.message == "time: ncu gpu__time_duration of one run").all()
    ncu_kernels = capture.ncu_kernels()
    assert len(ncu_kernels) == 136
    shapes = ncu_kernels[["batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "dtype", "causal"]]
    assert len(capture.ncu_csvs()) == len(shapes.drop_duplicates()) == 16  # one raw CSV per shape
    assert all(p.parent == capture.ncu_dir and p.suffix == ".csv" for p in capture.ncu_csvs())
    assert capture.kernels() is None and capture.gpu_kernels() is None and capture.trace_files() == []


def test_nsys_capture_names_its_export_and_range_table():
    capture = Capture(NSYS_DATA)
    assert capture.nsys_export == NSYS_DATA / "profile.sqlite.xz"
    _, _, projection = nsys.read_export(capture.nsys_export)
    stored = capture.nsys_ranges().set_index("range").sort_index()
    assert stored.equals(nsys.summarize(projection).set_index("range").sort_index())
    assert capture.nsys_gpu_ops() is None  # the shipped folder keeps the ranges only
    # The shipped user capture from the H100 holds an ingested range table too.
    user = Capture(REPORTS / "capture-h100-user").nsys_ranges()
    assert len(user) == 22 and user.range.str.startswith("attn:").all()


def test_ingest_writes_where_capture_reads_and_the_trace_views_prefer_it(tmp_path):
    folder = tmp_path / "nsys"
    shutil.copytree(NSYS_DATA, folder)
    (folder / "nsys_ranges.parquet").unlink()
    capture = Capture(folder)
    assert capture.nsys_ranges() is None and capture.gpu_kernels() is None
    nsys.ingest_capture(folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["meta.json", "nsys_gpu_ops.parquet", "nsys_ranges.parquet", "profile.sqlite.xz", "results.parquet",
         "stats_cuda_gpu_kern_sum.csv", "stats_nvtx_gpu_proj_sum.csv", "stats_nvtx_sum.csv"])
    assert len(capture.nsys_ranges()) == 18 and capture.meta()["nsys"]["ranges"] == 18
    source, kernels = capture.gpu_kernels()
    ops = capture.nsys_gpu_ops()
    assert source == "Nsight Systems export" and set(ops.kind) > {"kernel"} and (kernels.kind == "kernel").all()
    assert len(kernels) == (ops.kind == "kernel").sum()
    assert capture.results().nsys_gpu_ms.notna().all()


def test_a_capture_without_optional_artefacts(tmp_path):
    folder = tmp_path / "small"
    folder.mkdir()
    for name in ("meta.json", "results.parquet"):
        shutil.copy(REPORTS / "gqa-prefill-h100" / name, folder)
    capture = Capture(str(folder))  # a str is taken as a path
    assert capture.path == folder and capture.name == "small"
    assert capture.started and capture.has_meta_and_results
    assert len(capture.results()) == len(load_capture(REPORTS / "gqa-prefill-h100")[1])
    for load in (capture.kernels, capture.gpu_kernels, capture.validation, capture.ncu_kernels, capture.nsys_ranges,
                 capture.nsys_gpu_ops):
        assert load() is None, load.__name__
    assert capture.nsys_export is None and capture.trace_files() == [] and capture.part_files() == []
    assert capture.stamp_of(capture.validation_path, capture.meta_path)[0] == 0


def test_what_is_not_a_capture_is_named(tmp_path):
    empty = Capture(tmp_path / "empty")
    assert not empty.started and empty.stamp == (0, 0)
    with pytest.raises(CaptureError, match="is not a capture folder"):
        empty.load()
    (tmp_path / "empty").mkdir()
    with pytest.raises(CaptureError, match="missing meta.json, results.parquet"):
        empty.load()
    empty.meta_path.write_text("{not json")
    assert empty.started and not empty.has_meta_and_results
    with pytest.raises(CaptureError, match="meta.json' is not valid JSON"):
        empty.meta()
    with pytest.raises(CaptureError, match="missing results.parquet"):
        empty.results()
    pd.DataFrame({"impl": ["x"]}).to_parquet(empty.results_path)
    with pytest.raises(CaptureError, match="results.parquet' lacks columns: step, mode"):
        empty.results()
    # discover_captures reads the same: the broken folder is named and skipped, the others load.
    shutil.copytree(REPORTS / "gqa-prefill-h100", tmp_path / "good")
    (tmp_path / "notes").mkdir()
    captures, warnings = discover_captures(tmp_path)
    assert list(captures) == ["good"] and len(warnings) == 1 and warnings[0].startswith("skipped empty: ")


def test_result_store_parts_merge_into_the_results(tmp_path):
    _, reference = load_capture(REPORTS / "reference-h200")
    rows = reference.head(3).to_dict("records")
    capture = Capture(tmp_path / "cap")
    meta = json.loads((REPORTS / "reference-h200" / "meta.json").read_text())
    ResultStore(capture.path, meta).append(rows[:1])
    part = ResultStore(capture.path, meta, resume=True, part="rank-1", write_meta=False)
    assert part.path == capture.part_path("rank-1") == capture.path / "parts" / "rank-1.parquet"
    part.append(rows[1:])
    # The part sees what results.parquet already holds (every key is unique: only that file has row 0's).
    assert len(part.known) == 1 and part.has({k: rows[0][k] for k in KEY})
    assert capture.part_files() == [capture.part_path("rank-1")] and len(capture.results()) == 1
    # Rank 0 was stopped (torchrun ends the others when one rank dies) while writing: its temporary file
    # holds no committed row, and it must not stop the merge.
    (capture.parts_dir / ".rank-0.parquet.tmp").write_bytes(b"half a parquet file")
    assert merge_parts(capture.path) == 2
    assert len(capture.results()) == 3 and not capture.parts_dir.exists()
    assert capture.meta()["device"] == "NVIDIA H200"


def test_the_shipped_reports_open_without_a_warning():
    """Every folder under reports/ is a capture that loads, or something else that is passed over quietly
    (scripts/hf_vs_sdpa.py's runs keep a meta.json beside their rows.jsonl): the dashboard's default view
    opens without a "skipped" warning."""
    captures, warnings = discover_captures(ROOT / "reports")
    assert warnings == []
    assert "fp8-h100" in captures and "hf-llama3-8b-h100" not in captures
