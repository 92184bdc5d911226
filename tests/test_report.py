"""The HTML report (profiler.views.report): every shape family of a capture, a chosen set of them, the
sentence saying what is shown and left out, formatted tables, statuses, and the figures it embeds.
Against the captures shipped in reports/."""

from __future__ import annotations

import base64
import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profiler.cli import main
from profiler.store import CaptureError, load_capture
from profiler.views import report, rooflines
from profiler.views.families import FamilyNotFound, families_of, family_mask, select_families
from profiler.views.formatting import baseline_table, mib, percent, scientific, sig3, summary_table, thousands
from profiler.views.report_html import anchor
from profiler.views.style import FAMILY_COLUMNS

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reports" / "reference-h200"
DECODE = ROOT / "reports" / "decode-capture-h100"
VALIDATE = ROOT / "reports" / "validate-h200"
MIXED = ROOT / "tests" / "data" / "mixed-cpu-h100"  # ranks on a CPU and a (fake) H100: its README.md
RATES = ["TFLOP/s", "GB/s", "intensity (FLOP/B)", "of datasheet roof", "of measured roof", "of binding ceiling",
         "speedup over naive"]
PERCENTS = ["of datasheet roof", "of measured roof", "of binding ceiling", "of measured copy"]


def _n_families(folder: Path) -> int:
    return load_capture(folder)[1].groupby(FAMILY_COLUMNS).ngroups


def _sections(page: str) -> list[str]:
    """The family labels of the page's sections, in order."""
    return [m for m in re.findall(r"<h2 id='family-[^']*'>([^<]*)</h2>", page)]


def _shows(page: str) -> str:
    return re.search(r"<p class='shows'>(.*?)</p>", page).group(1)


def _cells(page: str) -> list[str]:
    return re.findall(r"<td class='[^']*'>(.*?)</td>", page)


def _figures(page: str) -> list[dict]:
    blocks = re.findall(r"<script type='application/json' id='chart-\d+-data'>(.*?)</script>", page, re.S)
    return [json.loads(b.replace("<\\/", "</")) for b in blocks]


def _values(array) -> list[float]:
    """A plotly array as the chart's JSON holds it: a list, or numpy's base64 form (plotly sends arrays so)."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def _title(fig: dict) -> str:
    title = fig["layout"].get("title", "")
    return title.get("text", "") if isinstance(title, dict) else str(title)


@pytest.fixture(scope="module")
def reference_file(tmp_path_factory) -> Path:
    """The reference capture's report as `python -m profiler report` writes it (built once: it takes seconds)."""
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", str(REFERENCE), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def reference_page(reference_file) -> str:
    return reference_file.read_text()


@pytest.fixture(scope="module")
def decode_page() -> str:
    return report.build_report(DECODE)


@pytest.fixture(scope="module")
def reference_families() -> dict[str, pd.DataFrame]:
    return families_of(load_capture(REFERENCE)[1])


# ------------------------------------------------------------------------------------- families


def test_every_family_of_the_reference_capture_has_a_section(reference_page, reference_families):
    labels = list(reference_families)
    assert len(labels) == _n_families(REFERENCE) == 16
    assert _sections(reference_page) == labels
    n_rows = len(load_capture(REFERENCE)[1])
    # the contents list links every section
    assert re.findall(r"<li><a href='#(family-[^']*)'>", reference_page) == [anchor(x) for x in labels]
    assert _shows(reference_page) == (f"Shows 16 of 16 families ({n_rows:,} of {n_rows:,} rows): every family of "
                                      "the capture; left out: none.")
    # reading order: fp16 before bf16, full before causal, fwd before fwd+bwd
    assert labels[:4] == ["B4 H32 D64 fp16 full fwd", "B4 H32 D64 fp16 full fwd+bwd", "B4 H32 D64 fp16 causal fwd",
                          "B4 H32 D64 fp16 causal fwd+bwd"]


def test_every_family_of_the_decode_and_validate_captures_has_a_section(decode_page):
    decode = decode_page
    assert _sections(decode) == ["B8 H32/8 D128 bf16 full fwd"] and _n_families(DECODE) == 1
    assert _shows(decode) == "Shows 1 of 1 families (110 of 110 rows): every family of the capture; left out: none."
    validate = report.build_report(VALIDATE)
    assert len(_sections(validate)) == _n_families(VALIDATE) == 8
    # each family has its Nsight Compute validation: the hierarchical roofline and the table
    assert validate.count("Nsight Compute counters vs the cost model") == 8
    titles = [_title(f) for f in _figures(validate)]
    assert sum("Hierarchical roofline" in t for t in titles) == 8


