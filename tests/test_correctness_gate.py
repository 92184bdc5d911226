"""A wrong result is never "ok": an implementation whose output (or gradient) has the wrong shape,
dtype, non-finite values, or an error above its dtype's tolerance is recorded as 'wrong', keeps
its times, and has no rates, bound or roof fraction, so no chart or ratio can place it."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

import profiler
from attention_core.costing import Costing
from attention_core.shape import Shape
from kernels.reference import TOLERANCE, WrongOutput, check_output
from profiler.cli import main
from profiler.measure.runner import run_case
from profiler.model.roofs import Roofs
from profiler.model.rows import Timing as RowTiming
from profiler.model.rows import capture_row
from profiler.registry import REGISTRY
from profiler.remodel import remodel
from profiler.store import load_capture, to_frame

SHAPE = Shape(1, 2, 37, 37, 16, "fp32")


pytestmark = pytest.mark.usefixtures("registry_restored")  # tests/conftest.py


def _sdpa(q, k, v, causal=False, sm_scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)


def _register(name, fn, **kwargs):
    profiler.register(fn, name=name, **kwargs)
    return REGISTRY[name]


# The three user implementations of the issue, and three more ways to be wrong.
WRONG = {
    "noise": (lambda q, k, v, causal=False, sm_scale=None: torch.randn_like(q) * 100, "above the fp32 tolerance"),
    "one_row": (lambda q, k, v, causal=False, sm_scale=None: _sdpa(q, k, v, causal, sm_scale)[:, :, :1],
                "has shape (1, 2, 1, 16); attention's is (1, 2, 37, 16)"),
    "one_percent_off": (lambda q, k, v, causal=False, sm_scale=None: _sdpa(q, k, v, causal, sm_scale) * 1.01,
                        "above the fp32 tolerance"),
    "nan": (lambda q, k, v, causal=False, sm_scale=None: _sdpa(q, k, v, causal, sm_scale).index_fill(
        2, torch.tensor([3]), float("nan")), "has 32 non-finite element(s)"),
    "half_out": (lambda q, k, v, causal=False, sm_scale=None: _sdpa(q, k, v, causal, sm_scale).half(),
                 "has dtype fp16; the inputs are fp32"),
    "list_out": (lambda q, k, v, causal=False, sm_scale=None: [_sdpa(q, k, v, causal, sm_scale)],
                 "is a list, not a tensor"),
}


@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_output_is_recorded_wrong_with_its_time(name):
    fn, said = WRONG[name]
    result = run_case(_register(name, fn), SHAPE, "cpu", rep_ms=5)
    assert result.status == "wrong"
    assert said in result.message
    assert result.timing is not None and result.timing.median_ms > 0  # kept for the record
    assert result.tflops is None


def test_error_values_of_the_wrong_ones():
    noise = run_case(_register("noise", WRONG["noise"][0]), SHAPE, "cpu", rep_ms=5)
    off = run_case(_register("off", WRONG["one_percent_off"][0]), SHAPE, "cpu", rep_ms=5)
    assert noise.max_rel_err > 10  # ~100x the output's norm
    assert off.max_rel_err == pytest.approx(0.01, rel=1e-3)  # exactly the 1% it is off
    assert "0.01 against fp32 naive attention is above the fp32 tolerance 0.002" in off.message


def test_a_correct_implementation_passes_and_a_stated_tolerance_is_used():
    ok = run_case(_register("good", _sdpa), SHAPE, "cpu", rep_ms=5)
    assert ok.status == "ok" and ok.max_rel_err < 1e-6 and ok.tflops > 0
    # An approximate kernel that documents its tolerance: 1% off passes under a 2% tolerance.
    loose = run_case(_register("loose", WRONG["one_percent_off"][0], tolerance=0.02), SHAPE, "cpu", rep_ms=5)
    assert loose.status == "ok" and loose.max_rel_err == pytest.approx(0.01, rel=1e-3)
    from profiler.measure.folder import user_impls_meta

    assert user_impls_meta([REGISTRY["loose"]])["loose"]["tolerance"] == 0.02  # recorded with the capture


BACKWARD = Shape(1, 2, 9, 9, 16, "fp32", mode="fwd+bwd")


def test_wrong_outputs_with_a_backward_stay_wrong_and_never_raise():
    """An output that is not attention's may not even take a backward: the case is 'wrong' with the
    check's message, timed where it can be, and run_case does not raise (it did for None)."""
    cases = {
        "returns_none": (lambda q, k, v, causal=False, sm_scale=None: None, "is a NoneType, not a tensor",
                         "; not timed: AttributeError"),
        "one_row_bwd": (WRONG["one_row"][0], "has shape (1, 2, 1, 16); attention's is (1, 2, 9, 16)", "; not timed"),
        "detached": (lambda q, k, v, causal=False, sm_scale=None: _sdpa(q, k, v).detach(), "the output is detached",
                     "; not timed: RuntimeError"),
        "off_bwd": (WRONG["one_percent_off"][0], "above the fp32 tolerance", None),
    }
    for name, (fn, said, untimed) in cases.items():
        for mode in ("fwd+bwd", "bwd"):
            shape = Shape(1, 2, 9, 9, 16, "fp32", mode=mode)
            result = run_case(_register(f"{name}_{mode[:3]}", fn), shape, "cpu", rep_ms=2)
            assert result.status == "wrong" and said in result.message, (name, mode, result.message)
            if untimed is None:
                assert result.timing is not None and result.timing.median_ms > 0, (name, mode)
            else:
                assert untimed in result.message and result.timing is None, (name, mode, result.message)


