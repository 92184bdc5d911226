"""Profiling and roofline analysis of attention kernels: cost model, device peaks, measured
ceilings, timing and the ``python -m profiler`` command line."""
