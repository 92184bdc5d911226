"""Profiling and roofline analysis of attention kernels.

Layers, each importing only those above it in this list:

- ``profiler.store``: capture folders (``Capture``: meta.json, results.parquet and every other file a
  capture holds), their schema, atomic writes
- ``profiler.model``: the cost model (FLOPs and bytes per implementation and step), datasheet
  peaks, roofs and roofline rows; pure Python, no torch
- ``profiler.measure``: running implementations (timing, correctness, peak memory, NVTX ranges,
  torch-profiler traces, measured ceilings) into a capture folder
- ``profiler.nsight``: Nsight Systems exports and Nsight Compute counters against the model
- ``profiler.views``: plots, tables and the HTML report, from stored captures
- ``profiler.cli``: ``python -m profiler``: argparse, one module per subcommand

``profiler.register`` adds your own attention function to the registry (profiler.registry.register).
"""


def register(fn=None, **kwargs):
    """Add an attention function to the registry; see :func:`profiler.registry.register`."""
    from profiler.registry import register as _register

    return _register(fn, **kwargs)


def observe(out, **kwargs):
    """Observe every attention call made inside a ``with`` block and write a capture folder to ``out``:
    ``with profiler.observe(out="reports/my-run") as run: model.generate(...)``. See
    :func:`profiler.observer.run.observe` for the options."""
    from profiler.observer.run import observe as _observe

    return _observe(out, **kwargs)
