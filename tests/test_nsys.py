"""Nsight Systems ingestion against a real export from the H200 and the `nsys stats` CSVs of the
same run (tests/data/nsys-h200-n2048: `scripts/nsys_profile.sh --seq 2048 --batch 4 --heads 16
--impl naive,triton_flash,sdpa_flash --rep-ms 40`, see its meta.json)."""

from __future__ import annotations

import json
import lzma
import sqlite3
import subprocess
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from attention_core.shape import Shape
from profiler.cli import main
from profiler.measure.ranges import legacy_shape_range, shape_range
from profiler.nsight import nsys

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "nsys-h200-n2048"
EXPORT = DATA / "profile.sqlite.xz"


@pytest.fixture(scope="module")
def export():
    return nsys.read_export(EXPORT)


def test_projected_gpu_time_equals_nsys_stats_for_every_range(export):
    _, _, projection = export
    ours = nsys.summarize(projection).set_index("range")
    theirs = pd.read_csv(DATA / "stats_nvtx_gpu_proj_sum.csv").set_index("Range")
    assert set(ours.index) == set(theirs.index) and len(theirs) == 18
    for name, row in theirs.iterrows():
        assert ours.loc[name, "gpu_proj_ns"] == row["Total Proj Time (ns)"], name
        assert ours.loc[name, "instances"] == row["Range Instances"], name
        assert ours.loc[name, "range_ns"] == row["Total Range Time (ns)"], name
        assert ours.loc[name, "gpu_ops"] == row["Total GPU Ops"], name
        assert ours.loc[name, "gpu_proj_median_ns"] == row["Proj Med (ns)"], name


def test_range_times_equal_nsys_nvtx_sum(export):
    ranges, _, _ = export
    theirs = pd.read_csv(DATA / "stats_nvtx_sum.csv").set_index("Range")
    ours = ranges.groupby("range").range_ns.agg(["sum", "size", "median"])
    for name, row in theirs.iterrows():
        assert ours.loc[name, "sum"] == row["Total Time (ns)"] and ours.loc[name, "size"] == row["Instances"]


def test_ranges_have_names_domains_and_nesting(export):
    ranges, _, _ = export
    assert set(ranges.domain) == {"attn"}  # registered strings resolved through StringIds
    outer = ranges[ranges.depth == 0]
    assert sorted(outer.range) == ["attn:naive/fwd/seq=2048", "attn:sdpa_flash/fwd/seq=2048",
                                   "attn:triton_flash/fwd/seq=2048"]
    by_id = ranges.set_index("range_id")
    calls = ranges[ranges.range == "attn:naive/fwd/seq=2048/softmax/call"]
    assert (calls.depth == 2).all()
    assert set(by_id.loc[calls.parent_id, "range"]) == {"attn:naive/fwd/seq=2048/softmax"}
    steps = ranges[ranges.range == "attn:softmax"]
    # Naive's own repetitions, and the fp32 naive reference each case's correctness check runs.
    assert set(by_id.loc[steps.parent_id, "range"]) == {
        "attn:naive/fwd/seq=2048/softmax/call", "attn:naive/fwd/seq=2048/call", "attn:naive/fwd/seq=2048",
        "attn:triton_flash/fwd/seq=2048", "attn:sdpa_flash/fwd/seq=2048",
    }


def test_every_range_is_named_by_profiler_measure_ranges_but_naive_attentions_own_steps(export):
    """What profiler/measure/ranges.py's docstring says: every range of a capture parses back, except the
    bare step ranges kernels/reference.py opens, in the domain both spell."""
    from kernels.reference import NVTX_DOMAIN, STEPS
    from profiler.measure.ranges import DOMAIN, parse_range

    ranges, _, _ = export
    assert DOMAIN == NVTX_DOMAIN == "attn"
    assert {r for r in ranges.range if parse_range(r) is None} == {f"{DOMAIN}:{step}" for step in STEPS}


