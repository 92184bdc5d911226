"""``bench --rounds``: implementations timed in turns at each shape, each row the median round, and ``--warmup-ms``."""

from __future__ import annotations

import json

import pytest

from attention_core.shape import Shape
from profiler.cli import main
from profiler.measure import cases as cases_module
from profiler.measure import runner
from profiler.measure.runner import CaseResult, median_round
from profiler.model.roofs import Roofs
from profiler.model.rows import Timing
from profiler.registry import get_impl
from profiler.store import ResultStore, read_results

ROOFS = Roofs(None, None)
SHAPE = Shape(batch=1, heads=2, seq_q=32, seq_kv=32, head_dim=16, dtype="fp32", causal=False, mode="fwd")


def result(ms: float, status: str = "ok", clock: float | None = None) -> CaseResult:
    return CaseResult("x", SHAPE, status, timing=Timing(ms, ms * 0.9, ms * 1.1, clock, None), flops=1e9,
                      max_rel_err=1e-6, path="tiled")


def test_the_median_round_keeps_its_own_percentiles_and_clock_and_says_how_far_the_rounds_spread():
    rounds = [result(2.0, clock=1980), result(3.0, clock=1700), result(2.5, clock=1800)]
    rounds[1].max_rel_err = None  # only the first round is checked
    kept = median_round(rounds)
    assert kept.timing == Timing(2.5, 2.25, 2.75, 1800, None, rounds=3, round_spread=pytest.approx(0.5))
    assert kept.max_rel_err == 1e-6 and kept.path == "tiled"  # the checked first round's
    assert median_round([rounds[0]]) is rounds[0]  # one round: the row as before, no rounds column


def test_a_round_that_failed_stands_for_the_case():
    oom = result(0.0, "oom")
    oom.timing = None
    assert median_round([result(2.0), result(2.1), oom]) is oom


@pytest.fixture
def recorded(monkeypatch):
    """run_case replaced by one that records (impl, check, warmup_ms) and times each call by a table of its own."""
    calls = []
    times = {"naive": [3.0, 1.0, 2.0], "sdpa_math": [5.0, 4.0, 6.0], "sdpa_flash": [1.0, 1.0, 1.0]}
    failing = {}

    def fake(impl, shape, device, *, check, rep_ms, warmup_ms, annotate, graph, layout):
        calls.append((impl.name, check, warmup_ms))
        turn = sum(name == impl.name for name, *_ in calls) - 1
        status = failing.get((impl.name, turn), "ok")
        timing = None if status == "oom" else Timing(times[impl.name][turn], 0.0, 9.0)
        return CaseResult(impl.name, shape, status, timing=timing, flops=1e9, max_rel_err=1e-7 if check else None)

    monkeypatch.setattr(cases_module, "run_case", fake)
    monkeypatch.setattr(cases_module, "time_naive_steps", lambda *a, **k: [])
    return calls, failing


def test_rounds_rotate_the_order_check_once_and_store_the_median_round(recorded, tmp_path):
    calls, _ = recorded
    impls = [get_impl(n) for n in ("naive", "sdpa_math", "sdpa_flash")]
    store = ResultStore(tmp_path / "c", {})
    seen = []
    rows = cases_module.measure_cases(store, cases_module.cases_of([SHAPE], impls), "cpu", ROOFS,
                                      rep_ms=5, rounds=3, warmup_ms=700, progress=lambda d, **k: seen.append(d))
    assert [name for name, *_ in calls] == ["naive", "sdpa_math", "sdpa_flash",  # each goes first once
                                            "sdpa_math", "sdpa_flash", "naive",
                                            "sdpa_flash", "naive", "sdpa_math"]
    assert [check for _, check, _ in calls] == [True] * 3 + [False] * 6 and {w for *_, w in calls} == {700}
    assert seen[0] == f"naive fwd {SHAPE.label}, round 1 of 3" and len(seen) == 9
    totals = {r["impl"]: r for r in rows if r["step"] == "total"}
    assert totals["naive"]["time_ms"] == 2.0 and totals["naive"]["round_spread"] == pytest.approx(2.0)
    assert totals["sdpa_math"]["time_ms"] == 5.0 and totals["sdpa_math"]["round_spread"] == pytest.approx(0.5)
    assert totals["sdpa_flash"]["round_spread"] == 0.0 and {r["rounds"] for r in totals.values()} == {3}
    assert {r["max_rel_err"] for r in totals.values()} == {1e-7}  # the checked round's error
    stored = read_results(store.folder / "results.parquet")
    assert sorted(stored.rounds) == [3.0] * 3


