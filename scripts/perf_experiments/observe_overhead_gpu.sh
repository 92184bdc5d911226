#!/usr/bin/env bash
# The GPU round of issue 40 item 7 (what observing costs), after the per-call cost was cut (a Stream
# object per stream, not per event record; torch's lightweight profiler range): the per-call breakdown
# (observe_call_cost.py), nanoGPT's training step eager and compiled (scripts/observe_overhead.py, 7
# rounds), and a small eager+compiled run under --trace torch whose trace, trimmed, becomes tests/data.
# Everything lands in $OUT/observe-overhead.tgz.
set -u
OUT=${OUT:?set OUT}
work=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$work/device.txt"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" | tee -a "$work/device.txt"
python3 scripts/perf_experiments/observe_call_cost.py 2>&1 | grep -v -i warn | tee "$work/call-cost.txt"
python3 -m profiler observe --trace torch --out "$work/eager-small" -- tests/observe_nsys_train.py | tail -12
python3 scripts/perf_experiments/trim_chrome_trace.py "$work/eager-small/traces/observed.json" \
  "$work/eager-small-trace.json.gz" --inside observe/
rm -rf "$work/eager-small/traces"
python3 scripts/observe_overhead.py --model nanogpt --rounds 7 --out "$work/nanogpt-eager" 2>&1 | tail -8
python3 scripts/observe_overhead.py --model nanogpt --compile --rounds 7 --out "$work/nanogpt-compiled" 2>&1 | tail -8
tar czf "$OUT/observe-overhead.tgz" -C "$work" .