def test_kernels_are_attributed_to_implementation_and_step(export):
    _, ops, _ = export
    kernels = ops[ops.kind == "kernel"]
    ours = kernels[kernels.range == "attn:triton_flash/fwd/seq=2048/call"]
    assert set(ours.name) == {"_attn_fwd"} and len(ours) == 228
    assert (ours.grid.str.endswith("x64x1")).all()  # one program column per (batch, head): 4 x 16
    assert (ours.registers > 0).all() and (ours.dynamic_smem + ours.static_smem > 0).all()
    softmax = kernels[kernels.range == "attn:softmax"]
    assert softmax.name.str.contains("softmax", case=False).all()
    qk = kernels[kernels.range == "attn:qk_matmul"]
    assert qk.name.str.contains("nvjet|gemm", regex=True).all()
    flash = kernels[kernels.range == "attn:sdpa_flash/fwd/seq=2048/call"]
    assert flash.name.str.contains("flash", case=False).all() and len(flash) == 201
    # nsys's kernel summary sees the same kernels, instance for instance.
    kern_sum = pd.read_csv(DATA / "stats_cuda_gpu_kern_sum.csv")
    ours_total = kernels.groupby("name").gpu_ns.agg(["sum", "size"])
    for row in kern_sum.itertuples():
        assert ours_total.loc[row.Name, "size"] == row.Instances, row.Name
        assert ours_total.loc[row.Name, "sum"] == row._2, row.Name  # "Total Time (ns)"


def test_capture_join_gives_per_repetition_gpu_time(export):
    ranges, ops, projection = export
    results = pd.read_parquet(DATA / "results.parquet")
    stored = results.pop("nsys_gpu_ms")
    frame = nsys.capture_gpu_times(projection, ranges, results, ops)
    joined = list(frame.nsys_gpu_ms)
    assert joined == pytest.approx(list(stored))
    # Its ranges were named before they held the whole key (attn:triton_flash/fwd/seq=2048): matched by order.
    assert list(frame.index) == list(results.index) and set(frame.nsys_match) == {nsys.MATCH_ORDER}
    # The nsys median per repetition agrees with the CUDA-event median within a few percent; it is
    # a little lower because events also time the gaps around the first and last kernel.
    ratio = pd.Series(joined) / results.time_ms
    assert ((ratio > 0.95) & (ratio <= 1.0)).all(), ratio.tolist()
    # Without the GPU ops, every repetition counts, do_bench's estimate and warm-up calls too: then the join gives
    # the median of the /call range's instances that `nsys stats` prints ("Proj Med" of stats_nvtx_gpu_proj_sum.csv).
    every = nsys.capture_gpu_times(projection, ranges, results)
    proj_med = pd.read_csv(DATA / "stats_nvtx_gpu_proj_sum.csv").set_index("Range")["Proj Med (ns)"]
    for row, ms in zip(results.itertuples(), every.nsys_gpu_ms):
        call = "attn:" + legacy_shape_range(row.impl, SHAPE) + ("" if row.step == "total" else f"/{row.step}") + "/call"
        assert ms == pytest.approx(proj_med[call] / 1e6), call


def test_the_join_keeps_the_repetitions_do_bench_timed(export):
    """do_bench calls a function once, then 5 times after an L2 flush each (timing the 5 with CUDA events: its
    estimate e), then n_warmup = int(warmup / e) times back to back, then n_repeat = int(rep / e) times after a
    flush each, timed (triton.testing.do_bench; this capture's warmup 25 ms and rep 40 ms). For each case of the
    real export, the join's split of its calls into 1 + 5 + warm-up + timed must fit that formula for
    one estimate e, and e must agree with the GPU timeline: the 5 estimate calls' span, from the flush before
    the first to the end of the fifth, over 5 (a little shorter than the events' e, which also time the gaps
    between launches)."""
    import math

    ranges, ops, projection = export
    after_flush = nsys.timed_calls(ranges, ops)
    ops = ops.sort_values("start_ns").reset_index(drop=True)
    proj = projection.set_index("range_id").gpu_proj_ns
    stored = stored_times()  # results.parquet's nsys_gpu_ms, as `nsys ingest` wrote it
    for impl in ("triton_flash", "sdpa_flash", "naive"):
        case = f"attn:{impl}/fwd/seq=2048"
        case_id = ranges.range_id[ranges.range == case].iloc[0]
        calls = ranges[(ranges.parent_id == case_id) & (ranges.range == case + "/call")].sort_values("start_ns")
        timed = nsys._timed(list(calls.range_id), after_flush)
        assert timed == list(calls.range_id)[-len(timed):]
        n_repeat, n_warmup = len(timed), len(calls) - 6 - len(timed)
        # the estimates int() maps to these counts: e in (25 / (n_warmup + 1), 25 / n_warmup], and so for rep
        low, high = max(25 / (n_warmup + 1), 40 / (n_repeat + 1)), min(25 / n_warmup, 40 / n_repeat)
        assert low < high, (case, n_warmup, n_repeat)
        spans = []
        for call in calls.itertuples():
            mine = ops[(ops.global_tid == call.global_tid) & ops.launch_ns.between(call.start_ns, call.end_ns)]
            spans.append((mine.start_ns.min(), mine.end_ns.max()))
        flush = ops[ops.end_ns <= spans[1][0]].iloc[-1]  # the op before the first estimate call: its flush
        gpu_estimate = (spans[5][1] - flush.start_ns) / 5 / 1e6
        assert 0.95 * high < gpu_estimate < high, (case, gpu_estimate, low, high)
        assert proj[timed].median() / 1e6 == pytest.approx(stored[impl, "total"])
        assert not math.isclose(proj[calls.range_id].median() / 1e6, stored[impl, "total"])  # every call's median


