#!/usr/bin/env bash
# The GPU round of issue 40 item 1: observe each example eagerly and compiled (scripts/observe_compiled.py),
# CUDA graphs (reduce-overhead) on nanoGPT, and two small compiled runs whose traces, trimmed, become
# tests/data. Everything lands in $OUT/observe-compiled.tgz (one file: the device returns few files).
set -u
OUT=${OUT:?set OUT}
work=$(mktemp -d)
run() { local limit=$1; shift; echo "\$ $*" >>"$work/commands.txt"; timeout "$limit" "$@" >>"$work/log-$name.txt" 2>&1
        echo "$name: exit $?" >>"$work/commands.txt"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$work/device.txt"
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)" \
  >>"$work/device.txt"
name=nanogpt-small; run 60 python3 -m profiler observe --out "$work/nanogpt-small" -- examples/nanogpt.py --compile \
  --layers 2 --batch 2 --context 256 --steps 2
name=flex-small; run 90 python3 -m profiler observe --out "$work/flex-small" -- examples/flex_window.py --compile \
  --layers 2 --seq 1024 --steps 2
for capture in nanogpt-small flex-small; do
  python3 scripts/perf_experiments/trim_chrome_trace.py "$work/$capture/traces/observed.json" \
    "$work/$capture-trace.json" >>"$work/commands.txt" 2>&1
done
name=flex; run 120 python3 scripts/observe_compiled.py --out "$work/obs" --only flex_window
name=hf; run 200 python3 scripts/observe_compiled.py --out "$work/obs" --only hf_llama
name=cudagraphs; run 90 python3 scripts/observe_compiled.py --out "$work/obs" --only nanogpt --compile-mode reduce-overhead
rm -rf "$work"/obs/*/traces "$work"/*/traces
tar czf "$OUT/observe-compiled.tgz" -C "$work" .
cat "$work/commands.txt"
