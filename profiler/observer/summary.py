"""What an observed run comes to, in words and rows: shared by ``observe``'s printout
(profiler.cli.observe), the dashboard's Observed tab and the HTML report (profiler.views.observed).

Everything here reads a capture's stored rows and meta.json's ``observed`` dict (profiler.observer.run
writes both); nothing imports torch or plotly.
"""

from __future__ import annotations

import pandas as pd

from attention_core.shape import Shape

TOP = 12  # rows of the top table, by total time


def observed_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of a real run's calls (``source`` observed), whatever their status."""
    return frame[frame["source"] == "observed"] if "source" in frame else frame.iloc[:0]


def rank_sites(frame: pd.DataFrame) -> pd.DataFrame:
    """A run observed over several ranks (torchrun, profiler.observer.ranks) with each row's site named
    with its rank ("rank 1 · model.layers.0.self_attn"), so every table and chart that groups or draws
    by site keeps the ranks apart; other frames as they are."""
    if "rank" not in frame or not frame["rank"].notna().any():
        return frame
    frame = frame.copy()
    ranked = frame["rank"].notna()
    names = "rank " + frame.loc[ranked, "rank"].astype(int).astype(str)
    sites = frame.loc[ranked, "site"].fillna("").astype(str)
    frame.loc[ranked, "site"] = names.where(sites == "", names + " · " + sites)
    return frame


def share_line(s: dict) -> str:
    """Attention's share of the run: of the GPU's busy time when the torch trace measured it, else of
    the wall time; with its forward and backward parts."""
    if s.get("attention_ms") is None:  # a run killed before its end keeps the rows of its last flush only
        return "The run did not finish: its rows are those written up to its last flush, and no share was recorded"
    untimed = s.get("compiled_calls_untimed") or 0
    if untimed and untimed >= s.get("calls", 0):
        return f"Attention's time was not measured: its {untimed} calls ran inside compiled graphs (see below)"
    parts = f"(forward {s['attention_fwd_ms']:.1f} ms, backward {s['attention_bwd_ms']:.1f} ms)"
    ranks = ""
    if s.get("world"):  # times summed over the ranks, shares of their summed wall and busy times
        ranks = "the ranks' summed "
        parts += f", summed over {s['world']} ranks"
        if s.get("ranks_missing"):
            parts += f" (ranks {', '.join(map(str, s['ranks_missing']))} sent nothing: only rows they wrote to a " \
                     "shared folder are counted)"
    if s.get("gpu_busy_ms"):
        return (f"GPU busy {s['gpu_busy_ms']:.1f} ms ({s['gpu_busy_share_of_wall']:.0%} of {ranks}wall time); "
                f"attention {s['attention_ms']:.1f} ms = {s['attention_share_of_gpu']:.1%} of {ranks}GPU busy time "
                f"{parts}")
    return f"Attention {s['attention_ms']:.1f} ms = {s['attention_share_of_wall']:.1%} of {ranks}wall time {parts}"