def test_timed_repetitions_skip_calls_without_gpu_work_and_fall_back_to_all():
    """_timed on made-up flags (True: after a flush, False: not, absent: launched no GPU work): the calls after a
    flush past the last without; a call without GPU work counts neither way; with no flush at all, or no ops
    (an export read without them), every call."""
    calls = [1, 2, 3, 4, 5, 6, 7]
    flags = {1: True, 2: True, 3: False, 4: False, 5: True, 7: True}  # 6 launched nothing
    assert nsys._timed(calls, flags) == [5, 7]
    assert nsys._timed(calls, {**flags, 7: False}) == calls  # nothing after the last call without a flush
    assert nsys._timed(calls, dict.fromkeys(calls, False)) == calls
    assert nsys._timed(calls, {}) == calls


def test_a_range_is_a_repetition_only_where_its_parent_names_it():
    """A range named like ours but not inside the range it names (a user's own ``.../call`` range inside a
    repetition) is not taken for one: the ops inside it stay with the repetition around it."""
    rows = [(1, -1, "attn:x/fwd/B1/call"), (2, -1, "attn:x/fwd/B1"), (3, 2, "attn:x/fwd/B1/call"),
            (4, 3, "attn:user/step/call"), (5, 2, "attn:x/fwd/B1/call")]
    ranges = pd.DataFrame(rows, columns=["range_id", "parent_id", "range"])
    ops = pd.DataFrame({"global_tid": [1] * 4, "launch_ns": [10, 20, 30, 40], "range_id": [2, 4, 2, 5]})
    assert nsys.timed_calls(ranges, ops) == {3: True, 5: True}  # 1 is no repetition: nothing around it names it