def test_a_family_selection_picks_exactly_the_matching_families(reference_families):
    labels = list(reference_families)
    fp16_causal = select_families(labels, ["fp16 causal"])
    assert fp16_causal == ["B4 H32 D64 fp16 causal fwd", "B4 H32 D64 fp16 causal fwd+bwd",
                           "B4 H32 D128 fp16 causal fwd", "B4 H32 D128 fp16 causal fwd+bwd"]
    assert select_families(labels, ["B4 H32 D64 fp16 full fwd"]) == ["B4 H32 D64 fp16 full fwd"]
    # items are a union, tokens an intersection; case does not matter; None is everything
    assert select_families(labels, ["d128 BF16 causal fwd", "D64 bf16 full fwd+bwd"]) == [
        "B4 H32 D64 bf16 full fwd+bwd", "B4 H32 D128 bf16 causal fwd"]
    assert select_families(labels, None) == labels
    assert select_families(["B8 H32/8 D128 bf16 full fwd"], ["H32/8"]) == ["B8 H32/8 D128 bf16 full fwd"]


def test_a_selected_report_shows_those_families_and_names_what_it_left_out(reference_families):
    page = report.build_report(REFERENCE, family=["fp16 causal"])
    shown = [x for x in reference_families if "fp16" in x.split() and "causal" in x.split()]
    left = [x for x in reference_families if x not in shown]
    assert _sections(page) == shown
    rows = sum(len(reference_families[x]) for x in shown)
    total = sum(len(x) for x in reference_families.values())
    assert _shows(page) == (f"Shows 4 of 16 families ({rows:,} of {total:,} rows) chosen by family "
                            f"&#x27;fp16 causal&#x27;: {', '.join(shown)}; left out: {', '.join(left)}.")


def test_write_report_takes_the_family_argument(tmp_path):
    out = report.write_report(DECODE, tmp_path / "decode.html", family=["bf16 fwd"])
    assert out == tmp_path / "decode.html" and _sections(out.read_text()) == ["B8 H32/8 D128 bf16 full fwd"]


def test_a_selection_matching_nothing_raises_with_the_available_labels(reference_families):
    with pytest.raises(CaptureError) as err:
        report.build_report(REFERENCE, family=["fp32"])
    message = str(err.value)
    assert isinstance(err.value, ValueError) and "\n" not in message
    assert message.startswith("family 'fp32' matches none of the 16 families of 'reference-h200'; available (16): "
                              "B4 H32 D64 fp16 full fwd, ")
    # 16 labels are shortened: the first few, then the tokens every label is made of
    assert message.endswith("and 10 more; tokens: B4 · H32 · D64 D128 · fp16 bf16 · full causal · fwd fwd+bwd")
    # one item of several matching nothing is enough: a typo must not shrink the report quietly
    with pytest.raises(FamilyNotFound, match="family 'casual'"):
        select_families(list(reference_families), ["fp16", "casual"])
    with pytest.raises(FamilyNotFound) as err:
        report.build_report(DECODE, family=["D64"])
    assert str(err.value) == ("family 'D64' matches none of the 1 families of 'decode-capture-h100'; available: "
                              "B8 H32/8 D128 bf16 full fwd")


# --------------------------------------------------------------------------------------- tables


def test_number_formats():
    assert sig3(1.426e8) == "142,600,000" and sig3(0.0412) == "0.0412" and sig3(59.27) == "59.3"
    assert sig3(float("nan")) == "-" and sig3(None) == "-" and sig3(3.0, "x") == "3.00x"
    assert thousands(3012.4) == "3,012" and thousands(34.56) == "34.6"
    assert percent(0.6271) == "62.7%" and percent(1.101) == "110.1%" and percent(np.nan) == "-"
    assert mib(136 * 2**20) == "136.0" and mib(74753 * 2**20) == "74,753.0"
    assert scientific(0.000552) == "5.52e-04" and scientific(686.0) == "6.86e+02"