def test_a_case_that_failed_its_check_or_a_round_is_not_timed_again(recorded, tmp_path):
    calls, failing = recorded
    failing[("naive", 0)] = "wrong"
    failing[("sdpa_math", 1)] = "oom"
    impls = [get_impl(n) for n in ("naive", "sdpa_math", "sdpa_flash")]
    seen = []
    rows = cases_module.measure_cases(ResultStore(tmp_path / "c", {}), cases_module.cases_of([SHAPE], impls), "cpu",
                                      ROOFS, rep_ms=5, rounds=3, progress=lambda d, **k: seen.append(d))
    assert [name for name, *_ in calls].count("naive") == 1 and [name for name, *_ in calls].count("sdpa_math") == 2
    assert len(seen) == 9  # the progress bar still counts every case's every round
    assert "naive fwd" in seen[5] and seen[5].endswith("wrong, not timed again")
    totals = {r["impl"]: r for r in rows}
    assert totals["naive"]["status"] == "wrong" and totals["naive"]["rounds"] is None
    assert totals["sdpa_math"]["status"] == "oom" and "time_ms" not in totals["sdpa_math"]
    assert totals["sdpa_flash"]["status"] == "ok" and totals["sdpa_flash"]["rounds"] == 3


def test_run_case_hands_the_warm_up_to_the_timing(monkeypatch):
    seen = {}

    def fake_measure(fn, device, *, rep_ms, warmup_ms, graph, grad_to_none):
        seen.update(rep_ms=rep_ms, warmup_ms=warmup_ms)
        return Timing(1.0, 1.0, 1.0)

    monkeypatch.setattr(runner, "measure", fake_measure)
    out = runner.run_case(get_impl("sdpa_math"), SHAPE, "cpu", rep_ms=7, warmup_ms=1500)
    assert out.status == "ok" and seen == {"rep_ms": 7, "warmup_ms": 1500}


def test_bench_rounds_on_a_cpu_stores_and_prints_each_implementations_spread(tmp_path, capsys):
    folder = tmp_path / "b"
    code = main(["bench", "--seq", "32,64", "--tokens", "128", "--heads", "2", "--dim", "16", "--dtype", "fp32",
                 "--impl", "sdpa_flash,sdpa_math", "--rep-ms", "5", "--rounds", "3", "--warmup-ms", "50",
                 "--device", "cpu", "--out", str(folder)])
    out = capsys.readouterr().out
    assert code == 0
    rows = read_results(folder / "results.parquet")
    assert (rows.rounds == 3).all() and (rows.round_spread >= 0).all() and (rows.status == "ok").all()
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["rounds"] == 3 and meta["warmup_ms"] == 50
    assert "median torch.utils.benchmark, the median of 3 interleaved rounds" in out
    for impl in ("sdpa_flash", "sdpa_math"):
        widest = rows[rows.impl == impl].round_spread.max()
        assert f"{impl}: its 3 rounds differ by up to {widest:.1%}" in out


