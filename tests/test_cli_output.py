"""What the command line prints: refused values, a stdout closed early, rows that are not ok, text
that rich would read as markup, bench on a CPU, progress in a log, and the dashboard hint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cli import EXIT_BROKEN_PIPE, main
from profiler.cli.console import streamlit_command

EXPORT = Path(__file__).parent / "data" / "nsys-h200-n2048" / "profile.sqlite.xz"


# The hint's Streamlit, as profiler.cli.console.streamlit_command gives it in the test's own environment.
STREAMLIT = streamlit_command()


def _env(**extra) -> dict:
    """A user's environment: no TRITON_INTERPRET (the Triton implementations are unsupported on a CPU)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(extra)
    return env


# ------------------------------------------------------------------------------ --rep-ms must be positive


@pytest.mark.parametrize("command", ["capture", "sweep", "bench"])
@pytest.mark.parametrize("value", ["0", "-5"])
def test_rep_ms_not_positive_is_refused(command, value, tmp_path, capsys):
    out = tmp_path / "capture"
    with pytest.raises(SystemExit) as exit_:
        main([command, "--device", "cpu", "--rep-ms", value, "--out", str(out)])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"python -m profiler {command}: error: argument --rep-ms: '{value}': must be a positive integer"]
    assert not out.exists()  # nothing measured, no meta.json


def test_rep_ms_refused_in_a_subprocess_without_traceback(tmp_path):
    out = subprocess.run([sys.executable, "-m", "profiler", "capture", "--rep-ms=-5", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, env=_env(), timeout=120)
    assert out.returncode == 2
    assert out.stderr == "python -m profiler capture: error: argument --rep-ms: '-5': must be a positive integer\n"


# ------------------------------------------------------------------------------- stdout closed early

PRINTING = [
    pytest.param(["model", "--json"], id="model-json"),
    pytest.param(["model"], id="model-table"),
    pytest.param(["model", "--list-devices"], id="model-devices"),
    pytest.param(["nsys", "summarize", str(EXPORT), "--json"], id="nsys-json"),
    pytest.param(["nsys", "summarize", str(EXPORT)], id="nsys-table"),
    pytest.param(["ceilings", "--json"], id="ceilings-json"),
    pytest.param(["ceilings"], id="ceilings-table"),
]


@pytest.mark.parametrize("args", PRINTING)
def test_stdout_closed_before_the_output_ends_is_quiet(args, tmp_path):
    """The reader goes away before the command writes (it is still importing torch), so the first
    write meets a closed pipe: the command stops with 141, as a tool killed by SIGPIPE, and says nothing."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.Popen([sys.executable, "-m", "profiler", *args], stdout=write_end, stderr=subprocess.PIPE,
                            text=True, env=_env(ATTN_ROOFLINE_CACHE=str(tmp_path)))
    os.close(write_end)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == EXIT_BROKEN_PIPE, err
    assert err == ""


@pytest.mark.parametrize("args", PRINTING[:1] + PRINTING[3:5])
def test_stdout_closed_after_the_first_line_is_quiet(args, tmp_path):
    """`python -m profiler ... | head -1`: the pipe closes after the first line. Whether the rest was
    still to be written depends on timing; either way nothing is said on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "profiler", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(ATTN_ROOFLINE_CACHE=str(tmp_path)))
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=300)
    assert first.strip()
    assert proc.returncode in (0, EXIT_BROKEN_PIPE)
    assert err == ""


# ------------------------------------------------------- one CPU capture, as a user runs it from a log

USER_IMPLS = '''
import torch


def noise(q, k, v, causal=False, sm_scale=None):
    return torch.randn_like(q) * 100


def needs_cuda(q, k, v, causal=False, sm_scale=None):
    raise RuntimeError("this build needs [cuda] and [bold]a GPU[/bold] :cd: see the docs for the whole hint at its end")
'''


