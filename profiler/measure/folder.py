"""Start a capture folder: refuse one that already holds a capture (unless resuming), measure this
machine's roofs, and write meta.json with the run's metadata, the roofs, what each user
implementation is and how it is costed, and the caller's own keys."""

from __future__ import annotations

import os
import re
import socket
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

from kernels.reference import TOLERANCE
from profiler.measure.ceilings import cache_path, load_cached, measure_ceilings, measure_copy_curve
from profiler.measure.meta import run_metadata
from profiler.model import hardware
from profiler.model.roofs import Roofs
from profiler.registry import Impl
from profiler.store import Capture, CaptureError, ResultStore, merge_parts, to_frame


class FolderError(ValueError):
    """A capture folder that cannot be used as asked; the message says why."""


def default_folder(device_label: str) -> Path:
    """reports/<device>-<time>, for when no folder is named."""
    slug = re.sub(r"-+", "-", "".join(ch if ch.isalnum() else "-" for ch in device_label.lower())).strip("-")
    return Path("reports") / f"{slug[:40]}-{time.strftime('%Y%m%d-%H%M%S')}"


# Files ranks of a distributed sweep leave for a moment in a folder that is being checked
# (profiler.measure.distributed): another rank's probe does not make the folder "hold other files".
PROBE_PREFIXES = (".write-test-", ".view-")


