"""The GPU's SM clock and board power while a case is timed, read through NVML (the ``nvidia-ml-py`` package,
``import pynvml``) by a thread beside the timing loop.

An H100 under attention's load runs below its boost clock: the board's power limit sets the clock, and kernels and
moments differ in how far (1.4 to 1.8 GHz against the H100 SXM's 1.98 GHz in docs/perf-notes.md, "Gluon forward,
round 20", read from the SM's own cycle counter). Two timings taken at different clocks differ by that much without
either kernel changing, so each timed row keeps the clock and power it ran at. Round 21 of perf-notes read both
here: a bench grid's 100 ms timings ran at about the boost clock, the same kernels timed back to back for seconds at
1.51 to 1.86 GHz with the board at its 700 W limit; and NVML's power, even its instant field, lags a load's start by
up to a few hundred ms, so a short timing's power_w reads mostly the moment before it. Where NVML is missing (a CPU, a
machine without the package or the driver's library), nothing is read and the row's columns stay empty.
``ATTN_NVML=0`` turns the reading off (to time without the thread beside the timing loop; a capture's meta.json records
the switch).
"""

from __future__ import annotations

import functools
import os
import statistics
import threading

import torch


@functools.cache
def nvml():
    """The ``pynvml`` module, initialised once, or None where it or the driver's NVML library is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # ImportError, or pynvml.NVMLError (a subclass of Exception) without the driver's library
        return None
    return pynvml


def nvml_handle(lib, device: torch.device):
    """NVML's handle of the CUDA device torch calls ``device``, matched by UUID (NVML numbers the physical GPUs, torch
    the visible ones), or None where the UUID is not NVML's."""
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    try:
        return lib.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:  # pynvml.NVMLError
        return None


def instant_power(lib, handle):
    """A function reading the board's power in W, and which reading it is: NVML's instant field
    (``NVML_FI_DEV_POWER_INSTANT``, "instant") where the GPU has it, else ``nvmlDeviceGetPowerUsage`` ("average"). On an
    H100 the latter is an average over the last second (``power.draw.average`` in nvidia-smi's terms), which a 100 ms
    timing after an idle moment reads mostly as the idle moment's power."""
    def field():
        value = lib.nvmlDeviceGetFieldValues(handle, [lib.NVML_FI_DEV_POWER_INSTANT])[0]
        if value.nvmlReturn != lib.NVML_SUCCESS:
            raise lib.NVMLError(value.nvmlReturn)
        return value.value.uiVal / 1e3  # mW

    try:
        field()
        return field, "instant"
    except Exception:  # pynvml.NVMLError, or a pynvml without the field
        return (lambda: lib.nvmlDeviceGetPowerUsage(handle) / 1e3), "average"


@functools.cache
def _reader(index: int):
    """(a function returning the SM clock in MHz and the power in W, which power reading it is) for the CUDA device
    ``index``, or None without NVML or its handle: looked up once a device."""
    lib = nvml()
    handle = nvml_handle(lib, torch.device("cuda", index)) if lib is not None else None
    if handle is None:
        return None
    power, source = instant_power(lib, handle)
    return (lambda: (lib.nvmlDeviceGetClockInfo(handle, lib.NVML_CLOCK_SM), power())), source


def reader(device: torch.device | str):
    """:func:`_reader` for ``device``, or None where nothing is read: not a GPU, ``ATTN_NVML=0``, no NVML."""
    device = torch.device(device)
    if device.type != "cuda" or os.environ.get("ATTN_NVML") == "0":
        return None
    return _reader(device.index if device.index is not None else torch.cuda.current_device())


def power_reading(device: torch.device | str) -> str | None:
    """Which power reading :class:`GpuSampler` takes on ``device`` ("instant" or "average", :func:`instant_power`), or
    None where it reads none (no NVML, not a GPU, ``ATTN_NVML=0``): run metadata records it as ``nvml_power``."""
    found = reader(device)
    return found[1] if found else None


class GpuSampler:
    """While open, a thread reads the SM clock (``nvmlDeviceGetClockInfo(handle, NVML_CLOCK_SM)``, MHz) and the board
    power (:func:`instant_power`, W; ``power_source`` says which reading) every ``period_s``, from the first read on
    entry to the last on exit (around all of a do_bench: its warm-up and estimate too); after it closes,
    ``sm_clock_mhz`` is the median clock and ``power_w`` the mean power of the samples, both None where nothing was
    read. ``read`` stands in for NVML in tests: a callable returning (MHz, W)."""

    def __init__(self, device: torch.device | str, period_s: float = 0.002, read=None):
        self.period_s = period_s
        self.sm_clock_mhz: float | None = None
        self.power_w: float | None = None
        self._read = read
        self.power_source: str | None = None
        if read is None and (found := reader(device)):
            self._read, self.power_source = found
        self._samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self):
        while True:
            try:
                self._samples.append(self._read())
            except Exception:  # a failed read leaves a gap, not a failed timing
                pass
            if self._stop.wait(self.period_s):
                return

    def __enter__(self) -> GpuSampler:
        if self._read is not None:
            self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self._samples:
            self.sm_clock_mhz = float(statistics.median(clock for clock, _ in self._samples))
            self.power_w = float(statistics.fmean(power for _, power in self._samples))