@pytest.fixture(scope="module")
def cpu_capture(tmp_path_factory):
    """A tiny CPU capture into a folder whose path has spaces, through a pipe (not a terminal): naive
    and sdpa_math ok, triton_flash unsupported (no TRITON_INTERPRET), a user implementation that
    returns noise (wrong) and one whose error holds square brackets and an emoji code (error)."""
    root = tmp_path_factory.mktemp("cli output")
    (root / "user_impls.py").write_text(USER_IMPLS)
    folder = root / "my caps" / "cpu capture"
    impls = f"naive,triton_flash,sdpa_math,{root / 'user_impls.py'}:noise,{root / 'user_impls.py'}:needs_cuda"
    out = subprocess.run([sys.executable, "-m", "profiler", "capture", "--device", "cpu", "--seq", "64", "--batch", "1",
                          "--heads", "1", "--dim", "16", "--rep-ms", "5", "--impl", impls, "--out", str(folder)],
                         capture_output=True, text=True, env=_env(COLUMNS="100"), timeout=600)
    assert out.returncode == 0, out.stderr
    return folder, out.stdout


def _table_rows(text: str) -> dict[str, list[str]]:
    """impl -> cells of each body row of the rich tables in ``text``."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            if cells[0]:
                rows[cells[0]] = cells
    return rows


def test_summary_rows_not_ok_print_no_bound_rate_or_time(cpu_capture):
    _, stdout = cpu_capture
    rows = _table_rows(stdout)
    # impl, ms, TFLOP/s, GB/s, speedup vs naive, peak MiB, max rel err, bound, status
    for impl, status in (("triton_flash", "unsupported"), ("noise", "wrong"), ("needs_cuda", "error")):
        cells = rows[impl]
        assert cells[1:6] == ["-"] * 5 and cells[7] == "-" and cells[8] == status, cells
    assert rows["naive"][7] == "memory" and rows["naive"][8] == "ok" and float(rows["naive"][1]) > 0
    assert rows["naive"][4] == "1.0"  # speedup of naive over itself


def test_summary_shows_the_error_and_the_wrong_rows_message(cpu_capture):
    import pandas as pd

    folder, stdout = cpu_capture
    rows = _table_rows(stdout)
    results = pd.read_parquet(folder / "results.parquet").set_index(["impl", "step"])
    noise = results.loc[("noise", "total")]
    assert noise.status == "wrong" and noise.time_ms > 0  # kept for the record, not printed
    assert rows["noise"][6] == f"{noise.max_rel_err:.1e}" and noise.max_rel_err > 10
    assert rows["sdpa_math"][6] == f"{results.loc[('sdpa_math', 'total')].max_rel_err:.1e}"
    assert f"noise: wrong: {noise.message}" in " ".join(stdout.split())  # whole, below the table


def test_messages_keep_square_brackets_and_are_never_cut(cpu_capture):
    _, stdout = cpu_capture
    flat = " ".join(stdout.split())  # a message longer than the console wraps; none is cut
    assert ("needs_cuda: error: RuntimeError: this build needs [cuda] and [bold]a GPU[/bold] :cd: see the docs "
            "for the whole hint at its end") in flat
    assert ("triton_flash: unsupported: triton_flash is a Triton kernel: it needs a CUDA device "
            "(or TRITON_INTERPRET=1)") in flat
    assert "…" not in stdout


def test_progress_in_a_pipe_is_one_line_per_finished_case(cpu_capture):
    _, stdout = cpu_capture
    lines = [line for line in stdout.splitlines() if line.startswith("[")]
    assert len(lines) == 5
    assert lines[0].startswith("[1/5] naive fwd B1 H1 N=64 D16 fp32: ok ") and lines[0].endswith(" ms")
    assert lines[1] == ("[2/5] triton_flash fwd B1 H1 N=64 D16 fp32: unsupported: triton_flash is a Triton kernel: "
                        "it needs a CUDA device (or TRITON_INTERPRET=1)")
    assert lines[3].startswith("[4/5] noise fwd B1 H1 N=64 D16 fp32: wrong: ")


def test_capture_hint_names_the_capture(cpu_capture):
    folder, stdout = cpu_capture
    # a capture outside the checkout's reports/ opens alone: the dashboard does not scan the folder around it
    assert f"Explore it: {STREAMLIT} run dashboards/roofline.py -- --reports '{folder}'" in stdout.splitlines()


def test_sweep_progress_lines_arrive_while_it_runs_and_the_hint_names_it(tmp_path):
    """Flushed as each case finishes: the first line is read while the sweep still has cases to measure."""
    folder = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "profiler", "sweep", "--device", "cpu", "--seq", "64,128",
                             "--batch", "1", "--heads", "1", "--dim", "16", "--rep-ms", "20",
                             "--impl", "naive,sdpa_math,sdpa_flash", "--out", str(folder)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    first = proc.stdout.readline()
    while first and not first.startswith("["):
        first = proc.stdout.readline()
    running = proc.poll() is None
    rest, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert first.startswith("[1/6] naive fwd B1 H1 N=64 D16 fp32: ok ")
    assert running, "the first progress line came only when the sweep had ended"
    assert [line[:6] for line in rest.splitlines() if line.startswith("[")] == [f"[{i}/6] " for i in range(2, 7)]
    assert f"Explore it: {STREAMLIT} run dashboards/roofline.py -- --reports {folder}" in rest.splitlines()


# ---------------------------------------------------------------------------------------------- bench


def _bench_frame(rows: list[dict]):
    from profiler.store import to_frame

    base = {"step": "total", "mode": "fwd", "dtype": "fp16", "head_dim": 64, "causal": False, "batch": 4,
            "heads": 32, "kv_heads": 32, "seq_q": 4096, "seq_kv": 4096, "max_rel_err": 1e-4, "message": "",
            "bound": "compute"}
    return to_frame([{**base, **r} for r in rows])


def test_bench_ratios_leave_out_wrong_peers_and_baselines():
    """bench_table takes rates from rows with status ok only: a wrong row gives no rate and no ratio,
    even one that carries a rate (as rows from before the correctness gate may)."""
    import pandas as pd

    from profiler.views.tables import bench_table

    frame = _bench_frame([
        {"impl": "triton_flash", "tflops": 400.0, "gbps": 100.0, "status": "ok"},
        {"impl": "sdpa_flash", "tflops": 500.0, "gbps": 120.0, "status": "ok"},
        {"impl": "sdpa_cudnn", "time_ms": 0.01, "tflops": 999.0, "max_rel_err": 686.0, "status": "wrong"},
        {"impl": "triton_flash", "seq_q": 8192, "seq_kv": 8192, "time_ms": 0.01, "tflops": 999.0, "status": "wrong"},
        {"impl": "sdpa_flash", "seq_q": 8192, "seq_kv": 8192, "tflops": 450.0, "status": "ok"},
        {"impl": "sdpa_cudnn", "seq_q": 8192, "seq_kv": 8192, "tflops": 460.0, "status": "ok"},
    ])
    table = bench_table(frame, ["triton_flash", "sdpa_flash", "sdpa_cudnn"], "triton_flash")
    first, second = table.to_dict("records")
    assert first["triton_flash/sdpa_flash"] == pytest.approx(0.8)
    assert pd.isna(first["sdpa_cudnn_tflops"]) and first["sdpa_cudnn_status"] == "wrong"
    assert pd.isna(first["triton_flash/sdpa_cudnn"])  # a wrong peer has no ratio
    assert first["sdpa_cudnn_max_rel_err"] == 686.0
    assert pd.isna(second["triton_flash_tflops"])  # a wrong baseline: no ratio at all
    assert pd.isna(second["triton_flash/sdpa_flash"]) and pd.isna(second["triton_flash/sdpa_cudnn"])
    assert table["triton_flash/sdpa_cudnn"].dropna().empty  # nothing for a lowest/highest line


def test_bench_bound_of_a_shape_whose_baseline_did_not_run_comes_from_its_peers():
    """A decode bench prints GB/s when every shape is memory-bound: a baseline that ran out of memory
    (no bound) must not turn the table to TFLOP/s."""
    from profiler.views.tables import bench_table

    decode = {"seq_q": 1, "seq_kv": 32768, "bound": "memory"}
    frame = _bench_frame([
        {"impl": "triton_flash", **decode, "tflops": 1.0, "gbps": 3000.0, "status": "ok"},
        {"impl": "sdpa_cudnn", **decode, "tflops": 1.0, "gbps": 2900.0, "status": "ok"},
        {"impl": "triton_flash", **decode, "seq_kv": 131072, "bound": None, "status": "oom"},
        {"impl": "sdpa_cudnn", **decode, "seq_kv": 131072, "tflops": 1.0, "gbps": 2950.0, "status": "ok"},
    ])
    table = bench_table(frame, ["triton_flash", "sdpa_cudnn"], "triton_flash")
    assert list(table.bound) == ["memory", "memory"]


def _print_bench_at(width: int, table, impls, baseline) -> str:
    import io

    from profiler.cli import bench
    from profiler.cli import console as console_module

    recording = type(console_module.console)(width=width, file=io.StringIO(), markup=False, emoji=False)
    original = bench.console
    bench.console = recording
    try:
        bench._print_bench(table, impls, baseline, "test device: median do_bench")
    finally:
        bench.console = original
    return recording.file.getvalue()


def _header_lines(text: str) -> list[str]:
    """The header cells of every table in ``text``: lines between a table's top border and the rule
    under its header."""
    cells, inside = [], False
    for line in text.splitlines():
        if line.startswith("┏"):
            inside = True
        elif line.startswith("┡"):
            inside = False
        elif inside:
            cells += [c.strip() for c in line.strip("┃").split("┃")]
    return cells


GPU_DEFAULT = (["triton_flash", "sdpa_flash", "sdpa_cudnn"], "triton_flash")
DECODE_README = (["triton_flash", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_repeat_kv"], "triton_flash")
CPU_DEFAULT = (["sdpa_flash", "naive", "sdpa_math"], "sdpa_flash")


@pytest.mark.parametrize("impls,baseline,grid", [
    (*GPU_DEFAULT, "one shape"), (*GPU_DEFAULT, "everything varies"), (*DECODE_README, "decode"),
    (*CPU_DEFAULT, "one shape"),
])
def test_bench_headers_are_whole_at_100_columns(impls, baseline, grid):
    """Every ratio column's header (baseline/ over the peer) and every implementation's name is
    printed whole at 100 columns, and no cell is cut; a wrong peer's rate and ratio print '-'."""
    import itertools

    from profiler.views.tables import bench_table

    if grid == "one shape":
        shapes = [{}]
    elif grid == "everything varies":
        shapes = [{"mode": m, "dtype": dt, "head_dim": d, "causal": c, "seq_q": n, "seq_kv": n, "batch": b}
                  for m, dt, d, c, n, b in itertools.product(("fwd", "fwd+bwd"), ("fp16", "bf16"), (64, 128),
                                                             (False, True), (2048, 16384), (1, 16))]
    else:  # the README's decode benchmark: llama3-8b heads, Nq 1 and 4, Nkv up to 131072, B 1 to 64
        shapes = [{"dtype": "bf16", "head_dim": 128, "kv_heads": 8, "seq_q": nq, "seq_kv": nk, "batch": b,
                   "bound": "memory"}
                  for nq, nk, b in itertools.product((1, 4), (4096, 32768, 131072), (1, 8, 64))]
    rows = []
    for shape in shapes:
        for i, name in enumerate(impls):
            wrong = name == impls[-1]
            rows.append({**shape, "impl": name, "status": "wrong" if wrong else "ok",
                         "tflops": None if wrong else 100.0 + 10 * i, "gbps": None if wrong else 3000.0 + i,
                         "time_ms": 0.123})
    table = bench_table(_bench_frame(rows), impls, baseline, copy_gbps=3300.0)
    text = _print_bench_at(100, table, impls, baseline)
    headers = _header_lines(text)
    for peer in impls:
        assert peer in headers, (peer, headers)  # its rate column
        if peer != baseline:
            assert f"{baseline}/" in headers  # its ratio column: the baseline over...
            assert headers.count(peer) == 2  # ... the peer, whole, in the rate and in the ratio header
    assert "…" not in text
    body = _table_rows(text)
    assert body and all(len(line) <= 100 for line in text.splitlines())
    rates = [cells for cells in body.values()]
    assert all(cells[-1] == "-" for cells in rates), rates  # the wrong peer: no rate, no ratio
    assert f"{baseline}/{impls[-1]}: lowest" not in text  # no lowest/highest line from wrong rows alone