def test_summary_cells_are_formatted_from_the_rows(reference_families):
    rows = reference_families["B4 H32 D64 fp16 full fwd"]
    meta = load_capture(REFERENCE)[0]
    points = rooflines.roofline_points(rows, rooflines.roofs_from_meta(meta, "fp16"), "compulsory",
                                       rooflines.exp_rate(meta))
    table = summary_table(rows, points)
    totals = rows[rows.step == "total"]
    assert len(table) == len(totals) > 30
    assert list(table.columns) == ["implementation", "path", "N", "time (ms)", *RATES[:3], "bound", *RATES[3:5],
                                   "binding ceiling", *RATES[5:], "peak memory (MiB)", "max rel. error", "status",
                                   "message"]
    for r in table.to_dict("records"):
        src = totals[(totals.impl == r["implementation"]) & (totals.seq_q == int(r["N"].replace(",", "")))].iloc[0]
        for cell in r.values():
            assert "nan" not in cell.lower() and "e+0" not in cell or cell == r["max rel. error"]
        if src.status != "ok":
            continue
        assert float(r["time (ms)"].replace(",", "")) == pytest.approx(src.time_ms, rel=5e-3)
        assert float(r["TFLOP/s"].replace(",", "")) == pytest.approx(src.tflops, rel=5e-3)
        assert float(r["GB/s"].replace(",", "")) == pytest.approx(src.gbps, rel=5e-3, abs=0.5)
        assert float(r["of datasheet roof"][:-1]) / 100 == pytest.approx(src.roof_fraction, abs=5e-4)
        assert float(r["of measured roof"][:-1]) / 100 == pytest.approx(src.roof_fraction_measured, abs=5e-4)
        assert float(r["max rel. error"]) == pytest.approx(src.max_rel_err, rel=5e-3)
        assert r["status"] == "ok" and r["message"] == ""
    naive = table[(table.implementation == "naive") & (table.N == "4,096")].iloc[0]
    assert naive["speedup over naive"] == "1.00x" and naive["bound"] == "memory"


def test_summary_shows_the_clock_and_rounds_spread_a_row_ran_at():
    """Round 24's grid (NVML read, --rounds 3): each row's SM clock and rounds' spread beside its time, as the
    dashboard's Roofline table shows them; a capture without either (the reference, timed once without NVML) has
    neither column."""
    meta, frame = load_capture(ROOT / "reports" / "perf-h100" / "gluon_fwd_round24" / "peers_r3_split")
    rows = frame[(frame.head_dim == 128) & (frame.dtype == "bf16") & ~frame.causal & (frame.kv_heads == 16)]
    points = rooflines.roofline_points(rows, rooflines.roofs_from_meta(meta, "bf16"), "compulsory",
                                       rooflines.exp_rate(meta))
    table = summary_table(rows, points)
    assert list(table.columns[3:7]) == ["time (ms)", "SM clock (MHz)", "rounds' spread", "TFLOP/s"]
    totals = rows[rows.step == "total"]
    for r in table.to_dict("records"):
        src = totals[(totals.impl == r["implementation"]) & (totals.seq_q == int(r["N"].replace(",", "")))].iloc[0]
        assert r["SM clock (MHz)"] == f"{src.sm_clock_mhz:,.0f}" and r["rounds' spread"] == percent(src.round_spread)
    reference = load_capture(REFERENCE)[1]
    assert "sm_clock_mhz" not in reference or reference.sm_clock_mhz.isna().all()
    family = reference[(reference.head_dim == 64) & (reference.dtype == "fp16") & ~reference.causal]
    assert not {"SM clock (MHz)", "rounds' spread"} & set(summary_table(family, family.iloc[:0]).columns)


def test_a_family_without_naive_rows_has_no_speedup_over_naive_column():
    """A peers grid (ours, cuDNN, FA4) timed no naive attention: its table leaves out the column that would be
    all dashes, and keeps every other one."""
    meta, frame = load_capture(ROOT / "reports" / "fa4-peers-h100-bwd")
    rows = frame[(frame.head_dim == 64) & (frame.dtype == "bf16") & ~frame.causal]
    points = rooflines.roofline_points(rows, rooflines.roofs_from_meta(meta, "bf16"), "compulsory",
                                       rooflines.exp_rate(meta))
    table = summary_table(rows, points)
    assert len(table) == len(rows[rows.step == "total"]) == 12 and "naive" not in set(rows.impl)
    assert "speedup over naive" not in table.columns
    assert {"time (ms)", "TFLOP/s", "of datasheet roof", "status"} <= set(table.columns)


