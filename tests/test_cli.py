"""The command line: subcommands, JSON output, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from profiler.cli import main
from profiler.model import hardware
from profiler.registry import BUILTIN


def run_cli(*args, env=None):
    """Run `python -m profiler` in a subprocess, as a user would (no TRITON_INTERPRET)."""
    full_env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "profiler", *args], capture_output=True, text=True,
                          env=full_env, timeout=600)


def test_help_lists_subcommands():
    out = run_cli("--help")
    assert out.returncode == 0
    for sub in ("demo", "bench", "model", "ceilings", "dashboard"):  # each name with its help on its line
        assert f"    {sub} " in out.stdout
    nsys = run_cli("nsys", "--help")
    assert "    summarize   per-range projected GPU time" in nsys.stdout


def test_help_and_bad_arguments_import_neither_torch_nor_pandas():
    """Each command imports the heavy layers inside its run: the parser is built, and a bad value
    refused, without torch or pandas."""
    code = ("import sys\n"
            "from profiler.cli import main\n"
            "try:\n"
            "    main(['bench', '--seq', 'x'])\n"
            "except SystemExit as stop:\n"
            "    print(stop.code, 'torch' in sys.modules, 'pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["2", "False", "False"], out.stderr


def test_every_command_module_is_one_subcommand():
    from profiler.cli import COMMANDS, build_parser

    names = [command.__name__.rsplit(".", 1)[-1] for command in COMMANDS]
    assert names == ["demo", "bench", "capture", "sweep", "observe", "nsys", "report", "validate", "stalls", "remodel",
                     "model", "ceilings", "medians", "dashboard"]
    for command in COMMANDS:
        assert command.__doc__ and command.HELP and callable(command.add_arguments) and callable(command.run)
    parsed = build_parser().parse_args(["remodel", "cap", "--dry-run"])
    assert parsed.run is COMMANDS[names.index("remodel")].run and parsed.dry_run


def test_model_json_has_every_step(capsys):
    assert main(["model", "--seq", "8192", "--device-name", "H200", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"impl", "step", "flops", "hbm_bytes", "arithmetic_intensity", "bound"} <= set(rows[0])
    steps = [r["step"] for r in rows if r["impl"] == "naive"]
    assert steps == ["total", "qk_matmul", "scale_mask", "softmax", "pv_matmul"]
    by = {(r["impl"], r["step"]): r for r in rows}
    assert by[("naive", "softmax")]["arithmetic_intensity"] == 1.25
    assert by[("naive", "softmax")]["bound"] == "memory"
    assert by[("triton_flash", "total")]["bound"] == "compute"
    assert by[("triton_flash", "total")]["flops"] == 4 * 4 * 32 * 8192**2 * 64
    # a fused kernel's whole step has the exp roof: 4·D FLOPs per exp2 against the datasheet's fp16 matmul
    h200 = hardware.lookup("H200")
    per_exp = 4 * 64
    expected = per_exp / (per_exp / h200.peak_flops("fp16") + 1 / h200.exp2_per_s) / 1e12
    assert by[("triton_flash", "total")]["exp_roof_tflops"] == pytest.approx(expected)
    assert by[("naive", "total")]["exp_roof_tflops"] is None and by[("naive", "softmax")]["exp_roof_tflops"] is None


def test_model_costs_the_kernel_path_a_capture_names(capsys):
    """``--path``: our kernel's bytes on the path a capture's row names (the Gluon forward that cut its last wave: its
    chunks' partials and Q re-reads too, kernels.tail_combine.partials), as remodel and the dashboard cost that row;
    a peer with one path is costed the same either way."""
    from kernels import tail_combine

    shape = ["--seq", "8192", "--batch", "4", "--heads", "16", "--dim", "128", "--dtype", "bf16"]
    tiles = {}
    for path in ("gluon-ws", "gluon-ws split-tail 4x32"):
        assert main(["model", *shape, "--impl", "triton_flash,sdpa_cudnn", "--path", path, "--json"]) == 0
        tiles[path] = {r["impl"]: r["tile_bytes"] for r in json.loads(capsys.readouterr().out)}
    o_part, lse_part = tail_combine.partials(4, 128, 32, 128, "cpu")
    extra = 2 * (o_part.nbytes + lse_part.nbytes) + 31 * 4 * 128 * 128 * 2  # written and read; each chunk reads Q
    assert tiles["gluon-ws split-tail 4x32"]["triton_flash"] - tiles["gluon-ws"]["triton_flash"] == extra
    assert tiles["gluon-ws split-tail 4x32"]["sdpa_cudnn"] == tiles["gluon-ws"]["sdpa_cudnn"]
    assert main(["model", *shape, "--impl", "triton_flash", "--path", "gluon-ws split-tail 4x32"]) == 0
    assert "full fwd (gluon-ws split-tail 4x32) on H100-SXM" in capsys.readouterr().out


def test_model_path_auto_costs_the_path_our_kernels_take_on_the_named_gpu(capsys, monkeypatch):
    """``--path auto``: the path our kernels take for the shape on --device-name (its compute capability and SM
    count: kernels.flash_fwd.planned_forward_path), costed as that path named: the H100's Gluon forward cutting its
    last wave at N 8192, whole at 4096, the split-KV decode, the portable kernels on an A100; with both passes, both
    paths. Without --path the table says which path an sm_90 GPU takes; a GPU without a compute capability in the
    datasheet table cannot be planned for: one line, exit 2."""
    from profiler.cli.console import console

    monkeypatch.setattr(console, "width", 250)
    shape = ["--batch", "4", "--heads", "16", "--dim", "128", "--dtype", "bf16", "--impl", "triton_flash"]
    cases = [(["--seq", "8192"], "H100-SXM", "gluon-ws split-tail 4x32"), (["--seq", "4096"], "H200", "gluon-ws"),
             (["--seq", "8192"], "A100-SXM4-80GB", "tiled"),
             (["--seq-q", "1", "--seq-kv", "32768", "--batch", "1"], "H100-SXM", "split-kv x32"),
             (["--seq", "8192", "--mode", "fwd+bwd"], "H100-SXM", "gluon-ws split-tail 4x32 fwd, gluon-ws bwd")]
    for extra, device, path in cases:
        args = ["model", *shape, *extra, "--device-name", device]
        assert main([*args, "--path", "auto", "--json"]) == 0
        auto = json.loads(capsys.readouterr().out)
        assert main([*args, "--path", path, "--json"]) == 0
        assert auto == json.loads(capsys.readouterr().out), (device, path)
        assert main([*args, "--path", "auto"]) == 0
        assert f"({path}) on {device}" in capsys.readouterr().out
    assert main(["model", *shape, "--seq", "8192"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("Our kernels' rows are costed on the portable path; on H100-SXM they take 'gluon-ws split-tail 4x32' "
            "here: --path auto costs that.") in out
    assert main(["model", *shape, "--seq", "8192", "--device-name", "A100-SXM4-80GB"]) == 0
    assert "--path auto" not in capsys.readouterr().out  # the portable path is the one an A100 takes
    # a decode's split plan is what the table costs already, on any GPU: no note
    assert main(["model", *shape, "--seq-q", "1", "--seq-kv", "32768", "--batch", "1"]) == 0
    assert "--path auto" not in capsys.readouterr().out
    unknown = hardware.Device("a GPU", "", {"bf16": 100.0}, None, 1.0, None, None, 100)
    monkeypatch.setattr(hardware, "lookup", lambda name: unknown)
    assert main(["model", *shape, "--seq", "8192", "--path", "auto"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--path auto needs a GPU's compute capability" in err[0]


def test_one_shape_commands_take_causal_as_a_flag_or_true_false(capsys):
    """``model`` and ``capture`` cost or measure one shape: --causal is a bare flag there, and takes true or false as
    the list-taking commands do (a user's `model --causal true` was refused): causal FLOPs are half the full ones."""
    flops = {}
    for name, args in [("flag", ["--causal"]), ("true", ["--causal", "true"]), ("false", ["--causal", "false"]),
                       ("none", [])]:
        assert main(["model", "--seq", "1024", "--impl", "triton_flash", *args, "--json"]) == 0
        flops[name] = json.loads(capsys.readouterr().out)[0]["flops"]
    assert flops["flag"] == flops["true"] == flops["false"] / 2 == flops["none"] / 2


def test_model_says_the_exp_roof_does_not_bind_a_memory_bound_decode(capsys, monkeypatch):
    """At one query row every fused kernel is memory-bound, far under the exp roof: the note says it does not bind;
    a long prefill is compute-bound, and the note gives the exp roof as the cap of a kernel without overlap."""
    from profiler.cli.console import console

    monkeypatch.setattr(console, "width", 200)
    h100 = hardware.lookup("H100-SXM")
    per_exp = 4 * 128
    exp = per_exp / (per_exp / h100.peak_flops("bf16") + 1 / h100.exp2_per_s) / 1e12
    shape = ["--seq", "32768", "--dim", "128", "--heads", "64", "--kv-heads", "8", "--dtype", "bf16"]
    assert main(["model", "--seq-q", "1", *shape]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"exp roof: {exp:,.0f} TFLOP/s on the datasheet" in out and "it does not bind this shape" in out
    assert "cap a fused kernel" not in out
    assert main(["model", *shape]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"cap a fused kernel at {exp:,.0f} TFLOP/s here" in out and "does not bind" not in out


def test_model_table_names_the_device_and_ridge(capsys):
    assert main(["model", "--seq", "4096", "--device-name", "NVIDIA H100 80GB HBM3"]) == 0
    out = capsys.readouterr().out
    assert "H100-SXM" in out and "ridge 295" in out


@pytest.mark.parametrize(
    "args,message",
    [
        (["model", "--seq", "0"], "argument --seq: '0': must be a positive integer"),
        (["capture", "--batch", "-1"], "argument --batch: '-1': must be a positive integer"),
        (["model", "--seq", "abc"], "argument --seq: 'abc' is not an integer"),
        (["model", "--device-name", "TPU"], "unknown --device-name 'TPU'; known: A100-SXM4-40GB"),
        (["model", "--dtype", "int8"], "argument --dtype: invalid choice: 'int8'"),
        (["model", "--path", "gluon"], "argument --path: 'gluon' is not a kernel path: tiled, gluon-ws"),
        (["model", "--path", "Auto"], "or auto"),
        (["model", "--causal", "both"], "'both': allowed values are true and false (one shape"),
        (["model", "--dtype", "fp8", "--path", "auto"], "--path auto plans our fp16 and bf16 kernels, not fp8"),
        (["model", "--seq-q", "1", "--seq-kv", "32768", "--batch", "1", "--path", "split-kv x64"],
         "this shape's split-KV plan is split-kv x16"),
        (["model", "--seq", "4096", "--path", "split-kv x8"], "split-KV plan is none (it runs whole tiles)"),
        (["model", "--path", "gluon-ws split-tail 4x0"], "'split-tail 4x0': a cut tail is A >= 1 tiles in S >= 2"),
        (["model", "--path", "gluon-ws split-tail 4x32", "--causal"], "cuts its last wave only without a mask"),
        (["model", "--path", "gluon-ws split-tail 4x32", "--dtype", "fp8"], "in fp16 or bf16 (here no mask, fp8)"),
        (["bench", "--seq", "1,x"], "'1,x' is not a comma-separated list of integers"),
        (["sweep", "--seq", "64,,128"], "'64,,128' has an empty item; separate values with single commas"),
        (["bench", "--impl", "naive,"], "'naive,' has an empty item"),
        (["bench", "--mode", "fwd,,bwd"], "'fwd,,bwd' has an empty item"),
        (["bench", "--impl", "flash9"], "unknown implementation 'flash9'; choose from: naive, triton_naive"),
        (["bench", "--causal", "maybe"], "'maybe': allowed values are true, false, both"),
        (["bench", "--mode", "train"], "'train': allowed values are fwd, bwd, fwd+bwd"),
        (["bench", "--impl", "naive", "--baseline", "triton_flash"], "--baseline 'triton_flash' must be one of"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(args, message):
    out = run_cli(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def test_the_ceilings_cache_is_a_folder_or_a_json_file(tmp_path, monkeypatch):
    from profiler.measure.ceilings import cache_path

    monkeypatch.setenv("ATTN_ROOFLINE_CACHE", str(tmp_path / "x"))
    assert cache_path() == tmp_path / "x" / "ceilings.json"
    monkeypatch.setenv("ATTN_ROOFLINE_CACHE", str(tmp_path / "x" / "c.json"))
    assert cache_path() == tmp_path / "x" / "c.json"  # the file itself, not a folder named c.json
    monkeypatch.delenv("ATTN_ROOFLINE_CACHE")
    assert cache_path().parts[-3:] == (".cache", "attention-roofline", "ceilings.json")


def test_ceilings_on_the_cpu_are_measured_and_cached(tmp_path):
    out = run_cli("ceilings", "--json", env={"ATTN_ROOFLINE_CACHE": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["device"].startswith("CPU")
    rates = {r["what"]: r["measured"] for r in result["rows"]}
    assert rates["matmul fp32 (n=2048)"] > 0.001  # TFLOP/s: any real CPU does over 1 GFLOP/s
    assert rates["copy 256 MiB (read+write)"] > 0.1  # GB/s
    assert result["datasheet_entry"] is None  # a CPU has measured ceilings only
    cached = json.loads((tmp_path / "ceilings.json").read_text())
    assert len(cached) == 1
    # A second run takes them from the cache (a CPU stores fp32 only; it used to measure again every time).
    again = run_cli("ceilings", "--json", env={"ATTN_ROOFLINE_CACHE": str(tmp_path)})
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "ceilings.json").read_text()) == cached


def test_demo_on_the_cpu_runs_the_pytorch_implementations():
    out = run_cli("demo", "--device", "cpu")
    assert out.returncode == 0, out.stderr
    for name in ("naive", "sdpa_math", "sdpa_flash"):
        row = next(line for line in out.stdout.splitlines() if line.strip("│ ").startswith(name + " "))
        assert " ok " in row, row
    assert "needs a CUDA device" in out.stdout  # the Triton rows say why they did not run
    # stdout is a pipe, not a terminal: a plain line per implementation as it finishes, not a progress bar
    progress = [line for line in out.stdout.splitlines() if line.startswith("[")]
    n = len(BUILTIN)  # one case for each implementation
    assert len(progress) == n and progress[0].startswith(f"[1/{n}] naive fwd B1 H4 N=512 D64 fp32: ok ")
    assert f"[2/{n}] triton_naive fwd B1 H4 N=512 D64 fp32: unsupported: " in progress[1]


def test_bench_tokens_below_the_longest_seq_is_a_usage_error():
    out = run_cli("bench", "--seq", "512,1024", "--tokens", "600", "--device", "cpu")
    assert out.returncode == 2
    assert out.stderr.strip() == ("python -m profiler bench: error: --tokens 600 is below the longest query length "
                                  "(1024): batch = tokens // seq_q must be at least 1")


def test_bench_writes_a_capture_and_prints_ratios(tmp_path):
    import pandas as pd

    folder = tmp_path / "bench"
    out = run_cli("bench", "--seq", "32,64", "--tokens", "128", "--heads", "2", "--dim", "16", "--dtype", "fp32",
                  "--impl", "naive,sdpa_math", "--baseline", "naive", "--rep-ms", "5", "--device", "cpu",
                  "--out", str(folder), "--json", str(tmp_path / "ratios.json"))
    assert out.returncode == 0, out.stderr
    assert "naive/sdpa_math: lowest" in out.stdout and "of 2 at or above 1.0" in out.stdout
    results = pd.read_parquet(folder / "results.parquet")
    totals = results[results.step == "total"]
    assert sorted(zip(totals.seq_q, totals.batch, totals.impl)) == [
        (32, 4, "naive"), (32, 4, "sdpa_math"), (64, 2, "naive"), (64, 2, "sdpa_math")]  # batch = 128 // N
    assert (totals.status == "ok").all() and (totals.max_rel_err < 1e-5).all()
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["kind"] == "bench" and meta["baseline"] == "naive"
    rows = json.loads((tmp_path / "ratios.json").read_text())["rows"]
    for row in rows:
        assert row["naive/sdpa_math"] == pytest.approx(row["naive_tflops"] / row["sdpa_math_tflops"])
    # A second run into the same folder needs --resume, and then measures nothing new.
    again = run_cli("bench", "--seq", "32", "--tokens", "128", "--heads", "2", "--dim", "16", "--dtype", "fp32",
                    "--impl", "naive,sdpa_math", "--baseline", "naive", "--device", "cpu", "--out", str(folder))
    assert again.returncode == 2 and "pass --resume" in again.stderr


def test_bench_table_ratios_and_missing_peers():
    import pandas as pd

    from profiler.store import to_frame
    from profiler.views.tables import bench_table

    base = {"step": "total", "mode": "fwd", "dtype": "fp16", "head_dim": 64, "causal": False, "batch": 4,
            "heads": 32, "seq_kv": 2048, "max_rel_err": 1e-4, "message": None}
    frame = to_frame([
        {**base, "impl": "triton_flash", "seq_q": 2048, "tflops": 400.0, "status": "ok"},
        {**base, "impl": "sdpa_cudnn", "seq_q": 2048, "tflops": 500.0, "status": "ok"},
        {**base, "impl": "triton_flash", "seq_q": 4096, "tflops": 420.0, "status": "ok"},
        {**base, "impl": "sdpa_cudnn", "seq_q": 4096, "tflops": None, "status": "oom"},
        {**base, "impl": "naive", "step": "softmax", "seq_q": 2048, "tflops": 1.0, "status": "ok"},
    ])
    table = bench_table(frame, ["triton_flash", "sdpa_cudnn", "sdpa_flash"], "triton_flash")
    assert list(table.seq_q) == [2048, 4096]
    assert table.loc[0, "triton_flash/sdpa_cudnn"] == pytest.approx(0.8)
    assert pd.isna(table.loc[1, "triton_flash/sdpa_cudnn"]) and table.loc[1, "sdpa_cudnn_status"] == "oom"
    assert (table.sdpa_flash_status == "missing").all() and table["triton_flash/sdpa_flash"].isna().all()

