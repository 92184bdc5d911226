"""Nsight Systems exports (nsys) and Nsight Compute counters set against the model (ncu, validate;
what the counters should read is profiler.model.counters); where one kernel's warps wait, from Nsight
Compute's source page (stalls)."""