def test_summarize_cli_json(capsys):
    assert main(["nsys", "summarize", str(EXPORT), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"range", "instances", "gpu_proj_ns", "range_ns", "kernels"} <= set(rows[0])
    assert rows[0]["range"] == "attn:triton_flash/fwd/seq=2048" and rows[0]["gpu_proj_ns"] == 4896585259


def test_ingest_writes_tables_and_joins_results(tmp_path, capsys):
    for name in ("meta.json", "results.parquet", "profile.sqlite.xz"):
        (tmp_path / name).write_bytes((DATA / name).read_bytes())
    results = pd.read_parquet(tmp_path / "results.parquet").drop(columns="nsys_gpu_ms")
    results.to_parquet(tmp_path / "results.parquet", index=False)
    assert main(["nsys", "ingest", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "nsys / events" in out
    assert "Note: 7 of 7 rows were matched to their ranges by order" in out  # a capture with the old names
    joined = pd.read_parquet(tmp_path / "results.parquet")
    assert joined.nsys_gpu_ms.notna().all() and (joined.nsys_match == "order").all()
    assert len(pd.read_parquet(tmp_path / "nsys_ranges.parquet")) == 18
    meta = json.loads((tmp_path / "meta.json").read_text())["nsys"]
    assert meta["export"] == "profile.sqlite.xz" and meta["match"] == {"key": 0, "order": 7, "none": 0}


# ------------------------------------------ range names that hold the whole row key (Shape.range_name)
#
# The capture above predates those names, and no GPU capture with them is checked in yet. These tests
# read the same real export with its range names REWRITTEN at test time (renamed_export): the GPU times
# stay the H200's, only the names change, so each row's expected time is a number the old capture
# already measured.


def renamed_export(folder: Path, renames: dict[str, str]) -> Path:
    """A copy of tests/data/nsys-h200-n2048's export in ``folder`` whose range names starting with an
    old case name (``triton_flash/fwd/seq=2048``, and ``.../call`` below it) start with the new one instead."""
    path = folder / "profile.sqlite"
    path.write_bytes(lzma.decompress(EXPORT.read_bytes()))
    with sqlite3.connect(path) as conn:
        for old, new in renames.items():
            for table, column in (("StringIds", "value"), ("NVTX_EVENTS", "text")):
                conn.execute(f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                             f"WHERE {column} = ? OR substr({column}, 1, ?) = ?",
                             (new, len(old) + 1, old, len(old) + 1, old + "/"))
    conn.close()
    return path


SHAPE = Shape(4, 16, 2048, 2048, 64, "fp16")  # the capture's one shape (its meta.json)


def stored_times() -> dict[tuple[str, str], float]:
    results = pd.read_parquet(DATA / "results.parquet")
    return {(r.impl, r.step): r.nsys_gpu_ms for r in results.itertuples()}


def test_ranges_named_by_the_whole_key_join_exactly(tmp_path, capsys):
    renamed_export(tmp_path, {legacy_shape_range(impl, SHAPE): shape_range(impl, SHAPE)
                              for impl in ("naive", "triton_flash", "sdpa_flash")})
    (tmp_path / "meta.json").write_bytes((DATA / "meta.json").read_bytes())
    results = pd.read_parquet(DATA / "results.parquet").drop(columns="nsys_gpu_ms")
    results.to_parquet(tmp_path / "results.parquet", index=False)
    ranges, _, _ = nsys.read_export(tmp_path / "profile.sqlite")
    assert "attn:naive/fwd/B4H16N2048D64-fp16/softmax/call" in set(ranges.range)
    assert not any("seq=" in r for r in ranges.range)

    assert main(["nsys", "ingest", str(tmp_path)]) == 0
    assert "matched to their ranges by order" not in capsys.readouterr().out
    joined = pd.read_parquet(tmp_path / "results.parquet")
    assert (joined.nsys_match == "key").all()
    assert {(r.impl, r.step): r.nsys_gpu_ms for r in joined.itertuples()} == pytest.approx(stored_times())
    assert json.loads((tmp_path / "meta.json").read_text())["nsys"]["match"] == {"key": 7, "order": 0, "none": 0}


def two_triton_rows_of_different_heads() -> pd.DataFrame:
    """Two triton_flash total rows at N 2048, H8 then H16: equal (impl, N), and in the reverse of the order
    their ranges come in the export (the H16 case ran first)."""
    results = pd.read_parquet(DATA / "results.parquet").drop(columns="nsys_gpu_ms")
    triton = results[results.impl == "triton_flash"]
    return pd.concat([triton.assign(heads=8, kv_heads=8), triton], ignore_index=True)


def test_join_on_the_key_tells_rows_of_equal_impl_and_length_apart_by_heads(tmp_path):
    """The first triton_flash case of the export becomes B4 H16, the sdpa_flash case after it triton_flash
    at B4 H8: two ranges of one implementation and length that only the heads tell apart."""
    h8 = replace(SHAPE, heads=8, kv_heads=8)
    path = renamed_export(tmp_path, {legacy_shape_range("triton_flash", SHAPE): shape_range("triton_flash", SHAPE),
                                     legacy_shape_range("sdpa_flash", SHAPE): shape_range("triton_flash", h8)})
    ranges, ops, projection = nsys.read_export(path)
    assert {"attn:triton_flash/fwd/B4H16N2048D64-fp16", "attn:triton_flash/fwd/B4H8N2048D64-fp16"} <= set(ranges.range)
    results = two_triton_rows_of_different_heads()
    joined = nsys.capture_gpu_times(projection, ranges, results, ops)
    times = stored_times()
    assert list(results.heads) == [8, 16] and list(joined.nsys_match) == ["key", "key"]
    assert list(joined.nsys_gpu_ms) == pytest.approx([times[("sdpa_flash", "total")], times[("triton_flash", "total")]])


def test_names_without_the_key_fall_back_to_order_and_say_so(tmp_path):
    """The same two cases named as captures named them before (both attn:triton_flash/fwd/seq=2048): only the
    order tells them apart, and rows listed out of run order get each other's times; nsys_match says "order"."""
    path = renamed_export(tmp_path, {legacy_shape_range("sdpa_flash", SHAPE): legacy_shape_range("triton_flash",
                                                                                                  SHAPE)})
    ranges, ops, projection = nsys.read_export(path)
    joined = nsys.capture_gpu_times(projection, ranges, two_triton_rows_of_different_heads(), ops)
    times = stored_times()
    assert list(joined.nsys_match) == ["order", "order"]
    assert list(joined.nsys_gpu_ms) == pytest.approx([times[("triton_flash", "total")], times[("sdpa_flash", "total")]])


def test_rows_without_a_range_are_marked_none(export):
    ranges, _, projection = export
    results = pd.read_parquet(DATA / "results.parquet").drop(columns="nsys_gpu_ms")
    results = pd.concat([results, results.iloc[[5]].assign(impl="sdpa_cudnn")], ignore_index=True)
    joined = nsys.capture_gpu_times(projection, ranges, results)
    assert joined.nsys_match.iloc[-1] == "none" and pd.isna(joined.nsys_gpu_ms.iloc[-1])
    assert (joined.nsys_match.iloc[:-1] == "order").all()


# ------------------------------------------------------------------------------------- bad input


def test_not_an_export(tmp_path, capsys):
    bogus = tmp_path / "x.sqlite"
    bogus.write_text("hello")
    with pytest.raises(nsys.NsysExportError, match="is not an Nsight Systems SQLite export: file is not a database"):
        nsys.read_export(bogus)
    assert main(["nsys", "summarize", str(bogus)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an Nsight Systems SQLite export" in err
    with pytest.raises(nsys.NsysExportError, match="does not exist"):
        nsys.read_export(tmp_path / "missing.sqlite")


def test_missing_tables_and_columns_are_named(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    with pytest.raises(nsys.NsysExportError, match=r"missing table\(s\) NVTX_EVENTS"):
        nsys.read_export(other)
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as conn:
        conn.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
        conn.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT)")
    with pytest.raises(nsys.NsysExportError, match=r"NVTX_EVENTS lacks column\(s\) textId, domainId, globalTid"):
        nsys.read_export(old)


def test_export_without_ranges_gives_an_empty_table(tmp_path, capsys):
    empty = tmp_path / "empty.sqlite"
    with sqlite3.connect(empty) as conn:
        conn.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
        conn.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, "
                     "textId INTEGER, domainId INTEGER, globalTid INTEGER)")
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER, "
                     "correlationId INTEGER)")
    ranges, ops, projection = nsys.read_export(empty)
    assert ranges.empty and ops.empty and nsys.summarize(projection).empty
    assert main(["nsys", "summarize", str(empty)]) == 0
    assert "no NVTX ranges in this export" in capsys.readouterr().out
    assert main(["nsys", "summarize", str(empty), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_profile_script_names_where_it_looked_when_nsys_is_missing(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "nsys_profile.sh"), "--seq", "64"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "Nsight Systems (nsys) not found; looked in: PATH /opt/nvidia/nsight-systems/*/bin/nsys" in out.stderr
    assert "Set NSYS=/path/to/nsys." in out.stderr
    bad = subprocess.run(["bash", str(ROOT / "scripts" / "nsys_profile.sh"), "--seq", "64"], cwd=tmp_path,
                         env={**env, "NSYS": "/nowhere/nsys"}, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "$NSYS=/nowhere/nsys" in bad.stderr


KEYJOIN = ROOT / "reports" / "nsys-keyjoin"  # an H100 run with the whole-key range names (its meta.json)


def test_a_real_capture_with_whole_key_ranges_joins_every_row_by_key(tmp_path, capsys):
    """`scripts/nsys_profile.sh --seq 1024 --impl naive,triton_flash,sdpa_flash --out reports/nsys-keyjoin` on an
    H100: ingested again from its export, every row joins its own range by name, with the times stored, and
    the projection agrees with `nsys stats` of the same export."""
    for name in ("meta.json", "results.parquet", "profile.sqlite.xz"):
        (tmp_path / name).write_bytes((KEYJOIN / name).read_bytes())
    stored = pd.read_parquet(KEYJOIN / "results.parquet")
    stored.drop(columns=["nsys_gpu_ms", "nsys_idle_ms", "nsys_match"]).to_parquet(tmp_path / "results.parquet",
                                                                                  index=False)
    assert main(["nsys", "ingest", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "matched to their ranges by order" not in out and "idle µs" in out
    joined = pd.read_parquet(tmp_path / "results.parquet")
    assert len(joined) == 7 and (joined.nsys_match == "key").all()
    assert list(joined.nsys_gpu_ms) == pytest.approx(list(stored.nsys_gpu_ms))
    assert list(joined.nsys_idle_ms) == pytest.approx(list(stored.nsys_idle_ms))
    # A call of one kernel has no gap inside; naive attention's calls launch a kernel a step, with gaps between them
    single = joined[joined.impl.isin(["triton_flash", "sdpa_flash"])]
    assert len(single) == 2 and (single.nsys_idle_ms == 0).all()
    naive = joined[(joined.impl == "naive") & (joined.step == "total")].iloc[0]
    assert 0 < naive.nsys_idle_ms < 0.02 * naive.nsys_gpu_ms
    ratio = joined.nsys_gpu_ms / joined.time_ms  # CUDA events also time the gaps around the kernels
    assert ((ratio > 0.95) & (ratio <= 1.0)).all(), ratio.tolist()
    _, _, projection = nsys.read_export(tmp_path / "profile.sqlite.xz")
    ours = nsys.summarize(projection).set_index("range")
    theirs = pd.read_csv(KEYJOIN / "stats_nvtx_gpu_proj_sum.csv").set_index("Range")
    assert set(ours.index) == set(theirs.index)
    assert all(ours.loc[n, "gpu_proj_ns"] == r["Total Proj Time (ns)"] for n, r in theirs.iterrows())
    assert "attn:triton_flash/fwd/B4H32N1024D64-fp16/call" in set(ours.index)


def test_a_case_timed_in_rounds_joins_every_rounds_calls_and_its_steps_in_the_first():
    """--rounds: a case's range opens once a round, all of one name; the naive steps are timed inside the first. The
    total's nsys_gpu_ms is the median of every round's calls, each step's from inside that first range (nested ranges
    laid out as measure_cases opens them, with GPU times made up here)."""
    from profiler.measure.ranges import call_range, qualified, step_range

    case = shape_range("naive", SHAPE)
    rows, proj, idle = [], {}, {}

    def add(name, parent, depth, ns=0, gap=0):
        rid = len(rows) + 1
        rows.append({"range_id": rid, "parent_id": parent, "range": qualified(name), "depth": depth,
                     "start_ns": rid * 1000})
        proj[rid], idle[rid] = ns, gap
        return rid

    first = add(case, None, 0)
    for ns, gap in ((10_000, 0), (12_000, 1_000), (14_000, 0)):
        add(call_range(case), first, 1, ns, gap)
    softmax = add(step_range(case, "softmax"), first, 1)
    for ns, gap in ((3_000, 0), (5_000, 2_000)):
        add(call_range(step_range(case, "softmax")), softmax, 2, ns, gap)
    for calls in (((20_000, 3_000), (22_000, 0)), ((30_000, 5_000),)):  # rounds 2 and 3, later and slower
        later = add(case, None, 0)
        for ns, gap in calls:
            add(call_range(case), later, 1, ns, gap)
    ranges = pd.DataFrame(rows)
    projection = pd.DataFrame({"range_id": list(proj), "gpu_proj_ns": list(proj.values()),
                               "gpu_busy_ns": [proj[rid] - idle[rid] for rid in proj]})
    key = {"mode": "fwd", "batch": 4, "heads": 16, "kv_heads": 16, "seq_q": 2048, "seq_kv": 2048, "head_dim": 64,
           "dtype": "fp16", "causal": False, "impl": "naive"}
    results = pd.DataFrame([{**key, "step": "total"}, {**key, "step": "softmax"}])
    joined = nsys.capture_gpu_times(projection, ranges, results)
    assert list(joined.nsys_match) == ["key", "key"]
    assert list(joined.nsys_gpu_ms) == pytest.approx([0.017, 0.004])  # medians of 10,12,14,20,22,30 µs and 3,5 µs
    assert list(joined.nsys_idle_ms) == pytest.approx([0.0005, 0.001])  # of 0,1,0,3,0,5 µs idle and 0,2 µs