def test_bench_defaults_on_a_cpu_and_unchanged_on_a_gpu():
    from profiler.cli import bench, build_parser
    from profiler.cli.shapes import shape_grid

    def resolve(argv: list[str], on_gpu: bool):
        args = build_parser().parse_args(["bench", "--device", "cpu", *argv])
        grid = shape_grid(args, bench.SHAPES, on_gpu, tokens=args.tokens)
        notes = list(grid.shrunk)
        impls, baseline = bench.impls_and_baseline(args, on_gpu, notes)
        return grid, impls, baseline, notes

    grid, impls, baseline, notes = resolve([], on_gpu=False)
    assert (grid.seqs_q, grid.batches, grid.heads, grid.dims, grid.dtypes) == ([1024], [1], [2], [64], ["fp32"])
    assert grid.seqs_kv is None and grid.causals == [False] and grid.modes == ["fwd"]
    assert impls == ["sdpa_flash", "naive", "sdpa_math"] and baseline == "sdpa_flash"
    assert notes == ["seq=1024 (GPU default 8192)", "batch=1 (GPU default 4)", "heads=2 (GPU default 32)",
                     "dtype=fp32 (GPU default fp16)",
                     "impl=sdpa_flash,naive,sdpa_math (GPU default triton_flash,sdpa_flash,sdpa_cudnn)",
                     "baseline=sdpa_flash (GPU default triton_flash)"]
    grid, impls, baseline, notes = resolve([], on_gpu=True)
    assert notes == []
    assert (grid.seqs_q, grid.batches, grid.heads, grid.dims, grid.dtypes) == ([8192], [4], [32], [64], ["fp16"])
    assert impls == ["triton_flash", "sdpa_flash", "sdpa_cudnn"] and baseline == "triton_flash"
    # values given are kept; with --tokens the batch follows from it; a list without the default baseline
    # takes its first implementation as the baseline
    grid, impls, baseline, notes = resolve(["--seq", "64", "--tokens", "256", "--dtype", "bf16", "--impl",
                                            "naive,sdpa_math"], on_gpu=False)
    assert notes == ["heads=2 (GPU default 32)"]
    assert grid.batches is None and grid.dtypes == ["bf16"] and baseline == "naive"
    assert [s.batch for s in grid.shapes()] == [4]  # 256 // 64


