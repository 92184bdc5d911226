"""profiler.nsight.stalls and ``python -m profiler stalls`` on a real Nsight Compute source page
(tests/data/ncu-source-h100: FA4's backward kernel on an H100), checked against sums taken here with the csv
module, not with the code under test."""

from __future__ import annotations

import collections
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cli import main
from profiler.nsight.stalls import (
    REASONS,
    SourcePageError,
    hottest,
    opcode_shares,
    read_source_page,
    reason_shares,
    sections,
)

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "tests/data/ncu-source-h100/fa4_bwd_d64_n2048.csv"


def _raw():
    """The page's rows as the csv module reads them, and its stall columns (issued samples only)."""
    with PAGE.open(newline="") as f:
        lines = list(csv.reader(f))
    header = lines[1]
    rows = [dict(zip(header, r)) for r in lines[2:] if len(r) == len(header)]
    stall = [c for c in header if c.startswith("stall_") and "Not Issued" not in c]
    return lines[0][1], rows, stall


def test_the_page_reads_as_one_row_per_instruction_with_its_samples_and_reasons():
    kernel, rows, stall = _raw()
    name, page = read_source_page(PAGE)
    assert name == kernel and "FlashAttentionBackwardSm90" in name
    assert len(page) == len(rows) == 1296
    assert page["samples"].sum() == sum(float(r["Warp Stall Sampling (All Samples)"]) for r in rows) == 266444
    assert page["executions"].tolist() == [int(r["Instructions Executed"]) for r in rows]
    assert sorted(c for c in page.columns if c not in ("address", "sass", "opcode", "samples", "executions")) == \
        sorted(c.removeprefix("stall_") for c in stall)
    assert page.loc[page["sass"].str.startswith("@!P0  BRA"), "opcode"].eq("BRA").all()
    assert page["opcode"].str.startswith("HGMMA.64x64x16.F32.BF16").sum() > 0


def test_reason_shares_are_each_reasons_samples_over_all():
    _, rows, stall = _raw()
    totals = {c.removeprefix("stall_"): sum(float(r[c]) for r in rows) for c in stall}
    shares = reason_shares(read_source_page(PAGE)[1])
    assert list(shares.index[:3]) == ["barrier", "long_sb", "selected"]
    for reason, share in shares.items():
        assert share == pytest.approx(totals[reason] / sum(totals.values()))
    assert shares.sum() == pytest.approx(1.0)
    assert round(shares["barrier"], 3) == 0.220 and round(shares["long_sb"], 3) == 0.214


def test_sections_group_instructions_executed_equally_often():
    _, rows, _ = _raw()
    by_count = collections.defaultdict(lambda: [0.0, 0])
    for r in rows:
        by_count[int(r["Instructions Executed"])][0] += float(r["Warp Stall Sampling (All Samples)"])
        by_count[int(r["Instructions Executed"])][1] += 1
    total = sum(v[0] for v in by_count.values())
    table = sections(read_source_page(PAGE)[1])
    assert len(table) == len(by_count)
    for row in table.itertuples():
        assert row.share == pytest.approx(by_count[row.executions][0] / total)
        assert row.instructions == by_count[row.executions][1]
    assert table["samples"].is_monotonic_decreasing
    # The MMA warpgroups' step: 8 warps x 131,072 query tiles (8,192 key blocks of 16), most of the samples.
    step = table.iloc[0]
    assert step.executions == 8 * 8192 * 16 and step.instructions == 642 and round(step.share, 3) == 0.786
    assert step.reasons.startswith("barrier 18%, selected 18%")
    # The dQ writer warp: one per program, once per query tile; its hottest line is the bulk reduce-add.
    writer = table[table["executions"] == 8192 * 16].iloc[0]
    assert writer.hottest.startswith("UBLKRED.G.S.ADD.F32") and round(writer.share, 3) == 0.092


