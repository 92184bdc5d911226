"""Start a capture folder: refuse one that already holds a capture (unless resuming), measure this
machine's roofs, and write meta.json with the run's metadata, the roofs, what each user
implementation is and how it is costed, and the caller's own keys."""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

from kernels.reference import TOLERANCE
from profiler.measure.ceilings import cache_path, load_cached, measure_ceilings
from profiler.measure.meta import run_metadata
from profiler.model import hardware
from profiler.model.roofs import Roofs
from profiler.registry import Impl
from profiler.store import Capture, CaptureError, ResultStore, merge_parts


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
        raise FolderError(f"--out '{folder}' is a file; name a folder (new, empty, or a capture with --resume)")
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


def check_same_device(folder: Path, label: str) -> None:
    """--resume adds rows to a capture of this device only: its meta.json (device, datasheet, ceilings)
    describes every row, so rows of another machine would be judged against the wrong roofs."""
    capture = Capture(folder)
    if not capture.meta_path.exists():
        return
    try:
        stored = capture.meta().get("device")
    except CaptureError as err:  # names the file and why
        raise FolderError(f"--resume: {err}") from None
    if stored and stored != label:
        raise FolderError(f"--resume: '{folder}' was captured on '{stored}', this is '{label}'; resume it on that "
                          "device, or measure here into another --out")


def user_impls_meta(impls: list[Impl], head_dims=()) -> dict:
    """What a capture records of each user implementation: where it was imported from, its layout,
    and its costing, so the capture can be remodelled and drawn without the user's code."""
    return {i.name: {"spec": i.spec, "description": i.description, "layout": i.extra.get("layout", "bhsd"),
                     "costing": i.costing.as_meta(extra_head_dims=head_dims),
                     **({"tolerance": i.tolerance} if i.tolerance is not None else {})}
            for i in impls if i.spec or i.extra.get("layout")}


def measure_roofs(device: str, label: str, dtypes, status=None) -> tuple[Roofs, str]:
    """This machine's roofs (the datasheet's for ``label`` and the measured ceilings) and where the
    ceilings come from; ``status(text)`` is a context manager that shows long work (the ceilings take
    a few seconds)."""
    cached = load_cached(device)  # what measure_ceilings will reuse if it fits (it stores what it measures)
    if status is None:
        measured = measure_ceilings(device, dtypes=tuple(sorted(set(dtypes))))
    else:
        with status("measuring the roofs (matmul per dtype, device copy) ..."):
            measured = measure_ceilings(device, dtypes=tuple(sorted(set(dtypes))))
    # Ceilings come from a per-device cache when one is there (profiler.measure.ceilings): say so, with
    # when they were measured, since a cache filled on a busy machine judges every later capture.
    source = (f"cache {cache_path()} (measured {measured.measured_at}; `python -m profiler ceilings --no-cache` "
              "measures again)") if cached == measured else "measured by this run"
    return Roofs(hardware.lookup(label), measured), source


def open_capture(device: str, folder: Path, label: str, dtypes, meta: dict, *, impls: list[Impl] = (),
                 head_dims=(), resume: bool = False, resumable: bool = True, status=None,
                 roofs: tuple[Roofs, str] | None = None, checked: bool = False, any_device: bool = False
                 ) -> tuple[ResultStore, Roofs]:
    """The folder's store and the roofs its rows are judged against. ``impls`` and ``head_dims``
    say what to record of user implementations; ``status(text)`` is a context manager that shows
    long work. ``roofs`` (roofs, source) are ones already measured (by :func:`measure_roofs`, on
    another rank); ``checked`` says the folder was already checked (:func:`check_folder`);
    ``any_device`` resumes a capture of other devices (ranks on several kinds of GPU, --allow-mixed)."""
    if not checked:
        check_folder(folder, resume=resume, resumable=resumable)
    if resume and not any_device:
        check_same_device(folder, label)
        merge_parts(folder)  # rows an interrupted distributed sweep left in parts/
    roofs, source = roofs or measure_roofs(device, label, dtypes, status)
    users = user_impls_meta(list(impls), head_dims)
    # The correctness gate a row passed (profiler.measure.runner): each dtype's largest relative error, and an
    # implementation's own where it registered one (user_impls).
    gate = {"max_rel_err_tolerance": dict(TOLERANCE)}
    meta = (run_metadata(device) | roofs.as_meta() | {"measured_ceilings_source": source} | gate | meta
            | ({"user_impls": users} if users else {}))
    return ResultStore(folder, meta, resume=resume), roofs