def test_a_bench_capture_shows_its_baseline_against_each_peer_per_family():
    """The backward peers grid (baseline triton_flash): each family's section has a table of each peer's time over
    the baseline's, shape by shape, as the parquet's times give them; a capture without a baseline has none."""
    meta, frame = load_capture(ROOT / "reports" / "fa4-peers-h100-bwd")
    page = report.build_report(ROOT / "reports" / "fa4-peers-h100-bwd")
    assert meta["baseline"] == "triton_flash"
    # a family per (tokens, heads, head_dim, dtype, mask): 8 of the 32-shape grid and 4 of the grouped-query rows
    assert page.count("<h3>Against triton_flash</h3>") == len(_sections(page)) == 12
    family = (frame.head_dim == 64) & (frame.dtype == "bf16") & frame.causal
    table = baseline_table(frame[family], "triton_flash")
    # a token sweep: the batch shrinks as N grows, so the table keeps it
    assert list(table.columns) == ["batch", "N", "triton_flash time (ms)", "vs sdpa_cudnn", "vs fa4"]
    assert list(table.N) == ["2,048", "4,096", "8,192", "16,384"] and list(table.batch) == ["16", "8", "4", "2"]
    times = frame[family & (frame.step == "total")].pivot_table(index="seq_q", columns="impl", values="time_ms")
    for r in table.to_dict("records"):
        t = times.loc[int(r["N"].replace(",", ""))]
        assert float(r["triton_flash time (ms)"]) == pytest.approx(t.triton_flash, rel=5e-3)
        assert float(r["vs sdpa_cudnn"][:-1]) == pytest.approx(t.sdpa_cudnn / t.triton_flash, rel=5e-3)
        assert float(r["vs fa4"][:-1]) == pytest.approx(t.fa4 / t.triton_flash, rel=5e-3)
    # a peer that did not run at a shape has no ratio there; the others keep theirs
    failed = frame[family].copy()
    failed.loc[(failed.impl == "fa4") & (failed.seq_q == 4096), "status"] = "error"
    broken = baseline_table(failed, "triton_flash").set_index("N")
    assert broken.loc["4,096", "vs fa4"] == "-" and broken.loc["4,096", "vs sdpa_cudnn"] != "-"
    # where the baseline did not run, its shape keeps a row of dashes; a peer that never ran keeps its column
    failed.loc[(failed.impl == "triton_flash") & (failed.seq_q == 8192), "status"] = "oom"
    failed.loc[failed.impl == "sdpa_cudnn", "status"] = "unsupported"
    broken = baseline_table(failed, "triton_flash").set_index("N")
    assert list(broken.index) == ["2,048", "4,096", "8,192", "16,384"]
    assert set(broken.loc["8,192"].drop("batch")) == {"-"} and set(broken["vs sdpa_cudnn"]) == {"-"}
    assert broken.loc["2,048", "vs fa4"] == table.set_index("N").loc["2,048", "vs fa4"]
    # over the whole capture, under the header: each peer's range, as the README's backward row has it
    every = frame[frame.step == "total"].pivot_table(index=["dtype", "head_dim", "causal", "batch", "seq_q"],
                                                      columns="impl", values="time_ms")
    for peer in ("sdpa_cudnn", "fa4"):
        ratio = every[peer] / every.triton_flash
        assert f"{peer} {ratio.min():.3f}x to {ratio.max():.3f}x over 40 shapes" in page
    assert "triton_flash: FlashAttention-2 (ours)" in html.unescape(page)
    # the cells as the page shows them, and nothing of the kind in a capture without a baseline
    assert "".join(f"<td class='num'>{c}</td>" for c in table.iloc[0]) in page
    plain = report.build_report(REFERENCE)
    assert load_capture(REFERENCE)[0].get("baseline") is None
    assert "Against" not in plain and "lowest to highest" not in plain


def test_report_table_cells_have_no_raw_floats(reference_page):
    cells = _cells(reference_page)
    assert len(cells) > 16 * 30 * 10
    assert not [c for c in cells if c.lower() in ("nan", "none", "<na>")]
    # plain numbers only, except the error column's scientific notation (its values span many decades)
    raw = [c for c in cells if re.fullmatch(r"-?[\d.]+e[+-]\d+", c)]
    assert all(re.fullmatch(r"\d\.\d\de-\d\d", c) for c in raw)
    percents = [c for c in cells if c.endswith("%")]
    assert percents and all(re.fullmatch(r"\d[\d,]*\.\d%", c) for c in percents)