@pytest.mark.parametrize("value, message", [
    ("2", "argument --rounds: '2': must be an odd positive integer"),
    ("0", "argument --rounds: '0': must be a positive integer"),
])
def test_bench_rounds_must_be_odd_and_positive(value, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--rounds", value, "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and message in err[-1]


def test_capture_takes_rounds_too(tmp_path, capsys):
    folder = tmp_path / "c"
    assert main(["capture", "--seq", "32", "--heads", "2", "--dim", "16", "--dtype", "fp32", "--impl",
                 "sdpa_flash,naive", "--rep-ms", "5", "--rounds", "3", "--device", "cpu", "--out", str(folder)]) == 0
    rows = read_results(folder / "results.parquet")
    totals = rows[rows.step == "total"]
    assert (totals.rounds == 3).all() and rows[rows.step != "total"].rounds.isna().all()  # naive's steps: timed once
    assert json.loads((folder / "meta.json").read_text())["rounds"] == 3
    out = capsys.readouterr().out
    assert "Each row is the median of 3 interleaved rounds." in out
    for impl in ("sdpa_flash", "naive"):
        assert f"{impl}: its 3 rounds differ by up to {totals[totals.impl == impl].round_spread.max():.1%}" in out


def test_one_round_writes_each_case_before_the_next_runs(monkeypatch, tmp_path):
    """Without --rounds a case's rows are in the store before the next case starts, as before rounds existed: an
    interrupted capture keeps every finished case."""
    store = ResultStore(tmp_path / "c", {})
    stored_before = []

    def fake(impl, shape, device, *, check, **how):
        stored_before.append(len(store.rows))
        return CaseResult(impl.name, shape, "ok", timing=Timing(1.0, 1.0, 1.0), flops=1e9)

    monkeypatch.setattr(cases_module, "run_case", fake)
    impls = [get_impl(n) for n in ("sdpa_math", "sdpa_flash")]
    cases_module.measure_cases(store, cases_module.cases_of([SHAPE], impls), "cpu", ROOFS, rep_ms=5)
    assert stored_before == [0, 1]


def test_bench_rounds_where_no_case_ran_ends_without_a_spread(tmp_path, capsys):
    """No row timed in rounds (every implementation unsupported or interpreted here): the table and one line a case,
    no spread line, exit 0."""
    code = main(["bench", "--seq", "32", "--tokens", "32", "--heads", "2", "--dim", "16", "--dtype", "fp32",
                 "--impl", "sdpa_cudnn,sdpa_efficient", "--rounds", "3", "--device", "cpu",
                 "--out", str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert code == 0 and "rounds differ" not in out and "sdpa_cudnn fwd" in out


def test_a_long_warm_up_runs_before_nvml_reads(monkeypatch):
    """--warmup-ms beyond do_bench's own 25 ms runs the call back to back before the sampler starts, so the row's
    clock and power are read over the timed repetitions (and do_bench's 25 ms); a CUDA device without a GPU here,
    its synchronize, L2 flush, sampler and do_bench stood in for."""
    import contextlib
    import time

    import triton.testing

    from profiler.measure import timing

    events = []

    class Sampler:
        def __init__(self, device):
            self.sm_clock_mhz, self.power_w = 1500.0, 690.0

        def __enter__(self):
            events.append("sampler on")
            return self

        def __exit__(self, *exc):
            events.append("sampler off")

    def do_bench(fn, warmup, rep, grad_to_none, quantiles):
        events.append(("do_bench", warmup, rep))
        return 1.0, 0.9, 1.1

    monkeypatch.setattr(timing, "GpuSampler", Sampler)
    monkeypatch.setattr(timing, "clean_l2_flush", contextlib.nullcontext)
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    clock = [100.0]  # seconds; each call takes 1 ms of it
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])

    def call():
        events.append("call")
        clock[0] += 1e-3

    out = timing.measure(call, "cuda", warmup_ms=60, rep_ms=100)
    first_on = events.index("sampler on")
    assert set(events[:first_on]) == {"call"}
    assert 35 <= first_on < 35 + 8  # 60 - 25 ms of 1 ms calls before the readings, in batches of 8
    assert events[first_on + 1:] == [("do_bench", 25, 100), "sampler off"]
    assert (out.sm_clock_mhz, out.power_w) == (1500.0, 690.0)
    events.clear()
    timing.measure(lambda: events.append("call"), "cuda", warmup_ms=25, rep_ms=100)
    assert events == ["sampler on", ("do_bench", 25, 100), "sampler off"]  # the default: do_bench's warm-up alone
