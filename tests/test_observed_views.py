"""An observed run in the views: the dashboard's Observed tab (Streamlit AppTest), every other tab on such a
capture, the report's "Observed run" section, and remodel leaving observed rows alone.

The capture is real: a tiny Hugging Face Llama (2 layers) observed on the CPU through a generate loop
(prefill and 4 decode steps) and a training step, then replayed through sdpa_math. What each view must
show is worked out here from the capture's own rows and meta.json.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from streamlit.testing.v1 import AppTest

import profiler
from attention_core.shape import Shape
from profiler.model.roofs import Roofs
from profiler.observer.replay import replay
from profiler.observer.summary import savings_sentence
from profiler.registry import get_impl
from profiler.remodel import remodel_capture
from profiler.store import Capture
from profiler.views import observed, plots, report
from profiler.views.rooflines import SIZE_ROOF_NAME

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "dashboards" / "roofline.py")
SITES = ["model.layers.0.self_attn", "model.layers.1.self_attn"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    """reports/llama: the observed run with its sdpa_math replay; reports/plain: a capture of the usual kind."""
    transformers = pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("reports")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      intermediate_size=128, vocab_size=256, num_hidden_layers=2,
                                      attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 256, (2, 13))
    with profiler.observe(out=root / "llama"):
        with torch.no_grad():
            model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False, eos_token_id=None,
                           pad_token_id=0)
        model.train()
        model(ids, labels=ids).loss.backward()
    meta = Capture(root / "llama").meta()
    replay(root / "llama", [get_impl("sdpa_math")], "cpu", Roofs.from_meta(meta), rep_ms=2)
    shutil.copytree(ROOT / "reports" / "gqa-prefill-h100", root / "plain", ignore=shutil.ignore_patterns("traces"))
    return root


@pytest.fixture(scope="module")
def run(reports) -> tuple[dict, pd.DataFrame]:
    return Capture(reports / "llama").load()


def _app(reports: Path, monkeypatch, *args: str) -> AppTest:
    """The app as `streamlit run dashboards/roofline.py -- --reports REPORTS ARGS` runs it (AppTest runs the
    script in this process, reading this process's argv at every run: it stays patched for the test)."""
    monkeypatch.setattr(sys, "argv", [APP, "--reports", str(reports), *args])
    return AppTest.from_file(APP, default_timeout=120).run()


@pytest.fixture(scope="module")
def app(reports) -> AppTest:
    with pytest.MonkeyPatch.context() as patch:
        yield _app(reports, patch, "--select", "llama")


def _tab(at: AppTest, label: str):
    return next(t for t in at.tabs if t.label == label)


def _texts(block, *kinds: str) -> list[str]:
    return [e.value for kind in kinds for e in block.get(kind)]


def _values(array) -> list[float]:
    """A plotly array as the chart's JSON holds it: a list, or numpy's base64 form (plotly sends arrays so)."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def _chart(tab, title: str) -> dict:
    """The tab's plotly chart whose title starts with ``title``, as JSON."""
    specs = [json.loads(c.proto.spec) for c in tab.get("plotly_chart")]
    return next(s for s in specs if str(s["layout"]["title"]["text"]).startswith(title))


def _every_filter_value(at: AppTest) -> None:
    for m in at.multiselect:
        if m.label != "Captures":
            m.set_value(m.options)
    at.run()


def _expected_saving(meta: dict, frame: pd.DataFrame) -> float:
    """The run's speedup with sdpa_math: each observed row's calls charged at sdpa_math's replayed time at
    its shape, against the wall time (a CPU run has no GPU busy time)."""
    replayed = frame[frame.source == "replay"].set_index(list(Shape.KEY)).time_ms
    rows = frame[frame.source == "observed"]
    saved = sum(r.total_ms - r.calls * replayed[tuple(r[k] for k in Shape.KEY)] for _, r in rows.iterrows())
    wall_ms = meta["observed"]["wall_s"] * 1e3
    return wall_ms / (wall_ms - saved)


# ------------------------------------------------------------------------------------------ the capture


def test_the_capture_holds_the_run_and_its_replay(run):
    meta, frame = run
    rows = frame[frame.source == "observed"]
    # Per layer: generate's prefill and the training forward (one shape: 2 calls), 4 decode steps, 1 backward.
    assert rows.groupby(["site", "mode"]).calls.sum().to_dict() == {(s, m): n for s in SITES
                                                                     for m, n in (("bwd", 1), ("fwd", 6))}
    assert meta["observed"]["attention_ms"] == pytest.approx(rows.total_ms.sum())
    assert set(frame[frame.source == "replay"].impl) == {"sdpa_math"}


# ------------------------------------------------------------------------------------------ the dashboard


def test_the_observed_tab_says_attentions_share_of_the_wall_time(app, run):
    meta, frame = run
    s = meta["observed"]
    share = frame[frame.source == "observed"].total_ms.sum() / (s["wall_s"] * 1e3)  # a CPU run: wall time
    tab = _tab(app, "Observed")
    assert not app.exception
    texts = _texts(tab, "markdown")
    assert (f"**Attention {s['attention_ms']:.1f} ms = {share:.1%} of wall time (forward {s['attention_fwd_ms']:.1f} "
            f"ms, backward {s['attention_bwd_ms']:.1f} ms)**") in texts
    assert s["attention_bwd_ms"] > 0  # the training step's backward was timed


def test_the_observed_tab_tables_its_sites_and_calls(app, run):
    _, frame = run
    rows = frame[frame.source == "observed"]
    top = _tab(app, "Observed").get("dataframe")[0].value
    assert len(top) == len(rows) == 12  # 6 rows per layer: all of them, at most TOP
    assert sorted(top.site.unique()) == SITES and set(top.api) == {"sdpa"}
    assert top.groupby(["site", "mode"]).calls.sum().to_dict() == rows.groupby(["site", "mode"]).calls.sum().to_dict()
    assert list(top["total ms"]) == sorted(rows.total_ms, reverse=True)
    prefill = top[top["shape"] == "B2 H4/2 N=13 D16 fp32 causal"]
    assert sorted(prefill.calls) == [1, 1, 2, 2] and set(prefill["mask"]) == {"causal"}  # 2 fwd and 1 bwd per layer
    decode = top[top["shape"].str.contains("Nq=1")]
    assert set(decode["mask"]) == {"none"} and decode.calls.sum() == 8


def test_the_by_site_chart_stacks_forward_and_backward(app, run):
    _, frame = run
    rows = frame[frame.source == "observed"]
    chart = _chart(_tab(app, "Observed"), "Attention time by call site")
    bars = {t["name"]: t for t in chart["data"]}
    assert set(bars) == {"forward", "backward"} and chart["layout"]["barmode"] == "stack"
    for name, mode in (("forward", "fwd"), ("backward", "bwd")):
        expected = rows[rows["mode"] == mode].groupby("site").total_ms.sum()
        assert list(bars[name]["y"]) == SITES
        assert _values(bars[name]["x"]) == pytest.approx(list(expected[SITES]))


def test_observed_points_are_stars_beside_their_replays_on_the_roofline(app):
    chart = _chart(_tab(app, "Observed"), "Observed calls and replays")
    traces = {t["name"]: t for t in chart["data"] if t.get("hovertext") and t["name"] != SIZE_ROOF_NAME}
    assert set(traces) == {"sdpa (observed)", "sdpa_math (replay)"}
    assert {s.removesuffix("-open") for s in traces["sdpa (observed)"]["marker"]["symbol"]} == {"star"}
    assert {s.removesuffix("-open") for s in traces["sdpa_math (replay)"]["marker"]["symbol"]} == {"circle"}
    hovers = traces["sdpa (observed)"]["hovertext"]
    assert len(hovers) == 12
    assert sum(f"observed at <b>{SITES[0]}</b>: 2 calls" in h for h in hovers) == 1  # layer 0's prefill fwd
    assert all("replayed at an observed shape" in h for h in traces["sdpa_math (replay)"]["hovertext"])


def test_the_savings_say_how_much_faster_the_run_would_be(app, run):
    meta, frame = run
    speedup = _expected_saving(meta, frame)
    share = frame[frame.source == "observed"].total_ms.sum() / (meta["observed"]["wall_s"] * 1e3)
    tab = _tab(app, "Observed")
    outcome = f"{speedup:.2f}x faster" if speedup >= 1 else f"{1 / speedup:.2f}x slower"
    sentence = f"**Attention is {share:.1%} of wall time; sdpa_math would make the run {outcome}**"
    assert sentence in _texts(tab, "markdown")
    whole = tab.get("dataframe")[1].value
    assert whole.implementation.tolist() == ["sdpa_math"] and whole["calls replayed"].tolist() == ["14/14"]
    assert whole["run speedup"].iloc[0] == pytest.approx(speedup)


def test_every_tab_renders_on_an_observed_capture(reports, monkeypatch):
    at = _app(reports, monkeypatch, "--select", "llama")
    assert not at.exception
    assert [t.label for t in at.tabs][-1] == "Observed"
    _every_filter_value(at)  # both modes, causal and not, prefill and decode, observed and replayed
    assert not at.exception
    titles = [str(json.loads(c.proto.spec)["layout"]["title"]["text"]).split("<br>")[0]
              for c in at.get("plotly_chart")]
    assert sorted(titles) == sorted([
        "Roofline, compulsory bytes: B2 H4/2 D16 fp32 {full,causal} {bwd,fwd}", "Time", "Throughput",
        "Peak memory: measured vs model", "Decode: achieved bandwidth against the DRAM roof",
        "Attention time by call site", "Observed calls and replays (fp32)",
        "Projection onto H200 (model only: points sit on the roof by construction)"])
    # An observed run times no naive: Scaling says so instead of drawing an empty speedup chart.
    assert any(i.startswith("No speedup over naive here") for i in _texts(_tab(at, "Scaling"), "info"))
    # An observed run has no naive steps: the Step breakdown tab says where they are instead.
    assert any(i.startswith("No naive steps in llama") for i in _texts(_tab(at, "Step breakdown"), "info"))
    assert any("Not offered, without a peak for fp32" in i for i in _texts(_tab(at, "What-if"), "caption"))
    next(r for r in at.radio if r.label == "Bytes for intensity").set_value("tile").run()
    assert not at.exception
    # Beside a capture of the usual kind: Compare says they share nothing, Observed shows the run.
    next(m for m in at.multiselect if m.label == "Captures").set_value(["llama", "plain"]).run()
    _every_filter_value(at)
    assert not at.exception
    assert [s.split(":")[0] for s in _texts(_tab(at, "Observed"), "subheader")] == ["llama"]
    compare = _texts(_tab(at, "Compare"), "info")
    assert len(compare) == 1 and compare[0].startswith("llama and plain share no implementation and shape")


def test_an_observed_run_opens_on_every_row_and_names_its_sites(reports, run, monkeypatch):
    """Prefill, decode and backward calls are the run: nothing hidden at first, each row with its site, and
    the two layers' calls at one length two lines, not one line drawn up and down between them."""
    _, frame = run
    at = _app(reports, monkeypatch, "--select", "llama")
    assert not at.exception
    chosen = {m.label: m.value for m in at.multiselect if m.label != "Captures"}
    for label, column in (("causal", "causal"), ("Mode", "mode"), ("Query length", "seq_q"),
                          ("Implementation", "impl")):
        assert sorted(map(str, chosen[label])) == sorted(map(str, frame[column].unique())), label
    table = next(d.value for d in _tab(at, "Roofline").get("dataframe") if "site" in d.value.columns)
    sites = frame.site.fillna("").astype(str)
    assert set(table.site) == set(sites[frame.status == "ok"])  # replays have no site
    assert set(table.site) - {""} == set(SITES) and len(table) == (frame.status == "ok").sum()
    decode = next(d.value for d in _tab(at, "Bandwidth").get("dataframe"))
    assert set(decode.site) - {""} == set(SITES)  # the replays beside them have none
    for trace in _chart(_tab(at, "Scaling"), "Time")["data"]:
        x = _values(trace["x"])
        assert len(x) == len(set(x)), trace["name"]  # one point per length on a line
    assert {t["name"].split(" · ")[1] for t in _chart(_tab(at, "Scaling"), "Time")["data"]} >= set(SITES)
    # The longest row is a decode bucket's (Nq 1, Nkv up to 17): its trips are of its own Nq×Nkv matrix.
    trips = next(t for t in _texts(_tab(at, "Step breakdown"), "markdown") if "trips of the" in t)
    assert "trips of the Nq×Nkv matrix" in trips and "N=17" not in trips


def test_the_report_tables_carry_the_site(reports, run):
    page = report.build_report(reports / "llama")
    families = page[page.index("<h2 id='family-"):]
    assert "<th class='text'>site</th>" in families
    assert all(f"<td class='text'>{site}</td>" in families for site in SITES)


def test_the_trips_table_keeps_a_decode_rows_lengths():
    row = {"batch": 2, "heads": 4, "kv_heads": 2, "seq_q": 1, "seq_kv": 17, "head_dim": 16, "dtype": "fp32",
           "causal": False, "mode": "fwd"}
    shape = plots.trips_shape(row)
    assert (shape.seq_q, shape.seq_kv, shape.mode) == (1, 17, "fwd")
    assert plots.trips_heading(shape) == ("Nq×Nkv matrix", plots.lengths_label(1, 17))
    assert plots.trips_heading(plots.trips_shape(row | {"seq_q": 17})) == ("N×N matrix", "N=17")


def test_a_capture_without_an_observed_run_says_how_to_make_one(reports, monkeypatch):
    at = _app(reports, monkeypatch, "--select", "plain")
    assert not at.exception
    assert _texts(_tab(at, "Observed"), "info") == [
        f"plain holds no observed run: `{observed.HOW_TO}` records the attention calls of a real run (observed "
        "here: llama)."]


# ------------------------------------------------------------------------------------------ the report


def test_the_report_has_an_observed_run_section(reports, run):
    meta, frame = run
    page = report.build_report(reports / "llama")
    start = page.index("<h2 id='observed-run'>Observed run</h2>")
    section = page[start:page.index("<h2 id='family-", start)]
    share = frame[frame.source == "observed"].total_ms.sum() / (meta["observed"]["wall_s"] * 1e3)
    assert f"= {share:.1%} of wall time" in section
    assert all(section.count(f"<td class='text'>{site}</td>") >= 6 for site in SITES)  # top table and savings
    speedup = _expected_saving(meta, frame)
    assert (f"sdpa_math would make the run {speedup:.2f}x faster" if speedup >= 1 else
            f"sdpa_math would make the run {1 / speedup:.2f}x slower") in section
    assert "Attention time by call site" in section and "Observed calls and replays (fp32)" in section
    assert page.index("href='#observed-run'") < page.index("href='#family-")  # first in the contents
    plain = report.build_report(reports / "plain")
    assert "Observed run" not in plain


# ------------------------------------------------------------------------------------------ remodel


def test_remodel_leaves_observed_rows_as_they_are(reports, tmp_path):
    folder = tmp_path / "llama"
    shutil.copytree(reports / "llama", folder)
    capture = Capture(folder)
    stored = capture.results()
    # A replay row whose stored FLOPs the model no longer gives is remodelled; observed rows are not, though
    # their per-call means (decode buckets, the causal half) are no single shape's cost.
    tampered = stored.copy()
    first_replay = tampered.index[tampered.source == "replay"][0]
    tampered.loc[first_replay, "flops"] *= 2
    capture.write_results(tampered)
    _, changed = remodel_capture(folder)
    after = capture.results()
    assert changed.tolist() == [i == first_replay for i in stored.index]
    observed_before = stored[stored.source == "observed"].reset_index(drop=True)
    pd.testing.assert_frame_equal(after[after.source == "observed"].reset_index(drop=True), observed_before)
    assert after.loc[first_replay, "flops"] == stored.loc[first_replay, "flops"]


# ------------------------------------------------------------------------------------------ pure builders


def test_sites_are_drawn_in_model_order_and_trace_ranges_per_site():
    rows = pd.DataFrame({"source": "observed", "status": "ok", "mode": "fwd", "calls": 1.0,
                         "site": ["m.layers.10.attn", "m.layers.9.attn", "m.layers.2.attn"],
                         "total_ms": [1.0, 2.0, 3.0]})
    assert list(observed.site_totals(rows).site) == ["m.layers.2.attn", "m.layers.9.attn", "m.layers.10.attn"]
    kernels = pd.DataFrame({"kernel": ["a", "b", "c"], "start_us": [0.0, 5.0, 9.0], "gpu_us": [1.0, 1.0, 1.0],
                            "range": ["observe/sdpa/fwd/m.layers.0.attn#0", "observe/sdpa/fwd/m.layers.0.attn#7",
                                      "observe/sdpa/bwd/m.layers.0.attn#8"]})
    assert [t.name for t in plots.trace_figure(kernels).data] == ["observe/sdpa/fwd/m.layers.0.attn",
                                                                  "observe/sdpa/bwd/m.layers.0.attn"]


def test_the_sentences_of_a_gpu_run_and_of_a_run_that_did_not_finish():
    gpu = {"observed": {"wall_s": 2.0, "attention_ms": 300.0, "attention_fwd_ms": 100.0, "attention_bwd_ms": 200.0,
                        "gpu_busy_ms": 1200.0, "gpu_busy_share_of_wall": 0.6, "attention_share_of_gpu": 0.25,
                        "compiled_frames": 3, "unobserved_attention_kernels": 40, "unobserved_attention_ms": 12.5}}
    share, warnings = observed.sentences(gpu)
    assert share == ("GPU busy 1200.0 ms (60% of wall time); attention 300.0 ms = 25.0% of GPU busy time (forward "
                     "100.0 ms, backward 200.0 ms)")
    assert [w.split(" ")[:3] for w in warnings] == [["torch.compile", "compiled", "3"], ["40", "attention", "kernels"]]
    killed = {"observed": {"command": "train.py", "trace": "none", "finished": False}}  # its last flush only
    assert observed.sentences(killed)[0].startswith("The run did not finish")
    rows = pd.DataFrame([{"impl": "sdpa_math", "basis": "wall", "attention_share": float("nan"), "saved_ms": 5.0,
                          "speedup": float("nan")}])
    assert savings_sentence(rows) == "sdpa_math would save 5.0 ms of attention (the run's time was not recorded)"


def test_every_shipped_observed_capture_has_one_row_per_observed_key():
    from profiler.store import OBSERVED_KEY

    folders = sorted((ROOT / "reports").glob("observed-*")) + sorted((ROOT / "tests" / "data").glob("observe-*"))
    frames = [Capture(f).results() for f in folders if Capture(f).results_path.exists()]
    observed = [rows for rows in (f[f["source"] == "observed"] for f in frames) if len(rows)]
    assert len(observed) >= 9
    assert not any(rows.duplicated(list(OBSERVED_KEY)).any() for rows in observed)


def test_compare_keeps_each_ranks_and_sites_calls_apart():
    """Two ranks (torchrun) whose layers make calls of one shape: Compare joins each rank's and each site's
    row with its own, never one rank's for both (rows of equal key but another site or rank are kept)."""
    from profiler.observer.summary import rank_sites
    from profiler.views.plots import compare_figure

    _, frame = Capture(Path(__file__).resolve().parents[1] / "reports" / "observed-nanogpt").load()
    calls = frame[(frame["source"] == "observed") & (frame["status"] == "ok")]
    assert calls["site"].nunique() > 1 and calls.duplicated(["impl", "mode", "seq_q"]).any()  # sites share shapes
    ranks = rank_sites(pd.concat([calls.assign(rank=0.0), calls.assign(rank=1.0, time_ms=calls["time_ms"] * 2)]))
    fig, joined = compare_figure(ranks, ranks, "A", "B")
    assert len(joined) == 2 * len(calls) and joined["site"].nunique() == 2 * calls["site"].nunique()
    slow = joined[joined["site"].str.startswith("rank 1 · ")]
    assert (slow["time_ms A"] == slow["time_ms B"]).all() and len(slow) == len(calls)
    assert len(fig.data) == 2 * len(calls)  # a line per implementation, shape family (here fwd or bwd) and site


def test_compare_falls_back_to_shapes_where_the_runs_share_no_site():
    """One run observed on one GPU against the same run under torchrun (sites 'X' and 'rank 0 · X'), or after an
    edit moved the call's line: no site in common, so rows pair by shape as any two captures do."""
    from profiler.observer.summary import rank_sites
    from profiler.views.plots import compare_figure

    _, frame = Capture(Path(__file__).resolve().parents[1] / "reports" / "observed-nanogpt").load()
    calls = frame[(frame["source"] == "observed") & (frame["status"] == "ok")]
    ranked = rank_sites(calls.assign(rank=0.0))
    _, joined = compare_figure(calls, ranked, "one GPU", "torchrun")
    assert len(joined) == 2  # forward and backward: the first layer's row of each shape, as before sites