def test_decode_summary_has_the_measured_copy_and_the_path(decode_page):
    meta, frame = load_capture(DECODE)
    page = decode_page
    assert "Decode: achieved bandwidth against the HBM roof" in page and "split-kv x8" in page
    assert "Peak memory: rows whose path names split-kv xS (our decode forward) also hold the S splits" in page
    assert "<th class='num'>of measured copy</th>" in page
    points = rooflines.roofline_points(frame, rooflines.roofs_from_meta(meta, "bf16"), "compulsory",
                                       rooflines.exp_rate(meta))
    table = summary_table(frame, points, meta["measured_ceilings"]["copy_gbps"])
    ok = table[table.status == "ok"]
    assert list(table.columns[2:4]) == ["query length", "key length"]
    # decode is memory-bound throughout: the HBM roof binds every row, so no binding-ceiling columns repeat it
    assert "binding ceiling" not in table and "of binding ceiling" not in table
    assert set(table.bound[table.status == "ok"]) == {"memory"}
    assert all(c.endswith("%") for c in ok["of measured copy"])
    first = frame[(frame.step == "total") & (frame.status == "ok")].iloc[0]
    shown = table[(table.implementation == first.impl) & (table["key length"] == f"{first.seq_kv:,}")
                  & (table["query length"] == f"{first.seq_q:,}")].iloc[0]
    copy = first.gbps / meta["measured_ceilings"]["copy_gbps"]
    assert float(shown["of measured copy"][:-1]) / 100 == pytest.approx(copy, abs=5e-4)


def _capture_with_a_wrong_row(tmp_path: Path) -> tuple[Path, pd.Series]:
    """reports/reference-h200's first family, with triton_flash at N=4096 failing the correctness check
    (its stored rates left in place, as an older writer might leave them: the report must not show them)."""
    meta, frame = load_capture(REFERENCE)
    rows = families_of(frame)["B4 H32 D64 fp16 full fwd+bwd"].copy()
    wrong = (rows.impl == "triton_flash") & (rows.seq_q == 4096) & (rows.step == "total")
    rows.loc[wrong, ["status", "message", "max_rel_err", "tflops"]] = [
        "wrong", "max_rel_err 686 above the fp16 tolerance 2e-2 [output]", 686.0, 12345.678]
    folder = tmp_path / "wrong-capture"
    folder.mkdir()
    shutil.copy(REFERENCE / "meta.json", folder / "meta.json")
    rows.to_parquet(folder / "results.parquet")
    return folder, rows[wrong].iloc[0]


def _summary_rows(page: str) -> list[tuple[set[str], dict[str, str]]]:
    """(row classes, header -> cell) of every row of the page's summary tables (status notes aside)."""
    out = []
    for table in re.findall(r"<table>(.*?)</table>", page, re.S):
        header = re.findall(r"<th class='[^']*'>(.*?)</th>", table)
        if "status" not in header:
            continue
        for classes, body in re.findall(r"<tr class='([^']*)'>(.*?)</tr>", table):
            if "note" not in classes.split():
                out.append((set(classes.split()), dict(zip(header, re.findall(r">(.*?)</td>", body)))))
    return out


def test_wrong_and_unsupported_rows_show_their_status_and_no_rates(tmp_path):
    folder, wrong = _capture_with_a_wrong_row(tmp_path)
    page = report.build_report(folder)
    rows = _summary_rows(page)
    [shown] = [cells for classes, cells in rows if "status-wrong" in classes and cells["implementation"] ==
               "triton_flash" and cells["N"] == "4,096"]
    assert shown["implementation"] == "triton_flash" and shown["status"] == "wrong" and shown["N"] == "4,096"
    assert shown["time (ms)"] == sig3(wrong.time_ms) != "-"  # it keeps its time, for the record
    assert shown["max rel. error"] == "6.86e+02"
    assert all(shown[c] == "-" for c in RATES + ["bound", "binding ceiling"])
    # the message on its own line, brackets and all
    assert (f"<tr class='note status-wrong'><td colspan='{len(shown)}'>max_rel_err 686 above the fp16 tolerance "
            "2e-2 [output]</td></tr>") in page
    unsupported = [cells for classes, cells in rows if "status-unsupported" in classes]
    stored = load_capture(folder)[1]
    no_backward = stored[(stored.step == "total") & (stored.impl == "triton_naive")]
    assert len(unsupported) == len(no_backward) == 6  # one per sequence length
    for r in unsupported:
        assert r["implementation"] == "triton_naive" and r["status"] == "unsupported"
        assert all(r[c] == "-" for c in ["time (ms)", *RATES, "bound"])
    assert page.count("triton_naive has no backward pass") == 6
    assert all(cells["status"] == "ok" for classes, cells in rows if not any(c.startswith("status-") for c in classes))