def test_bench_on_a_cpu_runs_its_defaults_and_says_what_shrank(tmp_path):
    import json

    folder = tmp_path / "bench"
    out = subprocess.run([sys.executable, "-m", "profiler", "bench", "--device", "cpu", "--seq", "128", "--rep-ms", "5",
                          "--out", str(folder)], capture_output=True, text=True, env=_env(COLUMNS="100"), timeout=600)
    assert out.returncode == 0, out.stderr
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["impls"] == ["sdpa_flash", "naive", "sdpa_math"] and meta["baseline"] == "sdpa_flash"
    assert meta["defaults_shrunk"] == [
        "batch=1 (GPU default 4)", "heads=2 (GPU default 32)", "dtype=fp32 (GPU default fp16)",
        "impl=sdpa_flash,naive,sdpa_math (GPU default triton_flash,sdpa_flash,sdpa_cudnn)",
        "baseline=sdpa_flash (GPU default triton_flash)"]
    flat = " ".join(out.stdout.split())
    assert "No GPU: defaults shrunk to fit this machine: batch=1 (GPU default 4), heads=2" in flat
    # The rates table, then the ratio table: one row each (N=128); read apart, not merged by first cell.
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in out.stdout.splitlines()
            if line.startswith("│") and line.strip("│ ").startswith("128")]
    assert len(rows) == 2, rows
    rates, ratios = rows
    # TFLOP/s, or where this machine's measured ceilings make N=128 memory-bound, GB/s with the fraction
    # of copy after it ("1 (0.77)"): the first number either way.
    assert len(rates) == 4 and all(float(c.split()[0].replace(",", "")) > 0 for c in rates[1:]), rates  # every impl ran
    assert len(ratios) == 3 and all(float(c) > 0 for c in ratios[1:]), ratios  # ... and every ratio
    assert "sdpa_flash/naive: lowest" in out.stdout and "sdpa_flash/sdpa_math: lowest" in out.stdout
    assert [line for line in out.stdout.splitlines() if line.startswith("[")][0].startswith(
        "[1/3] sdpa_flash fwd B1 H2 N=128 D64 fp32: ok ")
    assert f"Explore it: {STREAMLIT} run dashboards/roofline.py -- --reports {tmp_path / 'bench'}" in flat


