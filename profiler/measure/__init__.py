"""Running implementations on a device into a capture folder: inputs, correctness, timing, peak
memory, NVTX ranges, torch-profiler traces and measured ceilings."""