def test_hottest_instructions_are_the_largest_rows_with_their_main_reason():
    _, rows, stall = _raw()
    top = sorted(rows, key=lambda r: -float(r["Warp Stall Sampling (All Samples)"]))[:5]
    table = hottest(read_source_page(PAGE)[1], 5)
    assert table["address"].tolist() == [r["Address"] for r in top]
    assert table["reason"].tolist() == [max(stall, key=lambda c: float(r[c])).removeprefix("stall_") for r in top]
    assert table.loc[0, "sass"].startswith("UBLKRED") and round(table.loc[0, "share"], 3) == 0.070
    assert round(opcode_shares(read_source_page(PAGE)[1])["MUFU.EX2"], 3) == 0.079


def test_files_that_are_not_one_kernels_source_page_are_refused(tmp_path):
    results = tmp_path / "results.csv"
    results.write_text("impl,seq,ms\nnaive,1024,1.5\n")
    with pytest.raises(SourcePageError, match="is not an Nsight Compute source page"):
        read_source_page(results)
    no_samples = tmp_path / "details.csv"
    no_samples.write_text('"Kernel Name","k"\n"Address","Source","Instructions Executed"\n"0x0","EXIT","1"\n')
    with pytest.raises(SourcePageError, match="profile with --set full"):
        read_source_page(no_samples)
    two = tmp_path / "two.csv"
    text = PAGE.read_text().splitlines()
    two.write_text("\n".join(text[:10] + text[:10]) + "\n")
    with pytest.raises(SourcePageError, match="more than one kernel"):
        read_source_page(two)
    with pytest.raises(SourcePageError, match="missing.csv: no such file"):
        read_source_page(tmp_path / "missing.csv")
    head, header, first = text[0], text[1], text[2]
    as_text = first.replace('"114"', '"lots"', 1)  # the first row's "Warp Stall Sampling (All Samples)" is 114
    idle = first.replace('"114"', '"0"')  # a page whose one row has no samples
    cases = {"bare.csv": ('"Kernel Name"\n', "its first line is not"),
             "named.csv": ('"Kernel Name","k"\n', "has no header nor instruction rows"),
             "twice.csv": ("\n".join([head, header + ',"Address"', first + ',"0x0"']), "repeats the column"),
             "text.csv": ("\n".join([head, header, as_text]), "holds 'lots' at"),
             "idle.csv": ("\n".join([head, header, idle]), "no warp-state samples")}
    for name, (content, message) in cases.items():
        (tmp_path / name).write_text(content)
        with pytest.raises(SourcePageError, match=message):
            read_source_page(tmp_path / name)
    with pytest.raises(SourcePageError, match="cannot read it"):
        read_source_page(tmp_path)  # a directory
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00\x81" * 100)
    with pytest.raises(SourcePageError):
        read_source_page(tmp_path / "binary.csv")