def test_a_registered_tolerance_is_named_as_such():
    result = run_case(_register("tight", WRONG["one_percent_off"][0], tolerance=1e-3), SHAPE, "cpu", rep_ms=2)
    assert result.status == "wrong" and "above its registered tolerance 0.001" in result.message


def test_a_backward_that_loses_a_gradient_is_wrong():
    def detached_k(q, k, v, causal=False, sm_scale=None):
        return _sdpa(q, k.detach(), v, causal, sm_scale)

    result = run_case(_register("detached_k", detached_k), Shape(1, 2, 9, 9, 16, "fp32", mode="fwd+bwd"), "cpu",
                      rep_ms=5)
    assert result.status == "wrong" and result.message == "dk is None: the backward did not reach k"


def test_builtin_implementations_pass_the_gate_on_odd_shapes():
    for shape in (Shape(1, 2, 1, 1, 16, "fp32"), Shape(1, 2, 37, 100, 16, "fp32", causal=True),
                  Shape(1, 4, 5, 33, 16, "fp32", mode="fwd+bwd", kv_heads=2)):
        for name in ("naive", "sdpa_math", "sdpa_repeat_kv"):
            result = run_case(REGISTRY[name], shape, "cpu", rep_ms=2)
            assert result.status == "ok", (name, shape, result.message)
            assert result.max_rel_err < TOLERANCE["fp32"] / 100


def test_tolerances_are_four_units_of_roundoff():
    """Four units of roundoff of the format the matmuls read; fp8 (e4m3) one: the rounding of P is the only one
    left after its dequantized inputs (kernels.reference)."""
    assert TOLERANCE == {"fp16": 4 / 2048, "bf16": 4 / 256, "fp32": 4 / 2048, "fp8": 1 / 16}


def test_check_output_runs_before_any_broadcast():
    ref = torch.zeros(1, 2, 5, 8)
    with pytest.raises(WrongOutput, match=r"shape \(1, 2, 1, 8\)"):
        check_output("the output", torch.zeros(1, 2, 1, 8), ref, torch.float32)
    check_output("the output", torch.zeros(1, 2, 5, 8), ref, torch.float32)  # no error


def test_a_tolerance_must_be_positive_and_finite():
    for bad in (0, -1e-3, float("inf"), float("nan"), "1e-3"):
        with pytest.raises(ValueError, match="tolerance"):
            profiler.register(_sdpa, name="bad_tol", tolerance=bad)


