"""scripts/hf_vs_sdpa.py: our kernel inside a transformers Llama against sdpa. On the CPU its --tiny run
(Triton's interpreter) writes a row per phase with the dispatch of our model's calls; bad input ends in one
line; the shipped H100 table is the one its rows give."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "hf_vs_sdpa.py"
SHIPPED = ROOT / "reports" / "hf-llama3-8b-h100"
sys.path.insert(0, str(ROOT / "scripts"))
import hf_vs_sdpa  # noqa: E402


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))


def test_tiny_run_writes_a_row_per_phase_with_where_our_calls_went(tmp_path):
    out = tmp_path / "hf"
    result = _run("--tiny", "--rounds", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [(r["context"], r["phase"]) for r in rows] == [(13, "prefill"), (13, "train"), (13, "decode")]
    # 2 layers, one call each; at 13 tokens on 2 K/V heads each forward is decode-sized (split-KV, one split).
    assert [r["dispatch"] for r in rows] == [
        {"kernel_calls": 2, "fallbacks": {}, "paths": {"fwd split-kv x1": 2}},
        {"kernel_calls": 2, "fallbacks": {}, "paths": {"fwd split-kv x1": 2, "bwd tiled": 2}},
        {"kernel_calls": 2, "fallbacks": {}, "paths": {"fwd split-kv x1": 2}},
    ]
    for r in rows:
        assert len(r["sdpa_times_ms"]) == len(r["ours_times_ms"]) == 1
        assert r["ours_over_sdpa"] == pytest.approx(r["ours_ms"] / r["sdpa_ms"])
    meta = json.loads((out / "meta.json").read_text())
    assert meta["dtype"] == "fp32" and meta["device"] == "cpu" and len(meta["kernels_sha256"]) == 64
    assert result.stdout.splitlines()[-3].startswith("| 13 | prefill |")


@pytest.mark.parametrize("args, message", [
    (["--phases", "bogus"], "argument --phases: 'bogus' is not a phase; allowed: prefill, train, decode"),
    (["--context", "0"], "argument --context: '0' is not a comma-separated list of positive integers"),
    (["--rounds", "0"], "argument --rounds: 0 is not a positive integer"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    result = _run("--tiny", "--out", str(tmp_path / "x"), *args)
    assert result.returncode == 2 and result.stderr == f"hf_vs_sdpa.py: error: {message}\n"


def test_out_must_be_new_or_empty(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "rows.jsonl").write_text("{}\n")
    result = _run("--tiny", "--out", str(tmp_path / "full"))
    assert result.returncode == 2
    assert result.stderr == f"hf_vs_sdpa.py: error: argument --out: {tmp_path / 'full'} is not a new or empty folder\n"


def test_an_out_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    result = _run("--tiny", "--out", str(tmp_path / "file" / "sub"))
    assert result.returncode == 2
    assert result.stderr == (f"hf_vs_sdpa.py: error: argument --out: {tmp_path / 'file' / 'sub'} cannot be made "
                             "(Not a directory)\n")


def test_the_shipped_table_is_the_one_its_rows_give():
    rows = [json.loads(line) for line in (SHIPPED / "rows.jsonl").read_text().splitlines()]
    assert hf_vs_sdpa.table(rows) in (SHIPPED / "table.md").read_text()
    assert {(r["context"], r["phase"]) for r in rows} == {(n, p) for n in (4096, 16384, 32768)
                                                         for p in ("prefill", "train", "decode")}
    for r in rows:  # every call of ours on our kernel, prefill and train on the Gluon kernels in BSHD
        assert r["dispatch"]["fallbacks"] == {} and r["dispatch"]["kernel_calls"] == 2
        if r["phase"] != "decode":
            assert r["dispatch"]["paths"]["fwd gluon-ws"] == 2


def test_the_results_page_quotes_the_round_11_run():
    """docs/results.md's table of ours / sdpa is round 11's final run (reports/perf-h100/hf_round11_final), every
    cell (rounded as printed), and the train ratios it quotes from the other runs are theirs."""
    def ratios(name):
        return {(r["context"], r["phase"]): r["ours_over_sdpa"] for r in map(
            json.loads, (ROOT / "reports" / "perf-h100" / name / "rows.jsonl").read_text().splitlines())}

    final = ratios("hf_round11_final")
    page = (ROOT / "docs" / "results.md").read_text()
    for context in (4096, 16384, 32768):
        cells = " | ".join(f"{final[context, p]:.3f}" for p in ("prefill", "train", "decode"))
        assert f"| {context} | {cells} |" in page, context
    meta = json.loads((ROOT / "reports" / "perf-h100" / "hf_round11_final" / "meta.json").read_text())
    assert meta["rounds"] == 7 and meta["device"] == "NVIDIA H100 80GB HBM3"
    assert all(final[n, phase] < 1 for n in (4096, 16384, 32768) for phase in ("prefill", "train"))
    text = page.replace("\n", " ")
    for runs, words in (((ratios("hf_round9_launch_cache"), ratios("hf_round9_train"), ratios("hf_round9_final")),
                         "three round-9 runs on three H100s gave"),
                        ((ratios("hf_train_round11"), final), "backward two runs gave")):
        at_4k = [t[4096, "train"] for t in runs]
        longer = [t[n, "train"] for t in runs for n in (16384, 32768)]
        assert (f"{words} {min(at_4k):.3f} to {max(at_4k):.3f} at 4k and {min(longer):.3f} to "
                f"{max(longer):.3f} at 16k") in text, words


def test_the_results_page_quotes_the_earlier_run_it_names():
    """docs/results.md's figures of the run before round 9 are that run's rows (reports/hf-llama3-8b-h100)."""
    rows = {(r["context"], r["phase"]): r["ours_over_sdpa"]
            for r in map(json.loads, (SHIPPED / "rows.jsonl").read_text().splitlines())}
    prefill = " / ".join(f"{rows[n, 'prefill']:.3f}" for n in (4096, 16384, 32768))
    decode = [rows[n, "decode"] for n in (4096, 16384, 32768)]
    page = (ROOT / "docs" / "results.md").read_text().replace("\n", " ")
    rounds = json.loads((SHIPPED / "meta.json").read_text())["rounds"]
    assert f"({rounds} rounds: prefill {prefill}, decode {min(decode):.2f}-{max(decode):.2f})" in page