def check_folder(folder: Path, *, resume: bool = False, resumable: bool = True) -> None:
    """Refuse, with a one-line reason, a folder a capture cannot be written to: a file, a place that
    cannot be created or written, a folder with other files in it, or (unless resuming) a capture,
    or the rows an interrupted distributed sweep left in parts/."""
    if folder.exists() and not folder.is_dir():
        raise FolderError(f"--out '{folder}' is a file; name a folder (new, empty"
                          + (", or a capture with --resume)" if resumable else ")"))
    capture = Capture(folder)
    is_capture = capture.started or bool(capture.part_files())
    if is_capture and not resume:
        hint = "pass --resume to add to it or choose another" if resumable else "choose another folder"
        what = "a capture" if capture.started else "rows of an interrupted sweep (parts/)"
        raise FolderError(f"--out '{folder}' already holds {what}; {hint}")
    if folder.is_dir() and not is_capture and any(not p.name.startswith(PROBE_PREFIXES) for p in folder.iterdir()):
        raise FolderError(f"--out '{folder}' holds other files and is not a capture; choose a new or empty folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f"{PROBE_PREFIXES[0]}{socket.gethostname()}-{os.getpid()}"  # ranks check at once
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise FolderError(f"--out '{folder}' cannot be written: {err.strerror or err}") from None
    if resume and capture.results_path.exists():
        try:
            capture.load()
        except CaptureError as err:
            raise FolderError(f"--resume: {err}") from None


def capture_devices(meta: dict) -> set[str]:
    """The devices whose rows a capture holds: meta.json's device, and every one of ``devices``
    (a capture measured on ranks with different GPUs, --allow-mixed)."""
    return set(meta.get("devices") or {}) | ({meta["device"]} if meta.get("device") else set())


def check_resume_devices(folder: Path, labels, allow_mixed: bool = False) -> dict | None:
    """--resume adds rows of the devices the capture already holds: its meta.json (device, datasheet,
    ceilings) describes them, so rows of another machine would be judged against the wrong roofs;
    another device joins only with ``allow_mixed`` (rows then carry their device). Returns the
    stored meta.json, None when there is none."""
    capture = Capture(folder)
    if not capture.meta_path.exists():
        return None
    try:
        stored = capture.meta()
    except CaptureError as err:  # names the file and why
        raise FolderError(f"--resume: {err}") from None
    known = capture_devices(stored)
    new = sorted(set(labels) - known)
    if known and new and not allow_mixed:
        raise FolderError(f"--resume: '{folder}' was captured on '{', '.join(sorted(known))}', this is "
                          f"'{', '.join(new)}'; resume it on that device, or measure here into another --out "
                          "(under torchrun, --allow-mixed adds another device's rows)")
    return stored


def mixed_meta(stored: dict | None, devices: dict[str, tuple[Roofs, str]]) -> dict:
    """meta.json's ``devices`` when a capture holds rows of several devices: each one's datasheet and
    ceilings, those measured now replacing the stored ones of the same device, the others kept."""
    def entry(roofs: Roofs, source: str | None) -> dict:
        return roofs.as_meta() | {"measured_ceilings_source": source}

    earlier = dict((stored or {}).get("devices") or {})
    if stored and stored.get("device") and stored["device"] not in earlier:  # it was a one-device capture
        earlier[stored["device"]] = entry(Roofs.from_meta(stored), stored.get("measured_ceilings_source"))
    return earlier | {name: entry(roofs, source) for name, (roofs, source) in devices.items()}


def name_devices(folder: Path, device: str) -> None:
    """Rows stored without a device (measured when the capture had one device) get that device, as the
    capture becomes one of several devices."""
    capture = Capture(folder)
    if not capture.results_path.exists():
        return
    frame = capture.results()
    empty = frame["device"].fillna("") == ""
    if empty.any():
        frame.loc[empty, "device"] = device
        capture.write_results(to_frame(frame.to_dict("records")))


def user_impls_meta(impls: list[Impl], head_dims=()) -> dict:
    """What a capture records of each user implementation: where it was imported from, its layout,
    and its costing, so the capture can be remodelled and drawn without the user's code."""
    return {i.name: {"spec": i.spec, "description": i.description, "layout": i.extra.get("layout", "bhsd"),
                     "costing": i.costing.as_meta(extra_head_dims=head_dims),
                     **({"tolerance": i.tolerance} if i.tolerance is not None else {})}
            for i in impls if i.spec or i.extra.get("layout")}


def measure_roofs(device: str, label: str, dtypes, status=None, graph: bool = False) -> tuple[Roofs, str]:
    """This machine's roofs (the datasheet's for ``label`` and the measured ceilings, with the copy
    curve this run measures: profiler.measure.ceilings.measure_copy_curve, timed as the rows are,
    ``graph`` for --cuda-graph) and where the ceilings come from; ``status(text)`` is a context
    manager that shows long work (the ceilings take a few seconds)."""
    cached = load_cached(device)  # what measure_ceilings will reuse if it fits (it stores what it measures)
    with status("measuring the roofs (matmul per dtype, device copy, copy by size) ...") if status else nullcontext():
        measured = measure_ceilings(device, dtypes=tuple(sorted(set(dtypes))))
        from_cache = cached == measured
        measured = replace(measured, copy_curve=measure_copy_curve(device, graph=graph))
    # Ceilings come from a per-device cache when one is there (profiler.measure.ceilings): say so, with
    # when they were measured, since a cache filled on a busy machine judges every later capture.
    source = (f"cache {_home_relative(cache_path())} (measured {measured.measured_at}; `python -m profiler ceilings "
              "--no-cache` measures again; the copy curve by this run)") if from_cache else "measured by this run"
    return Roofs(hardware.lookup(label), measured), source


def _home_relative(path: Path) -> str:
    """``path`` as ~/... where it is under the home folder: a shipped capture names no machine's home."""
    try:
        return str(Path("~") / path.relative_to(Path.home()))
    except ValueError:
        return str(path)


def open_capture(device: str, folder: Path, label: str, dtypes, meta: dict, *, impls: list[Impl] = (),
                 head_dims=(), resume: bool = False, resumable: bool = True, status=None,
                 devices: dict[str, tuple[Roofs, str]] | None = None, checked: bool = False,
                 allow_mixed: bool = False, graph: bool = False) -> tuple[ResultStore, Roofs]:
    """The folder's store and the roofs its rows are judged against. ``impls`` and ``head_dims``
    say what to record of user implementations; ``status(text)`` is a context manager that shows
    long work. ``devices`` are the roofs (roofs, source) of every device of this run, already
    measured (by :func:`measure_roofs`, on the ranks of a distributed sweep); ``checked`` says the
    folder was already checked (:func:`check_folder`). Where the capture holds rows of several
    devices (this run's, and on --resume the stored ones; only with ``allow_mixed``), meta.json gets
    ``devices`` and the store sets each row's device (``store.fields``). ``graph``: the rows are timed
    as CUDA-graph replays (--cuda-graph), and so is the copy curve."""
    if not checked:
        check_folder(folder, resume=resume, resumable=resumable)
    devices = devices or {label: measure_roofs(device, label, dtypes, status, graph)}
    stored = None
    if resume:
        stored = check_resume_devices(folder, devices, allow_mixed)
        merge_parts(folder)  # rows an interrupted distributed sweep left in parts/
    roofs, source = devices[label]
    mixed = len(capture_devices(stored or {}) | set(devices)) > 1
    if mixed and stored and not stored.get("devices") and stored.get("device"):
        name_devices(folder, stored["device"])  # the rows of the capture's one device until now
    users = user_impls_meta(list(impls), head_dims)
    # The correctness gate a row passed (profiler.measure.runner): each dtype's largest relative error, and an
    # implementation's own where it registered one (user_impls).
    gate = {"max_rel_err_tolerance": dict(TOLERANCE)}
    meta = (run_metadata(device) | roofs.as_meta() | {"measured_ceilings_source": source} | gate | meta
            | ({"user_impls": users} if users else {}) | ({"devices": mixed_meta(stored, devices)} if mixed else {}))
    return ResultStore(folder, meta, resume=resume, fields={"device": label} if mixed else None), roofs