def test_the_command_prints_the_three_tables_and_json(capsys):
    assert main(["stalls", str(PAGE), "--top", "4"]) == 0
    out = capsys.readouterr().out
    assert "266,444 warp samples over 1,296 instructions" in out
    assert "barrier" in out and "22.0%" in out and "1,048,576" in out and "UBLKRED.G.S.ADD.F32.RN" in out
    assert main(["stalls", str(PAGE), "--top", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["samples"] == 266444 and len(data["hottest"]) == 3 and len(data["sections"]) == 3
    _, rows, stall = _raw()
    totals = {c.removeprefix("stall_"): sum(float(r[c]) for r in rows) for c in stall}
    assert data["reasons"] == pytest.approx({k: v / sum(totals.values()) for k, v in totals.items()})
    assert data["sections"][0]["executions"] == 1048576


def test_the_reason_table_says_what_each_reason_means_and_a_long_name_is_marked_cut(capsys, monkeypatch):
    """Every reason the checked-in page samples has a line of meaning (profiler.nsight.stalls.REASONS), 'selected' that
    it is no stall; the kernel's 180-character name is cut at 100 with an ellipsis."""
    from profiler.cli.console import console

    monkeypatch.setattr(console, "width", 200)  # whatever terminal runs the tests: no cell wraps
    kernel, page = read_source_page(PAGE)
    assert set(reason_shares(page).index) <= set(REASONS) and len(kernel) > 100
    assert main(["stalls", str(PAGE), "--top", "3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert kernel[:99] + "…: 266,444 warp samples" in out
    assert "issuing: the sample caught the warp issuing an instruction, not stalled" in out


def test_sampled_instructions_no_pass_counted_are_named_so(capsys):
    """The checked-in page has 56 instructions with warp samples (the producer's mbarrier try-waits among them) whose
    executed-instruction counter is 0: the section table says "not counted" and why, rather than "0" executions."""
    _, page = read_source_page(PAGE)
    idle = page[page.executions == 0]
    assert len(idle) == 56 and idle.samples.sum() == 703
    assert main(["stalls", str(PAGE), "--top", "15"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert re.search(r"│ 0 +│ 56 +│", out) is None  # the section is not shown as 0 executions
    assert "not counted: instructions with warp samples whose executed-instruction counter reads 0" in out
    assert main(["stalls", str(PAGE), "--top", "4"]) == 0
    assert "not counted" not in capsys.readouterr().out  # not among the 4 largest sections: no note


def test_bad_input_is_one_line_and_exit_status_2(tmp_path):
    bad = tmp_path / "not-ncu.csv"
    bad.write_text("a,b\n1,2\n")
    for args in ([str(bad)], [str(tmp_path / "missing.csv")], [str(PAGE), "--top", "0"]):
        done = subprocess.run([sys.executable, "-m", "profiler", "stalls", *args], cwd=ROOT, capture_output=True,
                              text=True)
        assert done.returncode == 2, args
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr


ROUND23 = ROOT / "reports/perf-h100/gluon_fwd_round23"


def wait_order():
    from script_module import script_module

    return script_module("scripts/perf_experiments/ncu_wait_order.py").loop_order


def sass_rows(name: str) -> list[list[str]]:
    """The instruction rows of a round-23 source page, read with the csv module alone."""
    import gzip

    with gzip.open(ROUND23 / f"fwd_round23_ncu_{name}.sass.csv.gz", "rt", newline="") as f:
        lines = list(csv.reader(f))
    header = lines[1]
    return [dict(zip(header, row)) for row in lines[2:] if len(row) == len(header)]


@pytest.mark.parametrize("name, hot, runs, wait, first_exp", [
    ("default", 1032192, 2, 110, 122),  # ptxas waits for PV before every exponential
    ("late", 1032192, 2, 420, 164),  # late_wait: after them
    ("fa4", 2064384, 1, 196, 117),  # FA4: after 10 of its 66
])
def test_where_pv_waits_in_the_round_23_pages(name, hot, runs, wait, first_exp):
    """scripts/perf_experiments/ncu_wait_order.py on the Nsight Compute pages docs/perf-notes.md's round 23 reads:
    the hottest loop's runs, and in the first, PV's wait (DEPBAR0, no wgmma left in flight) and the exponentials,
    against the positions and samples counted here from the CSV rows."""
    rows = sass_rows(name)
    body = [r for r in rows if int(r["Instructions Executed"].replace(",", "") or 0) == hot]
    waits = [i for i, r in enumerate(body)
             if "WARPGROUP.DEPBAR" in r["Source"] and r["Source"].rstrip(" ;").endswith("0x0")]
    exps = [i for i, r in enumerate(body) if "MUFU.EX2" in r["Source"]]
    lines = wait_order()(str(ROUND23 / f"fwd_round23_ncu_{name}.sass.csv.gz"))
    assert lines[0] == f"{len(body)} instructions executed {hot} times"
    assert sum(line.startswith("  a run of") for line in lines) == runs
    run_start = next(i for i, r in enumerate(body) if r["Address"] == lines[1].split("(from ")[1].split(")")[0])
    samples = int(body[waits[0]]["Warp Stall Sampling (All Samples)"].replace(",", ""))
    assert waits[0] - run_start == wait and f"{wait}:DEPBAR0({samples})" in lines[2]
    assert f"MUFU {first_exp}-" in lines[1] and exps[0] - run_start == first_exp
    before = sum(1 for e in exps if e < waits[0])
    assert before == {"default": 0, "late": 66, "fa4": 10}[name]