def warning_lines(s: dict) -> list[str]:
    """What the share leaves out: compiled regions, attention kernels outside any observed call, calls
    without kernels in the trace, calls in a dtype the model lacks."""
    lines = []
    if s.get("compiled_frames") and s.get("compiled_graphs_observed") is None:  # a capture from before graphs were read
        lines.append(f"torch.compile compiled {s['compiled_frames']} frame(s) during the run: attention inside "
                     "compiled code runs without Python and is not counted above")
    elif s.get("compiled_frames") and not s.get("compiled_graphs_observed"):
        lines.append(f"torch.compile compiled {s['compiled_frames']} graph(s) during the run; none held attention "
                     "that observe reads (any it could not read is listed below)")
    elif s.get("compiled_graphs_observed"):
        lines.append(f"torch.compile compiled {s['compiled_frames']} graph(s) during the run; the attention calls "
                     f"inside the {s['compiled_graphs_observed']} that hold attention are counted above")
    if s.get("compiled_calls_untimed"):
        lines.append(f"{s['compiled_calls_untimed']} calls inside compiled graphs are counted and costed but not "
                     f"timed: {s.get('compiled_untimed_reason') or 'see the rows of status untimed'}")
    if s.get("unobserved_attention_kernels"):
        lines.append(f"{s['unobserved_attention_kernels']} attention kernels ({s['unobserved_attention_ms']:.1f} ms) "
                     "ran outside any observed call (compiled regions or other APIs): see kernels.parquet")
    if s.get("calls_without_ranges"):
        lines.append(f"{s['calls_without_ranges']} calls had no NVTX range in the Nsight Systems export (untimed)")
    if s.get("times_pending") == "nsys":
        lines.append("the calls' times come from the Nsight Systems export, which observe --trace nsys reads "
                     "after nsys has written it; this capture has none yet")
    if s.get("calls_without_kernels"):
        lines.append(f"{s['calls_without_kernels']} calls had no GPU kernel in the trace (their time counts as 0)")
    for reason, calls in (s.get("unmodelled_calls") or {}).items():
        lines.append(f"{calls} calls of {reason} ran but were not modelled")
    return lines


def run_summary_lines(s: dict) -> list[str]:
    """What the run's summary (meta.json's ``observed``) says, as sentences: the share, then the warnings."""
    window = []
    if s.get("window_ms"):
        window = [f"From the first attention call to the last ({s['window_ms']:.1f} ms) the GPU was busy "
                  f"{s['gpu_busy_share_of_window']:.0%} of the time"]
    return [share_line(s), *window, *warning_lines(s)]


def shape_label(row) -> str:
    """The row's shape as Shape.label writes it, with the range of key lengths a decode bucket groups
    (profiler.observer.recorder.kv_bucket: seq_kv is their mean)."""
    label = Shape.from_row(row).label
    low, high = row["seq_kv_min"], row["seq_kv_max"]
    if low == low and high == high and low != high:  # NaN != NaN: rows without a range
        label += f" (Nkv {int(low)}-{int(high)})"
    return label


def top_rows(frame: pd.DataFrame, n: int = TOP) -> pd.DataFrame:
    """The ``n`` observed rows with the most total time, with ``label`` (:func:`shape_label`) and
    ``of_roof``: the fraction of the datasheet roof, else of the measured one (a CPU has no datasheet)."""
    rows = observed_rows(frame).sort_values("total_ms", ascending=False, kind="stable").head(n).copy()
    rows["label"] = [shape_label(r) for _, r in rows.iterrows()]
    rows["of_roof"] = rows["roof_fraction"].where(rows["roof_fraction"].notna(), rows["roof_fraction_measured"])
    return rows


def savings_sentence(whole: pd.DataFrame) -> str | None:
    """'Attention is 41% of GPU busy time; triton_flash would make the run 1.12x faster': the
    implementation that saves the most, from the whole-run frame of profiler.observer.replay.savings;
    None when nothing was replayed."""
    if whole is None or not len(whole):
        return None
    best = whole.sort_values("saved_ms", ascending=False, kind="stable").iloc[0]
    speedup, share = best["speedup"], best["attention_share"]
    if share != share:  # NaN: the run's time was not recorded (it did not finish)
        return f"{best['impl']} would save {best['saved_ms']:.1f} ms of attention (the run's time was not recorded)"
    if speedup != speedup:  # NaN: the savings reach the whole basis
        outcome = "would save more than the run's measured time (see the table)"
    else:
        # A slowdown as a factor above 1 (1.25x slower, not 0.80x slower).
        outcome = (f"would make the run {speedup:.2f}x faster" if speedup >= 1 else
                   f"would make the run {1 / speedup:.2f}x slower")
    other = int(best.get("calls_other_layout", 0) or 0)
    layout_note = (f" ({other} of the {int(best['calls_replayed'])} replayed calls were replayed in another "
                   "memory layout than the run's)") if other else ""
    # The share is rounded as share_line rounds it.
    return f"Attention is {share:.1%} of {best['basis']} time; {best['impl']} {outcome}{layout_note}"