def test_only_ok_rows_are_drawn(tmp_path):
    """The builders the report calls filter to status ok: the wrong row's sentinel TFLOP/s is on no chart."""
    folder, wrong = _capture_with_a_wrong_row(tmp_path)
    meta, rows = load_capture(folder)
    figures = report.family_figures(meta, rows)
    assert [name for name, _, _ in figures] == ["Roofline", "Roofline", *["Scaling"] * 4, "Step breakdown"]
    for _, _, fig in figures:
        for trace in fig.data:
            for axis in (trace.x, trace.y):
                values = pd.to_numeric(pd.Series(np.asarray(axis if axis is not None else [], dtype=object)),
                                       errors="coerce").to_numpy(dtype=float)
                assert not np.isclose(values, 12345.678).any(), trace.name
            assert "12,345" not in str(trace.hovertext) and "1.235e+04" not in str(trace.hovertext)
    ok = rows[(rows.status == "ok") & (rows.step == "total") & (rows.impl == "triton_flash")]
    roofline = figures[0][2]
    drawn = next(t for t in roofline.data if t.name == "triton_flash")
    assert len(drawn.y) == len(ok) > 0


# -------------------------------------------------------------------------------------- the file


def test_report_is_self_contained_and_small(tmp_path, reference_file, reference_families):
    text = reference_file.read_text()
    # plotly.js is inline once (several MB), never fetched: the file opens offline
    assert "<script src=" not in text and text.count("Plotly.newPlot") == 1
    assert 3_000_000 < reference_file.stat().st_size < 10_000_000  # 6.6 MB for 16 families (plotly.js: 4.8)
    figures = _figures(text)
    assert text.count("<div class='chart") == len(figures)
    # per family: 2 rooflines (compulsory and tile bytes; no issued work is stored in this capture), 4 scaling
    # charts, the step breakdown; the trace where kernels.parquet has the family
    kernels = pd.read_parquet(REFERENCE / "kernels.parquet")
    traced = kernels.groupby(FAMILY_COLUMNS).ngroups
    assert len(figures) == 7 * len(reference_families) + traced
    titles = [_title(f) for f in figures]
    assert "Roofline, compulsory bytes: B4 H32 D64 fp16 full fwd" in titles[0]
    assert sum(t.startswith("Kernels per range") for t in titles) == traced
    # the template is sent once, not with every figure
    assert all("template" not in f["layout"] for f in figures)
    assert "HBM trips of the N×N matrix" in text
    assert main(["report", str(tmp_path)]) == 2  # not a capture: one line, exit status 2


def test_report_out_may_name_a_new_folder(tmp_path):
    from profiler.views.report import write_report

    out = write_report(ROOT / "reports" / "validate-h200-n2048", tmp_path / "new" / "deeper" / "r.html")
    assert out.exists() and out.read_text(encoding="utf-8").startswith("<!doctype html>")


def test_the_header_names_the_kernels_by_content_and_a_dirty_revision_as_a_base():
    """reports/fa4-peers-h100-bwd ran on a GPU machine whose copied tree had a stale .git: its git_revision is a base
    plus changes, so the header leads with kernels_sha256 (the kernels that ran) and names the peers' versions."""
    from profiler.views.report import build_report

    folder = ROOT / "reports" / "fa4-peers-h100-bwd"
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["git_revision"].endswith("-dirty")
    page = build_report(folder)
    header = re.search(r"<p class='meta'>(.*?)</p>", page).group(1)
    assert f"kernels sha256 {meta['kernels_sha256'][:12]}" in header
    assert f"a modified tree on git {meta['git_revision'][:12]}" in header
    assert f"flash-attn-4 {meta['peers']['flash-attn-4']}" in header
    assert f"· git {meta['git_revision'][:12]}" not in header
    # what the capture's note says of those two (its runs, the kernels' commit) is on the page, under how it was made
    made = page[page.index("How this capture was made"):]
    assert html.escape(meta["note"]) in made[:made.index("</details>")]