def test_wrong_rows_have_times_but_no_point_on_the_roofline():
    roofs = Roofs.from_meta(json.loads(json.dumps({"datasheet_device": "H200", "measured_ceilings": {
        "matmul_tflops": {"fp16": 700.0}, "copy_gbps": 4000.0}})))
    shape = Shape(4, 32, 4096, 4096, 64, "fp16")
    timing = RowTiming(1.0, 0.9, 1.1)
    ok = capture_row("sdpa_flash", Costing("fused"), shape, "total", roofs, timing=timing, status="ok")
    wrong = capture_row("sdpa_flash", Costing("fused"), shape, "total", roofs, timing=timing, status="wrong",
                         message="m", max_rel_err=3.0)
    unsupported = capture_row("sdpa_flash", Costing("fused"), shape, "total", roofs, timing=None, status="unsupported")
    assert ok["bound"] == "compute" and ok["tflops"] == pytest.approx(4 * 4 * 32 * 4096**2 * 64 / 1e-3 / 1e12)
    assert wrong["time_ms"] == 1.0 and wrong["time_ms_p90"] == 1.1 and wrong["max_rel_err"] == 3.0
    for row in (wrong, unsupported):
        assert all(k not in row for k in ("tflops", "gbps", "bound", "roof_fraction", "roof_fraction_measured"))
    # remodel keeps a wrong row's times and gives it no rates either
    frame = to_frame([wrong | {"flops": 1.0}])
    new, changed = remodel(frame, roofs, {})
    assert changed.all() and new.time_ms.iloc[0] == 1.0 and math.isnan(new.tflops.iloc[0])
    assert new.status.iloc[0] == "wrong" and new.bound.isna().all()


def test_capture_records_wrong_and_the_summary_shows_the_error(tmp_path, capsys):
    spec = tmp_path / "noisy.py"
    spec.write_text("import torch\n\ndef noisy(q, k, v, causal=False, sm_scale=None):\n"
                    "    return torch.randn_like(q) * 100\n")
    out = tmp_path / "cap"
    code = main(["capture", "--device", "cpu", "--seq", "64", "--batch", "1", "--heads", "2", "--dim", "16",
                 "--rep-ms", "5", "--impl", f"sdpa_math,{spec}:noisy", "--out", str(out)])
    assert code == 0
    meta, frame = load_capture(out)
    assert meta["max_rel_err_tolerance"] == TOLERANCE  # the gate the rows passed, in the capture
    row = frame[frame.impl == "noisy"].iloc[0]
    assert row.status == "wrong" and row.time_ms > 0 and row.max_rel_err > 10
    assert math.isnan(row.tflops) and math.isnan(row.roof_fraction_measured) and pd.isna(row.bound)
    good = frame[frame.impl == "sdpa_math"].iloc[0]
    assert good.status == "ok" and good.tflops > 0
    printed = capsys.readouterr().out
    (line,) = [x for x in printed.splitlines() if x.startswith("│ noisy")]
    cells = [c.strip() for c in line.strip("│").split("│")]
    # the error cell, as the summary formats it (one decimal: 4.8e+02 for 484.9, so not within 1% of the value)
    assert cells[-1] == "wrong" and cells[-3] == f"{row.max_rel_err:.1e}"
    assert cells[1:6] == ["-"] * 5  # no time, rate, speedup or memory: it is no point of comparison
    assert "noisy: wrong: max relative error" in printed


def test_old_captures_read_no_bound_for_rows_that_did_not_run(tmp_path):
    """Files written before the rule stored the model's bound on rows that did not run: read, it is gone."""
    import shutil

    shutil.copytree("reports/reference-h200", tmp_path / "old", ignore=shutil.ignore_patterns("traces"))
    path = tmp_path / "old" / "results.parquet"
    raw = pd.read_parquet(path)
    raw.loc[raw.status != "ok", "bound"] = "compute"  # as the files of 2026-11-22 had it
    raw.to_parquet(path, index=False)
    _, frame = load_capture(tmp_path / "old")
    not_ok = frame[frame.status != "ok"]
    assert len(not_ok) > 0 and not_ok.bound.isna().all()
    assert (frame[frame.status == "ok"].bound == raw[raw.status == "ok"].bound).all()
