"""Nsight Systems exports (nsys) and Nsight Compute counters set against the model (ncu, validate,
with the DRAM model only validate uses in dram_model)."""