def test_a_capture_of_two_devices_has_a_section_per_device_against_its_roofs():
    """tests/data/mixed-cpu-h100: one family measured on a CPU (rank 0) and an H100 (rank 1) is two sections,
    the H100's drawn against its datasheet roof (fp32 67 TFLOP/s, 3.35 TB/s: meta.json's devices)."""
    meta, frame = load_capture(MIXED)
    cpu, h100 = meta["device"], "NVIDIA H100 80GB HBM3"
    labels = [f"B1 H1 D16 fp32 full fwd · {cpu}", f"B1 H1 D16 fp32 full fwd · {h100}"]
    page = report.build_report(MIXED)
    assert _sections(page) == labels and f"<p class='meta'>{cpu}, {h100} · torch" in page
    assert select_families(labels, ["h100"]) == labels[1:]
    rooflines_drawn = [f for f in _figures(page) if _title(f).startswith("Roofline, compulsory bytes")]
    assert len(rooflines_drawn) == 2
    on_cpu, on_h100 = ([t for t in f["data"] if t["name"].startswith("roof: ")] for f in rooflines_drawn)
    assert [t["name"] for t in on_cpu] == ["roof: measured matmul, DRAM copy"]  # a CPU has no datasheet
    sheet = next(t for t in on_h100 if t["name"] == "roof: H100-SXM datasheet")
    assert max(_values(sheet["y"])) == pytest.approx(67.0)
    assert "ridge 20 FLOP/B (H100-SXM datasheet)" in {a["text"] for a in rooflines_drawn[1]["layout"]["annotations"]}
    # The summary's datasheet fractions are the rows' own, judged against the H100 when measured.
    cells = _cells(page.split(f"<h2 id='{anchor(labels[1])}'>")[1])
    judged = frame[(frame.device == h100) & (frame.step == "total")].roof_fraction
    assert len(judged) == 2 and all(percent(x) in cells for x in judged)


def test_a_cpu_capture_report_names_its_timer_and_memory(tmp_path):
    from profiler.views.report import build_report

    folder = tmp_path / "cpu"
    folder.mkdir()
    shutil.copy(REFERENCE / "results.parquet", folder)
    meta = {**json.loads((REFERENCE / "meta.json").read_text()), "device": "CPU x86_64 (2 threads)",
            "device_type": "cpu"}
    for key in ("datasheet_device", "datasheet"):
        meta.pop(key)
    (folder / "meta.json").write_text(json.dumps(meta))
    page = build_report(folder, family=["B4 H32 D64 fp16 full fwd"])
    assert "DRAM trips of the N×N matrix" in page and "torch.utils.benchmark" in page
    assert "CUDA events" not in page and "HBM trips" not in page and "HBM bandwidth" not in page


def test_a_token_sweep_is_one_family_across_its_batches():
    """reports/fa4-peers-h100 is a `bench --tokens 32768` grid: the batch shrinks as N grows. Each shape
    family is one section across its four batches, named by its token count, and its scaling charts
    draw each implementation as one line of four points (not 64 one-length sections)."""
    capture = ROOT / "reports" / "fa4-peers-h100"
    frame = load_capture(capture)[1]
    families = families_of(frame)
    assert len(families) == 16 and _n_families(capture) == 64
    assert "32768 tokens H32 D64 bf16 causal bwd" in families and "32768 tokens H16 D128 fp16 full fwd" in families
    for label, rows in families.items():
        assert label.startswith("32768 tokens ") and len(rows) == 12 and set(rows.impl) == {
            "triton_flash", "sdpa_cudnn", "fa4"}
        assert set(zip(rows.batch, rows.seq_q)) == {(16, 2048), (8, 4096), (4, 8192), (2, 16384)}
    assert sum(len(rows) for rows in families.values()) == len(frame)
    page = report.build_report(capture, ["32768 tokens H32 D64 bf16 causal bwd"])
    assert _sections(page) == ["32768 tokens H32 D64 bf16 causal bwd"]
    assert "key length 2,048 to 16,384 · batch 16, 8, 4, 2 as N grows · 3 implementations" in page
    figures = _figures(page)
    assert "{B2,B4,B8,B16} H32 D64 bf16 causal bwd" in _title(figures[0])
    scaling = [f for f in figures if _title(f) == "Throughput"]
    assert scaling, [_title(f) for f in figures]
    lines = {t["name"]: _values(t["x"]) for t in scaling[0]["data"] if t.get("mode", "").startswith("lines")}
    assert len(lines) == 3 and all(x == [2048, 4096, 8192, 16384] for x in lines.values()), lines
    # no naive in this capture: no empty "Speedup over naive" chart (the reference capture keeps one)
    assert "Speedup over naive PyTorch" not in [_title(f) for f in figures]


def test_a_grid_of_batches_times_lengths_is_not_a_token_sweep():
    """`bench --batch 1,2,4,8 --seq ...` runs every batch at every length: equal batch·N there (B1 N4096,
    B2 N2048, ...) is a coincidence, so each batch stays a family of its own."""
    frame = load_capture(REFERENCE)[1]
    grid = pd.concat([frame.assign(batch=b) for b in (1, 2, 4, 8)], ignore_index=True)
    families = families_of(grid)
    assert len(families) == 4 * 16 and not any("tokens" in label for label in families)
    assert all(rows.batch.nunique() == 1 and rows.seq_q.nunique() == 6 for rows in families.values())