# --------------------------------------------------------------------------------------- report --family


def test_report_family_is_repeatable():
    from profiler.cli import build_parser

    args = build_parser().parse_args(["report", "cap", "--family", "D64 fp16 causal", "--family", "bwd"])
    assert args.family == ["D64 fp16 causal", "bwd"]
    assert build_parser().parse_args(["report", "cap"]).family is None


def test_report_family_matching_nothing_is_a_usage_error(cpu_capture, tmp_path, capsys):
    folder, _ = cpu_capture
    code = main(["report", str(folder), "--out", str(tmp_path / "r.html"), "--family", "fp16 D999"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m profiler report: error: ")
    assert "fp16 D999" in lines[0] and "B1 H1 D16 fp32" in lines[0]  # the selection and what there is
    assert not (tmp_path / "r.html").exists()


def test_a_case_the_triton_interpreter_ran_says_so_in_its_progress_line():
    from profiler.cli.console import case_line

    row = {"status": "interpreted", "time_ms": 56.2, "message": "the Triton interpreter ran it ..."}
    assert case_line(3, 8, "triton_flash fwd B1 H2 N=48 D64 fp32", row) == \
        "[3/8] triton_flash fwd B1 H2 N=48 D64 fp32: interpreted: 56.2 ms in the Triton interpreter, not a kernel time"


@pytest.mark.parametrize("inside,where", [(True, "--reports reports --select run1"), (False, None)])
def test_the_dashboard_hint_opens_a_capture_beside_the_others_only_in_the_default_folder(
        tmp_path, monkeypatch, capsys, inside, where):
    """Issue 41 defect 4: `--out /tmp/cap1` made the hint scan all of /tmp, and outside a checkout there was no
    hint. A capture in the folder the dashboard opens by default is preselected there; one elsewhere opens
    alone; outside a checkout the hint is the CLI's own dashboard command."""
    from profiler.cli.console import dashboard_hint

    monkeypatch.chdir(tmp_path)  # no dashboards/roofline.py here: as installed from the wheel
    monkeypatch.setenv("ATTN_REPORTS", "reports")
    monkeypatch.setattr(sys, "argv", ["attention-roofline", "capture"])
    folder = Path("reports/run1") if inside else tmp_path / "elsewhere" / "cap1"
    dashboard_hint(folder)
    out = capsys.readouterr().out.strip()
    assert out == f"Explore it: attention-roofline dashboard {where or f'--reports {folder}'}"


def test_the_hint_starts_streamlit_from_this_interpreter_where_its_venv_is_not_active(tmp_path, monkeypatch):
    """Last session's defect: after `make demo` in a shell without the venv activated, `streamlit` was not found.
    The hint says `streamlit` only where the one on PATH belongs to this interpreter."""
    import shutil

    here = Path(sys.executable).resolve().parent
    monkeypatch.setattr(shutil, "which", lambda name: str(here / name))
    assert streamlit_command() == "streamlit"
    monkeypatch.setattr(shutil, "which", lambda name: None)  # not on PATH at all
    assert streamlit_command().endswith(" -m streamlit")
    monkeypatch.setattr(shutil, "which", lambda name: str(tmp_path / "other-venv" / "bin" / name))
    assert streamlit_command().endswith(" -m streamlit")  # another environment's streamlit lacks our packages
