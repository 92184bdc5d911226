"""Replay: each distinct observed shape re-run through other implementations, and what each would save.

An observed row says how long the run's own attention took at one shape, over how many calls. The
replay measures every named implementation at that shape (random inputs of the observed shape and
dtype, the same causal mask, in the memory layout the run's calls had: a transformers model's BSHD
views are replayed as BSHD views, so a replay takes the code path the model's calls would take;
profiler.measure.cases, as ``capture`` does) and stores ordinary rows with ``source`` = replay and
their ``layout``; packed (varlen) and other strided layouts are replayed as contiguous BHSD, which
:func:`savings` marks (``same_layout``). :func:`savings` charges each observed row's calls at the replayed
time: saved = observed total − calls × replayed median. Calls an implementation cannot run (a mask
it lacks: explicit masks, block masks, windows, bottom-right causal with Nq != Nkv; or a status
other than ok) keep their observed time. The run would take ``basis − saved``, where the basis is
the GPU's busy time when the trace measured it, else the wall time.
"""

from __future__ import annotations

import pandas as pd

from attention_core.shape import LAYOUTS, Shape
from profiler.store import Capture, ResultStore, to_frame

REPLAYABLE_MASKS = ("none", "causal")
PART = "replay"


def replay_shape(row) -> Shape | None:
    """The shape a replay runs for an observed row, or None when no registered implementation can
    run its mask. 'causal' rows are square or top-left (SDPA's is_causal), as our kernels are."""
    if row["mask"] not in REPLAYABLE_MASKS:
        return None
    return Shape.from_row(row)


def replay_layouts(observed: pd.DataFrame) -> dict[Shape, str]:
    """Per replayable shape, the layout its replay's inputs take: the observed layout of the most calls
    at that shape where make_inputs can lay inputs out so (bhsd, bshd), else bhsd."""
    calls: dict[Shape, dict[str, float]] = {}
    for _, row in observed.iterrows():
        shape = replay_shape(row)
        if shape is not None:
            layout = row.get("layout")
            layout = layout if isinstance(layout, str) and layout in LAYOUTS else "bhsd"
            by_layout = calls.setdefault(shape, {})
            by_layout[layout] = by_layout.get(layout, 0) + row["calls"]
    return {shape: max(by_layout, key=by_layout.get) for shape, by_layout in calls.items()}


def replay_cases(observed: pd.DataFrame, impls) -> list[tuple[Shape, object]]:
    shapes = []
    for _, row in observed.iterrows():
        shape = replay_shape(row)
        if shape is not None and shape not in shapes:
            shapes.append(shape)
    return [(shape, impl) for shape in shapes for impl in impls]


def replay(folder, impls, device, roofs, *, rep_ms: int = 100, progress=None, finished=None) -> pd.DataFrame:
    """Measure ``impls`` at every replayable observed shape of the capture in ``folder``; the rows
    join its results (source = replay). Returns the new rows."""
    from profiler.measure.cases import measure_cases

    capture = Capture(folder)
    meta, frame = capture.load()
    observed = frame[(frame["source"] == "observed") & (frame["status"] == "ok")]
    cases = replay_cases(observed, impls)
    store = ResultStore(folder, meta, part=PART, write_meta=False)
    rows = measure_cases(store, cases, device, roofs, rep_ms=rep_ms, progress=progress, finished=finished,
                         write_kernels=False, layouts=replay_layouts(observed))
    rows = [r | {"source": "replay", "site": ""} for r in rows]
    kept = frame[frame["source"] != "replay"].to_dict("records")
    capture.write_results(to_frame(kept + rows))
    store.path.unlink(missing_ok=True)
    if capture.parts_dir.is_dir() and not any(capture.parts_dir.iterdir()):
        capture.parts_dir.rmdir()
    return to_frame(rows)


def savings(frame: pd.DataFrame, summary: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per observed row and implementation, per implementation for the whole run) what replacing
    the run's attention with each replayed implementation would save."""
    observed = frame[(frame["source"] == "observed") & (frame["status"] == "ok")]
    # An implementation's whole time, never a step's: a stepwise one (naive) also has a row per step.
    replayed = frame[(frame["source"] == "replay") & (frame["status"] == "ok") & (frame["step"] == "total")]
    key = list(Shape.KEY)
    per_row = []
    for impl, runs in replayed.groupby("impl", sort=False):
        times = {tuple(r[k] for k in key): r["time_ms"] for _, r in runs.iterrows()}
        layouts = {tuple(r[k] for k in key): r.get("layout") for _, r in runs.iterrows()}
        for _, obs in observed.iterrows():
            shape_key = tuple(obs[k] for k in key)
            replayable = replay_shape(obs) is not None and shape_key in times
            new_ms = obs["calls"] * times[shape_key] if replayable else obs["total_ms"]
            per_row.append({"impl": impl, "site": obs["site"], "api": obs["impl"], "mode": obs["mode"],
                            "label": Shape.from_row(obs).label, "mask": obs["mask"], "calls": obs["calls"],
                            "observed_ms": obs["total_ms"], "replayed_ms": new_ms,
                            "saved_ms": obs["total_ms"] - new_ms, "replayed": replayable,
                            "layout": obs.get("layout"),
                            "same_layout": bool(replayable and _same(layouts.get(shape_key), obs.get("layout")))})
    per_row = pd.DataFrame(per_row)
    basis_name, basis = ("GPU busy", summary.get("gpu_busy_ms")) if summary.get("gpu_busy_ms") else \
        ("wall", summary.get("wall_s", 0) * 1e3)
    attention = float(observed["total_ms"].sum())
    whole = []
    if len(per_row):
        for impl, group in per_row.groupby("impl", sort=False):
            saved = float(group["saved_ms"].sum())
            whole.append({"impl": impl, "basis": basis_name, "basis_ms": basis, "attention_ms": attention,
                          "attention_share": attention / basis if basis else float("nan"),
                          "new_attention_ms": attention - saved, "saved_ms": saved,
                          "speedup": basis / (basis - saved) if basis and basis > saved else float("nan"),
                          "calls_replayed": int(group.loc[group["replayed"], "calls"].sum()),
                          "calls_other_layout": int(group.loc[group["replayed"] & ~group["same_layout"],
                                                              "calls"].sum()),
                          "calls": int(group["calls"].sum())})
    return per_row, pd.DataFrame(whole)


def _same(replayed, observed) -> bool:
    """Whether a replay ran in the observed layout (a replay row from before layouts were recorded: BHSD)."""
    replayed = replayed if isinstance(replayed, str) and replayed else "bhsd"
    observed = observed if isinstance(observed, str) and observed else "bhsd"
    return replayed == observed