def test_a_token_sweep_beside_a_fixed_batch_run_keeps_its_own_shapes():
    """A token sweep (B16 N2048 ... B2 N16384) and a B4 run of the same family at every length: two
    families (the point both hold, B4 N8192, goes to the sweep), and a family's traces or validation
    rows are those at its own (batch, N) pairs."""
    frame = load_capture(ROOT / "reports" / "fa4-peers-h100")[1]
    both = pd.concat([frame, frame.assign(batch=4)], ignore_index=True)
    families = families_of(both)
    sweep, fixed = families["32768 tokens H32 D64 fp16 full fwd"], families["B4 H32 D64 fp16 full fwd"]
    assert set(zip(sweep.batch, sweep.seq_q)) == {(16, 2048), (8, 4096), (4, 8192), (2, 16384)}
    # B4 N8192 is a point of both: it is drawn once, on the sweep
    assert set(fixed.batch) == {4} and set(fixed.seq_q) == {2048, 4096, 16384}
    kernels = pd.concat([sweep, fixed])[["seq_q", "seq_kv", *FAMILY_COLUMNS]].drop_duplicates()
    assert set(zip(*[kernels[family_mask(kernels, sweep)][c] for c in ("batch", "seq_q")])) == {
        (16, 2048), (8, 4096), (4, 8192), (2, 16384)}
    assert set(kernels[family_mask(kernels, fixed)].batch) == {4}


def test_the_tile_roofline_names_the_implementations_it_leaves_out():
    """cuDNN's and FA4's backward declare no tile shape, so they have no tile bytes: the tile-bytes
    roofline of a bwd family draws ours alone and its caption says who is missing and why."""
    page = report.build_report(ROOT / "reports" / "fa4-peers-h100", ["32768 tokens H32 D64 bf16 causal bwd"])
    figures = _figures(page)
    tile = next(f for f in figures if _title(f).startswith("Roofline, tile bytes"))
    drawn = {t["name"] for t in tile["data"] if t.get("mode") == "markers+text" or t.get("mode") == "markers"}
    assert "sdpa_cudnn" not in drawn and "fa4" not in drawn
    assert "not drawn, no tile shape declared for the cost model: fa4, sdpa_cudnn" in page
    forward = report.build_report(ROOT / "reports" / "fa4-peers-h100", ["32768 tokens H32 D64 bf16 causal fwd"])
    assert "no tile shape declared" not in forward


def test_the_names_say_which_kernel_paths_an_implementation_ran():
    """Where triton_flash's rows record the kernel path they took, the names line says which and on how many rows, with
    what each path names (from a new user's trial of the report, where the description alone said 'tiled')."""
    for folder in ("fa4-peers-h100-fwd", "bench-h100-gluon"):
        _, frame = load_capture(ROOT / "reports" / folder)
        ours = frame[frame.impl == "triton_flash"].path.value_counts()
        text = report._names(frame)
        ran = ", ".join(f"{path} on {count} of {ours.sum()} rows" for path, count in ours.items())
        assert f"portable Triton elsewhere (ran {ran});" in text
        assert "gluon-ws: the warp-specialized Gluon kernels for sm_90" in text
        assert ("tiled: the portable Triton kernels" in text) == ("tiled" in ours)
        assert "sdpa_cudnn: PyTorch SDPA, cuDNN backend" in text and "cuDNN backend (ran" not in text  # no path
    assert set(load_capture(ROOT / "reports" / "bench-h100-gluon")[1].query("impl == 'triton_flash'").path) == {
        "gluon-ws", "tiled"}


def test_a_split_tail_row_is_named_in_the_glossary_and_under_the_memory_chart(tmp_path):
    """Round 25's N 4096 run with split_tail (its path 'gluon-ws split-tail 4x32'): the names line says what split-tail
    is, and the memory chart's caption what such a row holds beyond the model."""
    folder = ROOT / "reports" / "perf-h100" / "gluon_fwd_round25" / "f_ab" / "1_default"
    text = report._names(load_capture(folder)[1])
    assert "(ran gluon-ws split-tail 4x32 on 2 of 2 rows)" in text
    assert "split-tail: the forward's last wave of A query tiles cut into S chunks of keys each (AxS)" in text
    page = report.build_report(folder)
    assert ("Peak memory: &quot;model O(N²), naive&quot; is what unfused attention keeps (S and P)" in page
            and "; rows whose path names split-tail AxS" in page and "kernels.tail_combine.partials" in page)
