"""A self-contained HTML report of one capture, to read offline or attach to an issue: every shape
family of the capture (or a chosen set) with a formatted summary table and the dashboard's charts; first,
for a capture of a real run (``python -m profiler observe``), an "Observed run" section.

The families and a ``--family`` selection come from profiler.views.families (in a capture of more than one
device a family is also one device's, drawn against that device's roofs), the tables' numbers in human units
from profiler.views.formatting, the page's HTML from profiler.views.report_html. The report always says which
families it shows and which it leaves out. The charts come from the dashboard's own builders
(profiler.views.plots and rooflines), so they only ever draw rows with status ``ok``; the tables show
every row, with the status and its message where a case did not run or failed the correctness check.

plotly.js and the figures' template are embedded once and shared by every chart, and charts are drawn as
they scroll into view: a capture of 16 families stays a few MB and opens at once.
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from profiler.model.roofs import Roofs, meta_for_device
from profiler.observer.summary import rank_sites
from profiler.registry import REGISTRY
from profiler.store import Capture, write_bytes_atomic
from profiler.views import observed, plots, rooflines, style
from profiler.views.families import families_of, family_trace, family_validation, select_families
from profiler.views.formatting import (
    OBSERVED_TEXT,
    baseline_ranges,
    baseline_table,
    observed_table,
    summary_table,
    validation_table,
)
from profiler.views.report_html import Charts, anchor, html_table, page, summary_html
from profiler.views.selection import naive_step_rows


def family_figures(meta: dict, rows: pd.DataFrame, kernels: pd.DataFrame | None = None,
                   validation: pd.DataFrame | None = None) -> list[tuple[str, str, go.Figure]]:
    """(section, caption, figure) of one family, as the dashboard's tabs draw them: the roofline for
    compulsory and for tile bytes, the four scaling charts, decode bandwidth when the family has rows with
    fewer queries than keys, naive's step breakdown when it has naive step rows, the kernel timeline
    when ``kernels`` has rows of the family, and Nsight Compute's hierarchical roofline when
    ``validation`` does. Only rows with status ok are drawn (the builders filter so)."""
    first = rows.iloc[0]
    dtype, exp2 = first["dtype"], rooflines.exp_rate(meta)
    out: list[tuple[str, str, go.Figure]] = []
    for kind in ("compulsory", "tile"):
        roofs = rooflines.roofs_from_meta(meta, dtype, kind)
        missing = ("No L2 bandwidth measurement in this capture (`python -m profiler ceilings` measures one): tile "
                   "intensities are drawn without a roof." if kind == "tile" else f"No {dtype} roof in the metadata.")
        notes = [f"{roofs[0].label}: ridge {roofs[0].ridge:.0f} FLOP/B"] if roofs else [missing]
        if kind == "tile" and rooflines.untiled_note(rows):
            notes.append(rooflines.untiled_note(rows))
        if exp2 is not None and kind == "compulsory":
            notes.append(f"exp ceiling: softmax's exponentials at {exp2 / 1e12:.2f}·10¹² exp2/s cap a fused kernel "
                         "that does not overlap them with its matmuls; a point above it overlaps them")
        size_note = rooflines.size_roof_note(meta) if kind == "compulsory" else ""
        if size_note:
            notes.append(size_note)
        out.append(("Roofline", " · ".join(notes), rooflines.roofline_figure(rows, roofs, kind, exp2_per_s=exp2,
                                                                             device_type=meta.get("device_type"))))
    issued, left_out = rooflines.issued_work(rows, meta)
    if not issued.empty:
        roofs = rooflines.roofs_from_meta(meta, dtype)
        notes = ["the tensor FLOPs each kernel issues (whole tiles on the causal diagonal and at ragged ends, decode "
                 "rows padded to a tile, unfused attention's full scores) over the same compulsory bytes: a point "
                 "rises and moves right by that factor (hover)", *([left_out] if left_out else [])]
        title = f"{rooflines.ISSUED_TITLE}: {style.families_title(rows)}"
        out.append(("Roofline", " · ".join(notes), rooflines.roofline_figure(
            issued, roofs, "compulsory", title=title, exp2_per_s=exp2, device_type=meta.get("device_type"))))
    memory = plots.memory_caption(rows[rows.step == "total"])
    for key, fig in plots.scaling_figures(rows).items():
        if key != "speedup" or fig.data:  # a family without naive has no speedup to draw
            out.append(("Scaling", memory if key == "memory" else "", fig))
    if (rows.seq_q < rows.seq_kv).any():
        out.append(("Bandwidth", "GB/s counts the model's compulsory bytes (Q, K, V read once, O and the logsumexp "
                                 "written once). Above the copy line is possible: a read-mostly stream outruns a copy. "
                                 "A grey dotted line, where the capture measured a copy curve, is what a copy of the "
                                 "step's own bytes reached in the same run.",
                    plots.bandwidth_figure(rows, meta)))
    if not naive_step_rows(rows).empty:
        out.append(("Step breakdown", "", plots.step_breakdown_figure(rows, device_type=meta.get("device_type"))))
    if kernels is not None and not kernels.empty:
        traced, caption = family_trace(kernels, rows)
        if not traced.empty:
            out.append(("Trace", caption, plots.trace_figure(traced)))
    if validation is not None and not validation.empty:
        out.append(("Validation", "Each kernel twice, at its DRAM and at its L2 intensity, both measured by Nsight "
                                  "Compute (the legend says which marker is which).",
                    plots.hierarchical_roofline_figure(validation, meta, dtype)))
    return out


def _rows_note(rows: pd.DataFrame) -> str:
    totals = rows[rows.step == "total"]
    statuses = totals.status.value_counts()
    failed = ", ".join(f"{n} {s}" for s, n in statuses.items() if s != "ok")
    steps = len(rows) - len(totals)
    lengths = sorted(set(totals.seq_kv))
    span = f"{lengths[0]:,}" if len(lengths) == 1 else f"{lengths[0]:,} to {lengths[-1]:,}"
    queries = sorted(set(totals.seq_q))
    decode = (totals.seq_q < totals.seq_kv).any()
    batches = sorted(set(totals.batch), reverse=True)
    sweep = f" · batch {', '.join(map(str, batches))} as N grows" if len(batches) > 1 else ""
    return (f"{len(rows):,} rows: {len(totals):,} whole-attention" + (f" ({failed})" if failed else "")
            + (f", {steps:,} naive step rows" if steps else "") + f" · key length {span}" + sweep
            + (f" · query length {', '.join(f'{q:,}' for q in queries)}" if decode else "")
            + f" · {totals.impl.nunique()} implementations")


def _shows_sentence(shown: list[str], families: dict[str, pd.DataFrame], family) -> str:
    total_rows = sum(len(r) for r in families.values())
    shown_rows = sum(len(families[label]) for label in shown)
    left = [label for label in families if label not in shown]
    chosen = "" if family is None else " chosen by family " + ", ".join(
        repr(f) for f in ([family] if isinstance(family, str) else family))
    listed = "every family of the capture" if not left else ", ".join(shown)
    return (f"Shows {len(shown)} of {len(families)} families ({shown_rows:,} of {total_rows:,} rows){chosen}: "
            f"{listed}; left out: {', '.join(left) if left else 'none'}.")


def _family_section(label: str, rows: pd.DataFrame, meta: dict, kernels: pd.DataFrame | None,
                    validation: pd.DataFrame | None, charts: Charts) -> list[str]:
    """The HTML of one family: its heading, what its rows hold, the summary table, then each figure of
    :func:`family_figures` under the dashboard tab's name (the scaling charts two a row), the model's HBM
    trips beside the step breakdown and the Nsight Compute table after the validation roofline."""
    e = html.escape
    first = rows.iloc[0]
    measured = Roofs.from_meta(meta).measured
    copy_gbps = None if measured is None else measured.copy_gbps
    points = rooflines.roofline_points(rows, rooflines.roofs_from_meta(meta, first["dtype"]), "compulsory",
                                       rooflines.exp_rate(meta))
    parts = [f"<h2 id='{anchor(label)}'>{e(label)}</h2>", f"<p class='caption'>{e(_rows_note(rows))}</p>",
             "<h3>Summary</h3>", summary_html(summary_table(rows, points, copy_gbps))]
    baseline = meta.get("baseline")
    against = baseline_table(rows, baseline) if baseline else None
    if against is not None:
        parts += [f"<h3>Against {e(baseline)}</h3>",
                  f"<p class='caption'>Each peer's time over {e(baseline)}'s at the same shape: above 1.00x "
                  f"{e(baseline)} is the faster; '-' where either did not run. {e(_names(rows))}</p>",
                  html_table(against, set(against.columns), compact=True)]
    checked = family_validation(validation, rows)
    section = None
    for name, caption, fig in family_figures(meta, rows, kernels, checked):
        if name != section:
            parts += ["</div>"] if section == "Scaling" else []
            parts.append(f"<h3>{e(name)}</h3>")
            parts += ["<div class='grid'>"] if name == "Scaling" else []
            section = name
        # long legend entries (decode's per-query-length lines) leave a half-width plot no room
        wide = name != "Scaling" or max((len(t.name or "") for t in fig.data), default=0) > 28
        parts.append(charts.div(fig, wide=wide))
        if caption:
            parts.append(f"<p class='caption'>{e(caption)}</p>")
        if name == "Step breakdown":
            # The longest row, at the batch measured there (a token sweep's smallest), with its own lengths.
            shape = plots.trips_shape(rows.loc[rows.seq_kv.idxmax()])
            trips = plots.hbm_trips_table(shape, device_type=meta.get("device_type"))
            matrix, lengths = plots.trips_heading(shape, thousands=True)
            parts += [f"<p><b>{style.memory_name(meta.get('device_type'))} trips of the {matrix}, naive vs "
                      f"fused</b> <span class='caption'>(model, {lengths})</span></p>",
                      html_table(trips, set(trips.columns) - {"step"})]
        if name == "Validation":
            table = validation_table(checked)
            parts += [f"<p><b>Nsight Compute counters vs the cost model</b> <span class='caption'>({len(checked)} "
                      "profiled rows)</span></p>",
                      html_table(table, set(table.columns) - {"implementation", "step", "dtype", "causal"})]
    parts += ["</div>"] if section == "Scaling" else []
    return parts


OBSERVED_ANCHOR = "observed-run"
def _observed_section(meta: dict, frame: pd.DataFrame, charts: Charts) -> list[str]:
    """The "Observed run" section of a capture made by ``observe``: attention's share of the run and
    the warnings, the time by call site, the rows with the most time, the observed calls on the
    roofline beside their replays, and what each replayed implementation would save (as the
    dashboard's Observed tab; profiler.views.observed)."""
    e = html.escape
    share, warnings = observed.sentences(meta)
    command = observed.summary_of(meta).get("command") or meta.get("command")
    parts = [f"<h2 id='{OBSERVED_ANCHOR}'>Observed run</h2>",
             *([f"<p class='caption'>{e(str(command))}</p>"] if command else []),
             f"<p><b>{e(share)}</b></p>", *(f"<p class='warn'>{e(line)}</p>" for line in warnings),
             charts.div(observed.site_figure(frame)),
             f"<h3>The {observed.TOP} rows with the most time</h3>",
             html_table(observed_table(observed.top_table(frame)), set(observed.TOP_COLUMNS.values()) - OBSERVED_TEXT)]
    fig, note = observed.roofline(frame, meta)
    parts += ["<h3>Roofline</h3>", charts.div(fig), f"<p class='caption'>{e(note)}</p>"]
    whole, per_row, sentence = observed.savings_tables(frame, meta)
    parts.append("<h3>What a replayed implementation would save</h3>")
    if sentence is None:
        return parts + ["<p class='caption'>No replay in this capture: <code>python -m profiler observe --replay IMPLS"
                        "</code> re-runs the observed shapes through registered implementations.</p>"]
    return parts + [f"<p><b>{e(sentence)}</b></p>",
                    html_table(observed_table(whole), set(whole.columns) - OBSERVED_TEXT),
                    "<details><summary>Per site, shape and mode</summary>"
                    + html_table(observed_table(per_row), set(per_row.columns) - OBSERVED_TEXT) + "</details>"]


# What a row's ``path`` names (kernels.flash_fwd.forward_path, flash_bwd.backward_path): the kernels a case ran
PATHS = {"gluon-ws": "the warp-specialized Gluon kernels for sm_90", "tiled": "the portable Triton kernels",
         "split-kv": "the split-KV decode kernels",
         "split-tail": "the forward's last wave of A query tiles cut into S chunks of keys each (AxS), merged after"}


def _names(rows: pd.DataFrame) -> str:
    """What each implementation of ``rows`` is, from its registry entry: 'triton_flash: FlashAttention-2 (ours)
    ...; sdpa_cudnn: PyTorch SDPA, cuDNN backend', for a reader who does not know the names; where its rows
    record kernel paths, which ones and on how many rows ('ran gluon-ws on 40 of 40 rows'), and what they name."""
    names, seen = [], set()
    for name in sorted(set(rows.impl), key=style.impl_rank):
        text = f"{name}: {REGISTRY[name].description}" if name in REGISTRY else name
        paths = (rows.loc[rows.impl == name, "path"] if "path" in rows else pd.Series([], dtype=object))
        paths = paths.fillna("").astype(str)
        ran = paths[paths != ""].value_counts()
        if len(ran):
            text += " (ran " + ", ".join(f"{path} on {count} of {len(paths)} rows" for path, count in ran.items()) + ")"
            seen |= {word for path in ran.index for word in PATHS if word in path}
        names.append(text)
    glossary = "; ".join(f"{word}: {PATHS[word]}" for word in PATHS if word in seen)
    return "; ".join(names) + "." + (f" Paths: {glossary}." if glossary else "")


def _code_facts(meta: dict) -> list[str]:
    """What code measured the capture, for the page's header: the kernels by content (``kernels_sha256``, which
    names them where the tree was copied with a stale .git, as onto a lent GPU machine) and the git revision.
    A ``-dirty`` revision is only the base of a modified tree, so it says so rather than pass for the code."""
    facts = [f"kernels sha256 {meta['kernels_sha256'][:12]}"] if meta.get("kernels_sha256") else []
    revision = str(meta.get("git_revision") or "")
    if revision.endswith("-dirty"):
        facts.append(f"a modified tree on git {revision[:12]}")
    elif revision:
        facts.append(f"git {revision[:12]}")
    return facts


def build_report(folder: Path | str, family: list[str] | None = None) -> str:
    """The report of the capture in ``folder`` as one HTML page: every family, or those ``family``
    selects (see :func:`select_families`; FamilyNotFound, a CaptureError, when an item matches none)."""
    capture = Capture(folder)
    meta, frame = capture.load()
    frame = rank_sites(frame)  # the ranks of a torchrun observation apart in every table
    families = families_of(frame)
    shown = select_families(list(families), family, f"'{capture.name}'")
    kernels = capture.kernels()  # the torch profiler's (the dashboard's Trace tab also reads an nsys export's)
    validation = capture.validation()
    charts = Charts()
    e = html.escape
    title = f"Attention roofline: {capture.name}"
    facts = [", ".join(meta.get("devices") or []) or meta.get("device"), meta.get("torch") and f"torch {meta['torch']}",
             meta.get("triton") and f"triton {meta['triton']}",
             *(f"{name} {version}" for name, version in sorted((meta.get("peers") or {}).items())),
             meta.get("time") and f"measured {meta['time']}", *_code_facts(meta)]
    commands = meta.get("commands") or ([meta["command"]] if meta.get("command") else [])
    parts = [f"<h1>{e(title)}</h1>", f"<p class='meta'>{e(' · '.join(str(f) for f in facts if f))}</p>",
             f"<p class='shows'>{e(_shows_sentence(shown, families, family))}</p>"]
    ranges = baseline_ranges(frame, meta["baseline"]) if meta.get("baseline") else None
    if ranges:
        parts.append(f"<p><b>{e(ranges)}</b> <span class='caption'>{e(_names(frame))}</span></p>")
    notes = [*([meta["note"]] if meta.get("note") else []), *(meta.get("corrections") or [])]
    if commands or notes:
        parts.append("<details><summary>How this capture was made</summary>"
                     + "".join(f"<pre>{e(str(c))}</pre>" for c in commands)
                     + "".join(f"<p class='caption'>{e(str(c))}</p>" for c in notes)
                     + "</details>")
    run = observed.has_observed(frame)
    parts.append("<h3>Contents</h3><ol class='toc'>"
                 + (f"<li><a href='#{OBSERVED_ANCHOR}'>Observed run</a></li>" if run else "") + "".join(
        f"<li><a href='#{anchor(label)}'>{e(label)}</a> <span class='caption'>{len(families[label]):,} rows</span></li>"
        for label in shown) + "</ol>")
    if run:
        parts += _observed_section(meta, frame, charts)
    for label in shown:
        rows = families[label]  # judged against its own device's roofs where the capture is mixed
        device_meta = meta_for_device(meta, rows.device.iloc[0] if "device" in rows else None)
        parts += _family_section(label, rows, device_meta, kernels, validation, charts)
    return page(title, parts)


def write_report(folder: Path | str, out: Path | str | None = None, family: list[str] | None = None) -> Path:
    """Write :func:`build_report` of ``folder`` to ``out`` (default ``<folder>/report.html``, which git
    ignores) atomically, creating its folder, and return the path."""
    out = Path(out) if out else Capture(folder).report_path
    html_text = build_report(folder, family)  # a bad capture or family fails before anything is created
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out, html_text.encode("utf-8"))
    return out
