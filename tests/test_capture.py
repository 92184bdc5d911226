"""Capture, the results store, torch-profiler trace parsing, and the shipped H200 reference."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from attention_core.shape import Shape
from profiler.cli import main
from profiler.measure.torch_trace import kernels_from_chrome_trace, kernels_of_capture
from profiler.model.fused import compulsory_bytes, fused_flops
from profiler.model.naive import naive_step_bytes, naive_step_flops
from profiler.registry import BUILTIN
from profiler.store import COLUMNS, SCHEMA, CaptureError, ResultStore, load_capture, read_results

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
REFERENCE = ROOT / "reports" / "reference-h200"
# Implementations that joined the registry after the reference sweep (a new sweep records them too).
NEWER_THAN_REFERENCE = {"fa4", "triton_flash_fp8"}
MEASURED = set(BUILTIN) - NEWER_THAN_REFERENCE


# ------------------------------------------------------------------------------ torch traces (real)


def test_naive_kernels_are_attributed_to_their_steps():
    # A real trace from the H200: one iteration of naive attention at B4 H32 N4096 D64 fp16.
    k = kernels_from_chrome_trace(DATA / "torch-traces" / "naive-fwd-B4H32N4096D64-fp16.json")
    assert list(k["range"]) == ["qk_matmul", "scale_mask", "scale_mask", "softmax", "pv_matmul"]
    assert all(r.startswith("naive/fwd/seq=4096 > ") for r in k["ranges"])
    assert k["kernel"][0].startswith("nvjet_sm90") and "SoftMaxForward" in k["kernel"][3]
    # S has 4·32·4096² = 2³¹ elements: PyTorch splits the scale into two kernels (32-bit indexing).
    assert list(k["gpu_us"]) == [1269.053, 1000.509, 1002.910, 6702.766, 1141.534]


def test_triton_kernel_launched_through_the_driver_api_is_attributed():
    k = kernels_from_chrome_trace(DATA / "torch-traces" / "triton_flash-fwd-B4H32N4096D64-fp16.json")
    assert k.to_dict("records")[0] | {"start_us": 0} == {
        "kernel": "_attn_fwd", "gpu_us": 1259.137, "start_us": 0, "stream": 7,
        "range": "triton_flash/fwd/seq=4096", "ranges": "triton_flash/fwd/seq=4096",
    }


def test_trace_without_kernels_and_bad_trace(tmp_path):
    cpu_only = tmp_path / "cpu.json"
    cpu_only.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1,
                                                     "dur": 2}]}))
    assert kernels_from_chrome_trace(cpu_only).empty
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not a readable Chrome trace"):
        kernels_from_chrome_trace(tmp_path / "bad.json")


# -------------------------------------------------------------------------------------------- store


def _row(**kw):
    row = dict(impl="naive", step="total", mode="fwd", batch=1, heads=2, seq_q=64, seq_kv=64, head_dim=64,
               dtype="fp32", causal=False, status="ok", time_ms=1.5, flops=1e9, hbm_bytes=1e6)
    row.update(kw)
    return row


def test_store_round_trip_keeps_values_and_schema(tmp_path):
    store = ResultStore(tmp_path / "cap", {"device": "test"})
    store.append([_row()])
    store.append([_row(impl="sdpa_math", status="oom", time_ms=None, message="CUDA out of memory")])
    meta, frame = load_capture(tmp_path / "cap")
    assert meta == {"device": "test"}
    assert list(frame.columns[: len(COLUMNS)]) == COLUMNS
    assert frame.loc[0, "time_ms"] == 1.5 and frame.loc[0, "flops"] == 1e9
    assert pd.isna(frame.loc[1, "time_ms"]) and frame.loc[1, "status"] == "oom"
    for column, (dtype, _) in SCHEMA.items():
        assert str(frame[column].dtype) == {"string": "string", "bool": "bool"}.get(dtype, dtype), column


def test_store_resume_keeps_rows_and_command_history(tmp_path):
    ResultStore(tmp_path, {"command": "first", "time": "t1", "shapes": 16, "corrections": ["note"]}).append([_row()])
    store = ResultStore(tmp_path, {"command": "second", "time": "t2", "shapes": 8}, resume=True)
    assert store.has({"impl": "naive", "seq_q": 64}) and not store.has({"impl": "triton_flash"})
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["commands"] == ["first", "second"] and meta["time"] == "t2"
    assert meta["corrections"] == ["note"]  # kept from the first run
    assert meta["earlier_runs"] == [{"command": "first", "time": "t1", "shapes": 16}]  # each run's own count
    assert meta["shapes"] == 8


def test_load_capture_names_what_is_wrong(tmp_path):
    with pytest.raises(CaptureError, match="is not a capture folder: missing meta.json, results.parquet"):
        load_capture(tmp_path)
    (tmp_path / "meta.json").write_text("{")
    (tmp_path / "results.parquet").write_bytes(b"PAR1 nonsense")
    with pytest.raises(CaptureError, match="meta.json' is not valid JSON"):
        load_capture(tmp_path)
    (tmp_path / "meta.json").write_text("{}")
    with pytest.raises(CaptureError, match="is not a readable parquet file"):
        load_capture(tmp_path)
    pd.DataFrame({"impl": ["x"]}).to_parquet(tmp_path / "results.parquet")
    with pytest.raises(CaptureError, match="lacks columns: step, mode"):
        load_capture(tmp_path)


# ---------------------------------------------------------------------------------- capture on CPU


def test_cpu_capture_end_to_end(tmp_path):
    out = tmp_path / "cap"
    assert main(["capture", "--device", "cpu", "--seq", "48", "--heads", "2", "--batch", "1", "--dtype", "fp32",
                 "--impl", "naive,triton_flash,sdpa_math,sdpa_cudnn", "--out", str(out), "--rep-ms", "20"]) == 0
    meta, frame = load_capture(out)
    assert meta["device"].startswith("CPU") and meta["finished"] is True
    assert meta["measured_ceilings"]["matmul_tflops"]["fp32"] > 0
    rows = {(r.impl, r.step): r for r in frame.itertuples()}
    shape = Shape(1, 2, 48, 48, 64, "fp32")
    qk = rows[("naive", "qk_matmul")]
    assert qk.status == "ok" and qk.flops == naive_step_flops(shape, "qk_matmul")
    assert qk.hbm_bytes == naive_step_bytes(shape, "qk_matmul")
    assert qk.tflops == pytest.approx(qk.flops / (qk.time_ms * 1e-3) / 1e12)
    assert qk.arithmetic_intensity == pytest.approx(qk.flops / qk.hbm_bytes)
    assert qk.bound in ("memory", "compute") and qk.roof_fraction_measured > 0
    assert pd.isna(qk.roof_fraction)  # a CPU has no datasheet roof
    # Under the interpreter in this test session (tests/conftest.py): checked and timed, but not a kernel's time,
    # so no rate and no bound, and both the row and meta.json say so.
    flash = rows[("triton_flash", "total")]
    assert flash.status == "interpreted" and flash.max_rel_err < 1e-5 and flash.time_ms > 0
    assert "Triton interpreter" in flash.message and pd.isna(flash.tflops) and pd.isna(flash.bound)
    assert flash.flops == fused_flops(shape) and flash.hbm_bytes == compulsory_bytes(shape)
    assert meta["triton_interpreter"] is True
    assert rows[("sdpa_cudnn", "total")].status == "unsupported"
    assert {s for (i, s) in rows if i == "naive"} == {"total", "qk_matmul", "scale_mask", "softmax", "pv_matmul"}


def test_capture_refuses_to_overwrite(tmp_path, capsys):
    args = ["capture", "--device", "cpu", "--seq", "16", "--impl", "naive", "--out", str(tmp_path), "--rep-ms", "5"]
    assert main(args) == 0
    assert main(args) == 2
    assert "already holds a capture; pass --resume" in capsys.readouterr().err


def test_ctrl_c_says_where_the_rows_are_and_how_to_go_on(tmp_path, capsys, monkeypatch):
    """Ctrl-C during the measuring loop: exit 130 as python does, and one line naming the folder that keeps
    the finished rows and the command that measures the rest; before any folder exists, just 'interrupted'."""
    import profiler.cli.capture as capture_cli

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(capture_cli, "measure_with_progress", interrupt)
    out = tmp_path / "cap1"
    assert main(["capture", "--device", "cpu", "--seq", "16", "--impl", "naive", "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip() == (f"interrupted: the rows finished so far are kept in {out}/; "
                                               f"run the same command with --out {out} --resume to measure the rest")
    monkeypatch.setattr(capture_cli, "start_capture", interrupt)
    assert main(["capture", "--device", "cpu", "--seq", "16", "--impl", "naive", "--out", str(tmp_path / "c2")]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_interrupted_sweep_keeps_every_finished_row(tmp_path):
    out = tmp_path / "sweep"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cmd = [sys.executable, "-m", "profiler", "sweep", "--device", "cpu", "--seq", ",".join(["32"] * 1 + ["48", "64",
           "80", "96", "112", "128", "144", "160", "176", "192"]), "--impl", "naive,sdpa_math", "--out", str(out),
           "--rep-ms", "50"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if (out / "results.parquet").exists() and len(read_results(out / "results.parquet")) >= 6:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the sweep wrote no rows in 120 s")
        proc.send_signal(signal.SIGKILL)  # no chance to clean up
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    _, frame = load_capture(out)
    done = len(frame)
    assert 6 <= done < 11 * 6  # some, not all, of 11 shapes × (naive: 5 rows, sdpa_math: 1 row)
    assert frame["status"].eq("ok").all() and frame["time_ms"].notna().all()
    # --resume measures only what is missing.
    resumed = subprocess.run(cmd + ["--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    _, frame = load_capture(out)
    assert len(frame) == 11 * 6 and not frame.duplicated(subset=["impl", "step", "seq_q"]).any()


# -------------------------------------------------------------------------- the shipped reference


def test_shipped_reference_capture_schema_and_coverage():
    meta, frame = load_capture(REFERENCE)
    assert meta["device"] == "NVIDIA H200" and meta["compute_capability"] == "9.0"
    assert meta["datasheet_device"] == "H200" and meta["measured_ceilings"]["copy_gbps"] > 1000
    totals = frame[frame.step == "total"]
    assert set(totals.impl) == MEASURED  # every implementation of the registry it was measured with
    assert sorted(totals.seq_q.unique()) == [512, 1024, 2048, 4096, 8192, 16384]
    assert set(totals.dtype) == {"fp16", "bf16"} and set(totals.head_dim) == {64, 128}
    assert set(totals.causal) == {False, True} and set(totals["mode"]) == {"fwd", "fwd+bwd"}
    assert len(totals) == 6 * 2 * 2 * 2 * 2 * len(MEASURED)  # every case has a row, whatever its status
    assert set(frame.status) <= {"ok", "oom", "unsupported", "error"}  # no row failed the correctness check
    # Measured with today's kernels: our forward takes the Gluon kernel on this sm_90 GPU wherever it is chosen.
    ours_fwd = totals[(totals.impl == "triton_flash") & (totals["mode"] == "fwd") & ~totals.causal]
    assert (ours_fwd.path == "gluon-ws").all()
    ok = frame[frame.status == "ok"]
    assert ok.time_ms.notna().all() and (ok.roof_fraction <= 1.0).all()
    assert (frame[frame.status != "ok"].message.str.len() > 0).all()
    # The naive steps are rows of their own wherever naive ran.
    naive = frame[(frame.impl == "naive") & (frame.status == "ok")]
    assert set(naive.step) == {"total", "qk_matmul", "scale_mask", "softmax", "pv_matmul"}
    # Our kernels' correctness was checked in the sweep: fp16 ~3e-4, bf16 ~2e-3 against fp32.
    ours = ok[ok.impl == "triton_flash"]
    assert (ours[ours.dtype == "fp16"].max_rel_err < 1e-3).all() and (ours.max_rel_err < 1e-2).all()


def test_reference_kernel_table_matches_its_traces():
    stored = pd.read_parquet(REFERENCE / "kernels.parquet")
    rebuilt = kernels_of_capture(REFERENCE)
    pd.testing.assert_frame_equal(stored.reset_index(drop=True), rebuilt.reset_index(drop=True), check_dtype=False)
    assert set(rebuilt.impl) == MEASURED
    assert (rebuilt["range"] != "").all()  # every kernel found its enclosing range


def test_docs_schema_documents_the_schema_as_stored():
    readme = (ROOT / "docs" / "schema.md").read_text()
    for column, (dtype, meaning) in SCHEMA.items():
        assert f"| `{column}` | {dtype} | {meaning} |" in readme, column


def test_capture_path_imports_neither_plotly_nor_streamlit(tmp_path):
    # The GPU machine has neither; a user profiling a GPU box should not need them.
    code = ("import sys; from profiler.cli import main; "
            f"main(['capture', '--device', 'cpu', '--seq', '16', '--impl', 'naive', '--out', r'{tmp_path / 'c'}', "
            "'--rep-ms', '5']); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('plotly', 'streamlit')]; assert not bad, bad")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd+bwd"])
@pytest.mark.parametrize("impl", ["naive", "triton_flash", "sdpa_math"])
def test_run_case_times_every_mode_and_checks_gradients(impl, mode):
    from profiler.measure.runner import run_case
    from profiler.registry import REGISTRY

    result = run_case(REGISTRY[impl], Shape(1, 2, 33, 33, 16, "fp32", causal=True, mode=mode), "cpu", rep_ms=5)
    # a Triton kernel here runs in the interpreter (tests/conftest.py): checked and timed, but not a kernel time
    assert result.status == ("interpreted" if REGISTRY[impl].is_triton else "ok"), result.message
    assert result.timing.median_ms > 0 and result.max_rel_err < 1e-5  # output, and dq, dk, dv when bwd
    assert result.flops == fused_flops(Shape(1, 2, 33, 33, 16, "fp32", causal=True, mode=mode))


SHIPPED = sorted(p.name for p in (ROOT / "reports").iterdir() if (p / "results.parquet").exists())


def test_every_shipped_capture_is_checked():
    assert {"reference-h200", "capture-h200-n8192", "bench-h200-grid", "validate-h200",
            "validate-h200-n2048"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_captures_match_the_current_cost_model(name):
    from profiler.model.roofs import Roofs
    from profiler.remodel import remodel

    meta, frame = load_capture(ROOT / "reports" / name)
    _, changed = remodel(frame, Roofs.from_meta(meta), meta)
    assert not changed.any(), f"run `python -m profiler remodel reports/{name}`"


def test_remodel_recomputes_only_rows_the_model_changed(tmp_path):
    import shutil

    from profiler.cli import main

    shutil.copytree(ROOT / "reports" / "reference-h200", tmp_path / "ref")
    path = tmp_path / "ref" / "results.parquet"
    original = pd.read_parquet(path)
    stale = original.copy()
    row = stale.index[(stale.impl == "naive") & (stale.step == "scale_mask") & stale.causal
                      & (stale.status == "ok")][0]
    stale.loc[row, ["hbm_bytes", "arithmetic_intensity", "gbps"]] = [1.0, 2.0, 3.0]  # as an older model had it
    stale.to_parquet(path, index=False)
    assert main(["remodel", str(tmp_path / "ref"), "--dry-run"]) == 0
    assert pd.read_parquet(path).loc[row, "hbm_bytes"] == 1.0  # a dry run writes nothing
    assert main(["remodel", str(tmp_path / "ref")]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(path), original)
    assert json.loads((tmp_path / "ref" / "meta.json").read_text())["remodelled"][-1]["rows_changed"] == 1
    assert main(["remodel", str(tmp_path / "nowhere")]) == 2


def test_run_metadata_records_our_kernels_switches(monkeypatch):
    """meta.json keeps the ATTN_* variables a run had (ATTN_GLUON=0 makes a bench of the same command measure the
    portable kernels: round 18's route captures differed only by it), and nothing where none is set."""
    from profiler.measure.meta import run_metadata

    for key in [k for k in os.environ if k.startswith("ATTN_")]:
        monkeypatch.delenv(key)
    assert "env" not in run_metadata("cpu")
    monkeypatch.setenv("ATTN_GLUON", "0")
    monkeypatch.setenv("ATTN_AUTOTUNE", "0")
    assert run_metadata("cpu")["env"] == {"ATTN_AUTOTUNE": "0", "ATTN_GLUON": "0"}


def test_a_timed_row_keeps_the_clock_and_power_it_ran_at():
    """profiler.measure.gpu_state.GpuSampler beside a timing (its reads stood in for NVML's): the median SM clock and
    the mean power of the samples go into the row; without NVML (a CPU) both stay empty."""
    import threading

    from profiler.measure.gpu_state import GpuSampler
    from profiler.measure.timing import measure

    reads = iter([(1755.0, 640.0), (1500.0, 700.0), (1980.0, 610.0)] + [(1500.0, 700.0)] * 30)
    done = threading.Event()

    def read():
        try:
            return next(reads)
        except StopIteration:  # every stand-in read taken: later reads fail, which leaves gaps, not samples
            done.set()
            raise

    with GpuSampler("cuda", period_s=0.001, read=read) as state:
        assert done.wait(10)
    assert state.sm_clock_mhz == 1500.0  # the median of mostly 1500 MHz
    assert state.power_w == (640 + 700 + 610 + 30 * 700) / 33
    with GpuSampler("cpu") as cpu:
        pass
    assert cpu.sm_clock_mhz is None and cpu.power_w is None and cpu.power_source is None
    timing = measure(lambda: None, "cpu", rep_ms=5)
    assert timing.sm_clock_mhz is None and timing.power_w is None


def test_power_comes_from_nvmls_instant_field_where_the_gpu_has_it():
    """profiler.measure.gpu_state.instant_power on a stand-in NVML: the instant field (mW) where it answers, else
    nvmlDeviceGetPowerUsage, which on an H100 is a one-second average."""
    import types

    from profiler.measure.gpu_state import instant_power

    class NVMLError(Exception):
        pass

    def lib(field_answers):
        value = types.SimpleNamespace(nvmlReturn=0 if field_answers else 3, value=types.SimpleNamespace(uiVal=701500))
        return types.SimpleNamespace(NVML_FI_DEV_POWER_INSTANT=186, NVML_SUCCESS=0, NVMLError=NVMLError,
                                     nvmlDeviceGetFieldValues=lambda handle, ids: [value],
                                     nvmlDeviceGetPowerUsage=lambda handle: 350000)
    read, source = instant_power(lib(True), "handle")
    assert read() == 701.5 and source == "instant"
    read, source = instant_power(lib(False), "handle")
    assert read() == 350.0 and source == "average"


def test_the_user_guide_quotes_the_samplers_measured_cost():
    """scripts/perf_experiments/nvml_overhead.py on an H100, twice (round 21's calls A and H): each host-bound case's
    median with the sampler over without it; the user guide quotes their range."""
    import re

    folder = Path(__file__).resolve().parents[1] / "reports" / "perf-h100" / "gluon_fwd_round21"
    ratios = [float(r) for name in ("a_nvml_overhead.txt", "h_nvml_overhead.txt")
              for r in re.findall(r"with/without (\d\.\d+)", (folder / name).read_text())]
    assert len(ratios) == 6
    guide = " ".join((Path(__file__).resolve().parents[1] / "docs" / "user-guide.md").read_text().split())
    assert f"with/without {min(ratios):.3f} to {max(ratios):.3f} at a 17 µs decode step" in guide
